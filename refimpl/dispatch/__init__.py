"""Length bias of dispatch policies: inclusion probabilities, IPW, censoring, the fluid model.

Everything here follows conventions §first-k-of-n, §async-dispatch (with masking) and
§when-async-pays. Discrete length laws are pmfs over lengths ``1..M`` (entry
``i`` is the probability of length ``i + 1``); a pmf of :class:`fractions.Fraction` gives exact
``Fraction`` results. Continuous laws are frozen :mod:`scipy.stats` distributions.

One module per formula family, each with its own ``__all__``; every name is also importable from
``refimpl.dispatch`` and from ``refimpl``:

- :mod:`refimpl.dispatch.inclusion`: the probability that a rollout of length ``ℓ`` is among the
  first ``k`` of ``n`` to finish, exactly (``Fraction``) or in float64.
- :mod:`refimpl.dispatch.order_statistics`: the trained length law and its mean, the expected
  maximum of ``n`` lengths, and the speedup of asynchronous dispatch built on it.
- :mod:`refimpl.dispatch.length_bias`: mean ratio, total variation and KL divergence between the
  trained and the true length law.
- :mod:`refimpl.dispatch.ipw`: inverse-propensity weights, the Horvitz–Thompson, Hájek and clipped
  estimators, and their exact moments.
- :mod:`refimpl.dispatch.censoring`: Kaplan–Meier and the exponential MLE on censored lengths.
- :mod:`refimpl.dispatch.fluid`: the fluid model of continuous asynchronous dispatch with masking.

The derivations live in ``proofs/length_bias.py`` (claims ``LB*``), ``proofs/order_statistics.py``
(``OS*``), ``proofs/censoring.py`` (``KM*``) and ``proofs/fluid.py`` (``FL*``); the docs page
``concepts/length-bias`` puts them together.

The names load on first use (PEP 562): importing this package imports no submodule, so a caller
that needs one name (the simulator needs :class:`LengthBias`) does not pay for scipy.stats and
scipy.integrate, which the formula modules import.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the type checker and readers see; at run time __getattr__ loads them
    from refimpl.dispatch._numerics import _has_own_inverse as _has_own_inverse  # the tests' hook
    from refimpl.dispatch._records import LengthBias
    from refimpl.dispatch.censoring import KaplanMeier, exponential_rate_mle, kaplan_meier
    from refimpl.dispatch.fluid import (
        FluidSteadyState,
        fluid_keep_probability,
        fluid_steady_state,
    )
    from refimpl.dispatch.inclusion import inclusion_probability, inclusion_probability_pmf
    from refimpl.dispatch.ipw import (
        EstimatorMoments,
        IPWMoments,
        clipped_ipw_estimate,
        hajek_estimate,
        horvitz_thompson_estimate,
        ipw_estimator_moments,
        ipw_weights,
    )
    from refimpl.dispatch.length_bias import length_bias
    from refimpl.dispatch.order_statistics import (
        async_speedup,
        expected_max,
        selected_mean,
        selected_pmf,
    )

#: The module that defines each name (``refimpl.dispatch.<module>``).
_WHERE: dict[str, str] = {
    "_has_own_inverse": "_numerics",
    "KaplanMeier": "censoring",
    "exponential_rate_mle": "censoring",
    "kaplan_meier": "censoring",
    "FluidSteadyState": "fluid",
    "fluid_keep_probability": "fluid",
    "fluid_steady_state": "fluid",
    "inclusion_probability": "inclusion",
    "inclusion_probability_pmf": "inclusion",
    "EstimatorMoments": "ipw",
    "IPWMoments": "ipw",
    "clipped_ipw_estimate": "ipw",
    "hajek_estimate": "ipw",
    "horvitz_thompson_estimate": "ipw",
    "ipw_estimator_moments": "ipw",
    "ipw_weights": "ipw",
    "LengthBias": "_records",
    "length_bias": "length_bias",
    "async_speedup": "order_statistics",
    "expected_max": "order_statistics",
    "selected_mean": "order_statistics",
    "selected_pmf": "order_statistics",
}
#: The submodules, reachable as attributes (``refimpl.dispatch.fluid``) before anything loaded them.
_SUBMODULES = frozenset(
    {"_numerics", "_records", "censoring", "fluid", "inclusion", "ipw", "order_statistics"}
)

__all__ = [
    "EstimatorMoments",
    "FluidSteadyState",
    "IPWMoments",
    "KaplanMeier",
    "LengthBias",
    "async_speedup",
    "clipped_ipw_estimate",
    "expected_max",
    "exponential_rate_mle",
    "fluid_keep_probability",
    "fluid_steady_state",
    "hajek_estimate",
    "horvitz_thompson_estimate",
    "inclusion_probability",
    "inclusion_probability_pmf",
    "ipw_estimator_moments",
    "ipw_weights",
    "kaplan_meier",
    "length_bias",
    "selected_mean",
    "selected_pmf",
]


def __getattr__(name: str) -> Any:
    """A name of ``__all__`` (or a submodule), imported from its module on first use and kept."""
    if name in _WHERE:
        module = importlib.import_module(f"refimpl.dispatch.{_WHERE[name]}")
        value = getattr(module, name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"refimpl.dispatch.{name}")
    raise AttributeError(f"module 'refimpl.dispatch' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, *_SUBMODULES})


class _Package(types.ModuleType):
    """This package's module type: ``refimpl.dispatch.length_bias`` stays the function.

    Importing a submodule binds it as an attribute of its package, and the function
    :func:`length_bias` has its module's name: an ``import refimpl.dispatch.length_bias`` before the
    function was first looked up would leave the module there. The eager package imported the
    function after the module, so the function won; this keeps it so.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "length_bias" and isinstance(value, types.ModuleType):
            value = value.length_bias
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
