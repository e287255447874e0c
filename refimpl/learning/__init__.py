r"""Learning under asynchrony: what length bias, staleness and their corrections do to the gradient.

A toy autoregressive policy whose length emerges token by token: at position :math:`t` it stops with
the hazard :math:`h_\theta(t) = \sigma(\phi(t)^\top\theta)` (logistic in a few features of
:math:`t`), and always stops at the last position :math:`M`, so the length law on :math:`1..M` is

.. math::

    p_\theta(\ell) = h_\theta(\ell) \prod_{t<\ell} \bigl(1 - h_\theta(t)\bigr).

Token :math:`t < \ell` of a length-:math:`\ell` rollout is a *continue* action with probability
:math:`1 - h(t)`, token :math:`\ell` the *stop* action with probability :math:`h(\ell)`; every token
has a probability under every policy version, so token-level importance ratios are real. The reward
is a success with probability :math:`Q(\ell)` minus an optional per-token penalty :math:`c\,\ell`
(the effort penalty :math:`k(b)\,\ell/\ell_\text{scale}` with :math:`c = k(b)/\ell_\text{scale}`):
:math:`\bar R(\ell) = Q(\ell) - c\,\ell`, :math:`\mathrm{Var}(R \mid \ell) = Q(\ell)(1 - Q(\ell))`.

Everything is a finite sum over the support, so the objective, its gradient and the expected
gradient of every estimator are exact (``Fraction`` in, ``Fraction`` out where the inputs are
rational and no logarithm is needed):

- :func:`stop_hazard`, :func:`hazard_length_pmf`, :func:`token_scores`, :func:`token_log_probs`:
  the policy;
- :func:`gradient_moments`: mean and trace of the covariance of a per-sample gradient estimator over
  any trained law (the on-policy gradient :math:`\nabla J = \sum_\ell p_\theta(\ell)\,\bar R(\ell)\,
  \nabla \log p_\theta(\ell)` is the case ``law = p``);
- :func:`first_k_gradient`: the batch gradient under first-:math:`k`-of-:math:`n` dispatch, exactly,
  uncorrected, Horvitz–Thompson, Hájek or clipped IPW (enumeration of batch compositions);
  :func:`first_k_carry_gradient`: the same with carried leftovers (the exact chain of carried
  rollouts);
- :func:`fluid_staleness_pmf`, :func:`fluid_step_time`, :func:`async_gradient`: continuous
  asynchronous dispatch in the fluid model, stale behaviour versions, a staleness mask at
  :math:`\eta` (with inverse propensity for it), and each off-policy correction of
  :mod:`refimpl.staleness`; :func:`async_gradient_exact`: the same in Fractions for rational
  hazards;
- :func:`estimator_status`, :func:`estimator_bias`, :func:`gradient_bias`: whether an estimator
  (correction × baseline × leftover policy) is unbiased, scaled or biased, and its exact bias;
- :func:`train_policy`: the real loop, in which :func:`refimpl.sim.simulate` decides which version
  launches which rollout, which versions generate its tokens and which batch trains it; a biased
  estimator runs only with ``allow_biased=True`` and every run is labelled.

One module per quantity: ``policy``, ``moments``, ``first_k``, ``fluid``, ``asynchronous``,
``estimators``, ``training``; every public name is importable from ``refimpl.learning``.

References
----------
conventions §first-k-of-n, §async-dispatch, §masks-and-weights, §effort-conditioning; the derivation
pages ``derivations/learning`` (claims LRN1–LRN6) and ``derivations/estimator_bias`` (LRN7, LRN8).
"""

from __future__ import annotations

from refimpl.learning.asynchronous import (
    CORRECTIONS,
    EXACT_CORRECTIONS,
    async_gradient,
    async_gradient_exact,
    corrected_scores,
)
from refimpl.learning.estimators import (
    BASELINES,
    EstimatorBias,
    EstimatorStatus,
    estimator_bias,
    estimator_status,
    gradient_bias,
)
from refimpl.learning.first_k import (
    FIRST_K_CORRECTIONS,
    CarryMoments,
    first_k_carry_gradient,
    first_k_gradient,
)
from refimpl.learning.fluid import fluid_staleness_pmf, fluid_step_time
from refimpl.learning.moments import (
    GradientMoments,
    expected_length,
    gradient_moments,
    length_gradient,
    mean_reward,
    policy_gradient,
)
from refimpl.learning.policy import (
    hazard_length_pmf,
    length_features,
    stop_hazard,
    token_log_probs,
    token_scores,
)
from refimpl.learning.training import TrainingRun, train_policy

__all__ = [
    "BASELINES",
    "CORRECTIONS",
    "EXACT_CORRECTIONS",
    "FIRST_K_CORRECTIONS",
    "CarryMoments",
    "EstimatorBias",
    "EstimatorStatus",
    "GradientMoments",
    "TrainingRun",
    "async_gradient",
    "async_gradient_exact",
    "corrected_scores",
    "estimator_bias",
    "estimator_status",
    "expected_length",
    "first_k_carry_gradient",
    "first_k_gradient",
    "fluid_staleness_pmf",
    "fluid_step_time",
    "gradient_bias",
    "gradient_moments",
    "hazard_length_pmf",
    "length_features",
    "length_gradient",
    "mean_reward",
    "policy_gradient",
    "stop_hazard",
    "token_log_probs",
    "token_scores",
    "train_policy",
]
