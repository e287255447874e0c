"""Reading the length options of ``refimpl simulate`` (``--lengths-npy``, ``--lengths-pmf``).

Shared by the queue simulator's command line (:mod:`refimpl.sim.cli`) and the agent simulator's
(:mod:`refimpl.sim.agent`), which both import it at their top: a leaf, so that neither has to import
the other inside a function.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from refimpl.errors import InvalidArgument

__all__ = ["load_lengths_npy", "parse_pmf", "typed_pmf"]


def load_lengths_npy(path: str) -> Any:
    """Read ``--lengths-npy FILE``: an ``N × K`` real matrix, or an ``InvalidArgument`` naming the option."""
    rule = "name a .npy file holding an N×K float64 matrix (row i = slot i's lengths)"
    fix = (
        "Write it with numpy.save(FILE, lengths), lengths a float64 array of shape (slots, K) "
        "holding each slot's rollout lengths in launch order."
    )
    try:
        loaded = np.load(path, allow_pickle=False)
    except MemoryError as err:
        raise InvalidArgument(
            f"--lengths-npy must {rule}; got --lengths-npy={path!r}, whose array does not fit in "
            f"memory ({err}). Pass a smaller matrix."
        ) from None
    except OSError as err:
        reason = err.strerror or str(err)
        raise InvalidArgument(
            f"--lengths-npy must {rule}; got --lengths-npy={path!r}, which cannot be read "
            f"({reason}). Pass the path of an existing, readable file. {fix}"
        ) from None
    except (ValueError, EOFError) as err:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        why = str(err)
        if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):
            why = "no NumPy .npy header: it is not a file written by numpy.save"
        raise InvalidArgument(
            f"--lengths-npy must {rule}; got --lengths-npy={path!r}, which numpy cannot read as a "
            f"plain numeric .npy array ({why}). {fix}"
        ) from None
    if not isinstance(loaded, np.ndarray):  # an .npz archive
        loaded.close()
        raise InvalidArgument(
            f"--lengths-npy must {rule}; got --lengths-npy={path!r}, an .npz archive of arrays "
            f"{sorted(loaded.files)}. Save the one matrix with numpy.save, not numpy.savez."
        )
    if loaded.dtype.kind not in "iuf":
        raise InvalidArgument(
            f"--lengths-npy must be an N×K float64 matrix (row i = slot i's lengths); got an array "
            f"of dtype {loaded.dtype} in {path!r}. Save lengths.astype(numpy.float64). {fix}"
        )
    if loaded.ndim != 2:
        hint = (
            " A pmf over lengths 1..M goes through --lengths-pmf P1,P2,... instead."
            if loaded.ndim == 1
            else ""
        )
        raise InvalidArgument(
            f"--lengths-npy must be an N×K float64 matrix (row i = slot i's lengths); got a "
            f"{loaded.ndim}-D array of shape {loaded.shape} in {path!r}.{hint} {fix}"
        )
    return np.asarray(loaded, dtype=np.float64)


def parse_pmf(text: str) -> Any:
    """Read ``--lengths-pmf P1,...,PM`` into a float array, or an ``InvalidArgument`` naming the option."""
    values = []
    for i, item in enumerate(text.split(","), start=1):
        try:
            values.append(float(item))
        except ValueError:
            raise InvalidArgument(
                f"--lengths-pmf must be comma-separated probabilities of lengths 1..M (P1,...,PM, "
                f"summing to 1); got --lengths-pmf={text!r}, whose entry {i} ({item.strip()!r}, "
                f"the probability of length {i}) is not a number. Pass e.g. --lengths-pmf "
                "0.5,0.3,0.2 (no spaces around the commas unless quoted)."
            ) from None
    return np.array(values, dtype=np.float64)


def typed_pmf(message: str, text: str) -> str:
    """Show ``--lengths-pmf`` as typed, not as the array it was parsed into."""
    return re.sub(
        r"--lengths-pmf=array of shape \(\d+,\): \[[^\]]*\]", f"--lengths-pmf={text!r}", message
    )
