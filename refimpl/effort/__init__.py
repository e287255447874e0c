"""Effort conditioning: the penalty ``k(b)``, the shaped reward, the optimal length and the frontier.

A policy conditioned on a scalar reasoning effort ``b`` is trained with the shaped reward
``r(y; b) = Q(y) − k(b)·ℓ(y)/ℓ_scale`` and the exponentially decaying length price
``k(b) = k0·exp(−(b − b_min)/τ)``. Under the saturating quality model
``Q(ℓ) = q_max·(1 − e^{−ℓ/λ})`` the reward-maximising length is ``L*(b) = max(0, λ ln(q_max/(λ k(b))))``,
linear in ``b`` with slope ``λ/τ`` where positive, and ``b ↦ (L*(b), Q(L*(b)))`` traces a monotone,
concave cost/quality frontier: one checkpoint, many cost/quality points (conventions §effort-conditioning).

The package also carries a toy effort-conditioned policy trained by policy gradient in numpy
(:func:`train_effort_policy`), which shows that one set of parameters conditioned on ``b`` learns
``L*(b)`` and traces the analytic frontier.

One module per family, each with its own ``__all__``; every name is also importable from
``refimpl.effort`` and from ``refimpl``:

- :mod:`refimpl.effort.reward`: the penalty ``k(b)``, the quality model ``Q(ℓ)`` and the shaped
  reward.
- :mod:`refimpl.effort.optimum`: the reward-maximising length ``L*(b)``.
- :mod:`refimpl.effort.frontier`: the cost/quality frontier and its non-dominated points.
- :mod:`refimpl.effort.adaptive`: a mix of problems: adaptive effort against a fixed length budget.
- :mod:`refimpl.effort.policy`: the toy effort-conditioned policy and its training.
- :mod:`refimpl.effort.conditioned_policy`: one checkpoint on a mix, conditioned on the effort and
  on the problem.

Claim ids (``proofs/effort.py``): EF1–EF3 (the penalty), EF4–EF6 (the optimum), EF7–EF9 (the frontier);
(``proofs/effort_mix.py``) EM1–EM6 (a mix of problems: adaptive effort against a fixed budget).
"""

from __future__ import annotations

from refimpl.effort.adaptive import (
    AdaptiveGap,
    DifficultyMix,
    adaptive_gap,
    budget_frontier,
    difficulty_mix,
    frontier_quality,
)
from refimpl.effort.conditioned_policy import ConditionedEffortPolicy, train_conditioned_policy
from refimpl.effort.frontier import EffortFrontier, effort_frontier, pareto_front
from refimpl.effort.optimum import optimal_length
from refimpl.effort.policy import EffortPolicy, train_effort_policy
from refimpl.effort.reward import effort_penalty, saturating_quality, shaped_reward

__all__ = [
    "AdaptiveGap",
    "ConditionedEffortPolicy",
    "DifficultyMix",
    "EffortFrontier",
    "EffortPolicy",
    "adaptive_gap",
    "budget_frontier",
    "difficulty_mix",
    "effort_frontier",
    "effort_penalty",
    "frontier_quality",
    "optimal_length",
    "pareto_front",
    "saturating_quality",
    "shaped_reward",
    "train_conditioned_policy",
    "train_effort_policy",
]
