"""The learning section's toy policy, its constants and the tolerance rule of its checks."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from refimpl import learning as lrn
from refimpl.lab._common import Z_TOL

STREAM = 18
M = 16
PENALTY = 0.01
LEARNING_RATE = 3.0
#: The fixed policy of the gradient table (mean length about 4.8 tokens).
THETA_FIXED = np.array([-1.5, 0.5])
#: How far the policy moves per version along its gradient (the lag of a stale behaviour).
LAG = 0.1
#: The training runs start here (mean length about 3.7 tokens: most rollouts fail).
THETA0 = np.array([-1.0, 0.0])
CAP = 2.0
BAND = (0.5, 2.0)
#: Target of the training table: this share of the way from J(θ0) to the optimum.
TARGET_SHARE = 0.8
T_RULE = (
    "Student-t quantile × the standard error from {count} (false alarm ≈ 7e-6 per check, as "
    "4.5 normal standard errors)"
)


#: Two-sided false-alarm rate of one check (that of ``Z_TOL`` standard errors under the normal law).
FALSE_ALARM = 2.0 * float(stats.norm.sf(Z_TOL))


def t_tolerance(dof: int) -> float:
    """Standard errors a mean of ``dof + 1`` replicates is held to, at the lab's false-alarm rate.

    A standard error estimated from few replicates is itself noisy: the mean over it follows
    Student's t, whose quantile at :data:`FALSE_ALARM` exceeds ``Z_TOL``.

    Examples
    --------
    >>> round(t_tolerance(10_000), 2), t_tolerance(5) > 10
    (4.5, True)
    """
    return float(stats.t.isf(FALSE_ALARM / 2.0, dof))


def quality() -> NDArray[np.float64]:
    """Success probability by length: ``0.9 σ((ℓ − 7)/1.5)``: reasoning needs about 7 tokens."""
    ell = np.arange(1, M + 1, dtype=np.float64)
    return np.asarray(0.9 / (1.0 + np.exp(-(ell - 7.0) / 1.5)), dtype=np.float64)


class _Policy(NamedTuple):
    phi: NDArray[np.float64]
    pmf: NDArray[np.float64]
    scores: NDArray[np.float64]
    grad: NDArray[np.float64]
    dlen: NDArray[np.float64]
    baseline: float


def _policy(theta: NDArray[np.float64], q: NDArray[np.float64]) -> _Policy:
    phi = lrn.length_features(M, degree=1)
    h = lrn.stop_hazard(theta, phi)
    p = lrn.hazard_length_pmf(h)
    s = np.asarray(lrn.token_scores(h, phi).sum(axis=1), dtype=np.float64)
    b = float(lrn.mean_reward(p, q, penalty=PENALTY))
    g = np.asarray(lrn.policy_gradient(p, s, q, penalty=PENALTY, baseline=b).mean, dtype=np.float64)
    return _Policy(phi, p, s, g, np.asarray(lrn.length_gradient(p, s), dtype=np.float64), b)
