"""refimpl: a property-based, verified reference library for asynchronous RL of language models.

The public API is flat: every stable name of conventions §stable-names is importable from ``refimpl`` directly and is
defined in one of the modules below, which own their ``__all__``.

- :mod:`refimpl.dispatch`: length bias of dispatch policies, inclusion probabilities, IPW, censoring,
  the fluid model of continuous dispatch.
- :mod:`refimpl.staleness`: versions, staleness, masks, importance weights, diagnostics.
- :mod:`refimpl.staleness.frameworks`: each framework's staleness setting translated into ``η``
  (also re-exported by :mod:`refimpl.frameworks`, beside its adapters).
- :mod:`refimpl.effort`: the effort penalty ``k(b)``, shaped reward, optimal length, frontier.
- :mod:`refimpl.penalties`: published length penalties (Kimi k1.5, DAPO, cosine, L1).
- :mod:`refimpl.losses`: policy losses with their gradients: aggregation and partition
  invariance, surrogates, KL estimators, advantages, rejection statistics, log-probabilities.
- :mod:`refimpl.sim`: the asynchronous rollout-queue simulator.
- :mod:`refimpl.testing`: strategies and conformance checks for downstream implementations.
- :mod:`refimpl.errors`: the exception family (:class:`RefimplError`, :class:`InvalidArgument`,
  :class:`InvalidArgumentType`) every refusal belongs to.

The flat names are loaded on first use (PEP 562): ``import refimpl`` itself imports neither numpy
nor scipy, so that the ``refimpl`` command (``refimpl.cli``) starts in milliseconds and a Ctrl-C
while it loads reaches :func:`refimpl.cli.main`, which reports it in one line.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

#: The modules whose ``__all__`` make up the flat API, in the order of ``refimpl.__all__``.
#: All of them sit in the formula layer: the root depends on nothing above it (the frameworks'
#: staleness translations are staleness formulas; ``refimpl.frameworks`` re-exports them).
_FLAT = (
    "dispatch",
    "staleness",
    "staleness.frameworks",
    "effort",
    "penalties",
    "losses",
    "errors",
)

if TYPE_CHECKING:  # what the type checker and readers see; at run time __getattr__ loads them
    from refimpl import dispatch, effort, errors, losses, penalties, staleness
    from refimpl.dispatch import *
    from refimpl.effort import *
    from refimpl.errors import *
    from refimpl.losses import *
    from refimpl.penalties import *
    from refimpl.staleness import *
    from refimpl.staleness import frameworks as _staleness
    from refimpl.staleness.frameworks import *

    __all__ = [
        *dispatch.__all__,
        *staleness.__all__,
        *_staleness.__all__,
        *effort.__all__,
        *penalties.__all__,
        *losses.__all__,
        *errors.__all__,
    ]


def _load_flat() -> None:
    names: list[str] = []
    for sub in _FLAT:
        module = importlib.import_module(f"refimpl.{sub}")
        for name in module.__all__:
            globals()[name] = getattr(module, name)
        names.extend(module.__all__)
    globals()["__all__"] = names


def _is_submodule(name: str) -> bool:
    """Whether ``refimpl.<name>`` is a module: every submodule (``refimpl.sim``, ``refimpl.cli``,
    ...) is reachable as an attribute after ``import refimpl``, imported on first use, and
    ``from refimpl import cli``, which looks the name up here first, does not load the flat API
    (numpy, scipy) on the way."""
    if name.startswith("__") or not name.isidentifier():
        return False
    return importlib.util.find_spec(f"refimpl.{name}") is not None


def __getattr__(name: str) -> Any:
    if _is_submodule(name):
        return importlib.import_module(f"refimpl.{name}")
    if name == "__all__" or not name.startswith("__"):
        _load_flat()  # imports the submodules, which also binds them as attributes of refimpl
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'refimpl' has no attribute {name!r}")


def __dir__() -> list[str]:
    _load_flat()
    return sorted(globals())
