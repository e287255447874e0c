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
"""

from __future__ import annotations

from refimpl.dispatch._numerics import _has_own_inverse as _has_own_inverse  # the tests' hook
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
from refimpl.dispatch.length_bias import LengthBias, length_bias
from refimpl.dispatch.order_statistics import (
    async_speedup,
    expected_max,
    selected_mean,
    selected_pmf,
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
