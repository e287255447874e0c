r"""Documented tolerances for comparing an implementation with the reference.

Two families, because the two ways of checking see different numbers:

- :data:`FUNCTION`: a float64 candidate called in-process by :func:`refimpl.testing.check_conformance`
  and by the pytest plugin. Another correct float64 formula (``exp(a)/exp(b)`` for ``exp(a − b)``, a
  binomial sum for a regularised incomplete beta, another summation order in V-trace) differs from the
  reference by a few ulp to ``~1e-12``; a real bug differs by far more.
- :data:`TRACE`: values a trainer *logged*, typically computed in float32 on an accelerator and
  written with 7–9 significant digits. Masks and staleness are integers and compared exactly.

A value ``found`` agrees with ``expected`` when

.. math::

    |\text{found} - \text{expected}| \le \text{atol} + \text{rtol}\,|\text{expected}|,

with NaN never agreeing and an infinity agreeing only with the same infinity (:func:`agree`).
``refimpl check --rtol/--atol`` overrides :data:`TRACE` (e.g. for bf16 logging: ``--rtol 1e-2``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["EXACT", "FUNCTION", "TRACE", "Tolerance", "agree"]


class Tolerance(NamedTuple):
    """Relative and absolute tolerance: ``|found − expected| <= atol + rtol·|expected|``.

    Attributes
    ----------
    rtol : float
        Relative tolerance, ``>= 0``.
    atol : float
        Absolute tolerance, ``>= 0``.

    Examples
    --------
    >>> from refimpl.testing.tolerances import FUNCTION
    >>> FUNCTION["staleness_mask"]
    Tolerance(rtol=0.0, atol=0.0)
    """

    rtol: float
    atol: float


#: Exact agreement (integer-valued quantities: masks, staleness).
EXACT = Tolerance(rtol=0.0, atol=0.0)

#: In-process float64 candidates (conformance checks, the pytest plugin), by spec name.
FUNCTION: dict[str, Tolerance] = {
    "effort_penalty": Tolerance(rtol=1e-9, atol=1e-300),
    "inclusion_probability": Tolerance(rtol=1e-9, atol=1e-12),
    "staleness_mask": EXACT,
    "staleness": EXACT,
    "tis": Tolerance(rtol=1e-9, atol=0.0),
    "masked_is": Tolerance(rtol=1e-9, atol=0.0),
    "vtrace": Tolerance(rtol=1e-9, atol=1e-9),
}

#: Logged traces checked by ``refimpl check`` (float32 accelerator arithmetic), by spec name.
TRACE: dict[str, Tolerance] = {
    "effort_penalty": Tolerance(rtol=1e-5, atol=1e-8),
    "inclusion_probability": Tolerance(rtol=1e-5, atol=1e-8),
    "staleness_mask": EXACT,
    "staleness": EXACT,
    "tis": Tolerance(rtol=1e-5, atol=1e-8),
    "masked_is": Tolerance(rtol=1e-5, atol=1e-8),
}


def agree(found: ArrayLike, expected: ArrayLike, tolerance: Tolerance) -> NDArray[np.bool_]:
    """Elementwise agreement within ``tolerance``; NaN never agrees, infinities only with themselves.

    Parameters
    ----------
    found, expected : array_like
        Values to compare (broadcast together).
    tolerance : Tolerance
        The tolerance to apply.

    Returns
    -------
    ndarray of bool
        True where ``found`` agrees with ``expected``.

    Examples
    --------
    >>> from refimpl.testing.tolerances import Tolerance, agree
    >>> inf, nan = float("inf"), float("nan")
    >>> agree([1.0, 1.1, nan, inf, 1e308], [1.0, 1.0, nan, inf, inf], Tolerance(1e-6, 0.0))
    array([ True, False, False,  True, False])
    """
    f = np.asarray(found, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(f - e) <= tolerance.atol + tolerance.rtol * np.abs(e)
    finite = np.isfinite(f) & np.isfinite(e)
    same_inf = np.isinf(f) & (f == e)
    return np.asarray((finite & close) | same_inf, dtype=np.bool_)
