"""A toy effort-conditioned length policy, trained by policy gradient in numpy.

:func:`train_effort_policy` shows that one set of parameters conditioned on ``b`` learns
``L*(b)`` and traces the analytic frontier (:class:`EffortPolicy` is the result).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_int,
    as_real,
    invalid,
    wrong_type,
)
from refimpl.effort._checks import _out, _penalty_parameters, _quality_parameters
from refimpl.effort.frontier import EffortFrontier

__all__ = ["EffortPolicy", "train_effort_policy"]


_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_HERMITE_WEIGHTS = _HERMITE_WEIGHTS / math.sqrt(2.0 * math.pi)
_MAX_LOG_LENGTH = 700.0  # exp(700) ≈ 1e304: sampled lengths never overflow


def _chebyshev_features(b: NDArray[np.float64], b_min: float, b_max: float, degree: int) -> Any:
    z = 2.0 * (b - b_min) / (b_max - b_min) - 1.0
    phi = np.polynomial.chebyshev.chebvander(z.ravel(), degree)
    return phi.reshape((*z.shape, degree + 1))


class EffortPolicy(NamedTuple):
    r"""An effort-conditioned length policy: one set of parameters, the effort ``b`` as its input.

    The length is log-normal, :math:`\ln \ell \sim \mathcal N(\mu(b), \sigma(b)^2)`, with
    :math:`\mu(b) = \sum_j w_j T_j(z)` and :math:`\ln\sigma(b) = \sum_j v_j T_j(z)`, where :math:`T_j`
    are Chebyshev polynomials and :math:`z = 2(b - b_\text{min})/(b_\text{max} - b_\text{min}) - 1`.
    Made by :func:`train_effort_policy`, which also records the training problem (the quality model
    and the penalty) so that :meth:`evaluate` can score the policy on it.

    Attributes
    ----------
    mean_coef : ndarray of float64, shape (degree + 1,)
        Chebyshev coefficients ``w`` of ``μ(b)`` (the log of the median length).
    log_spread_coef : ndarray of float64, shape (degree + 1,)
        Chebyshev coefficients ``v`` of ``ln σ(b)``.
    b_min, b_max : float
        The effort range the policy was trained on (and may be evaluated on).
    q_max, lam, k0, tau : float
        The training problem: quality model ``Q(ℓ) = q_max (1 − e^{−ℓ/λ})`` and penalty
        ``k(b) = k0 e^{−(b − b_min)/τ}``.
    reward_history : ndarray of float64, one entry per optimiser step
        Mean shaped reward of each training batch (noise included).

    Notes
    -----
    Methods: :meth:`log_length_params` (``μ(b), σ(b)``), :meth:`mean_length`
    (``e^{μ + σ²/2}``), :meth:`sample_lengths` (with an explicit generator) and :meth:`evaluate`
    (expected length and expected quality, the policy's frontier point at each effort). Efforts
    outside ``[b_min, b_max]`` are rejected: polynomial features do not extrapolate.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl import effort_frontier, effort_penalty, train_effort_policy
    >>> problem = dict(q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    >>> policy = train_effort_policy(**problem, b_max=4.0, rng=1, steps=300)
    >>> b = np.linspace(0.0, 4.0, 5)
    >>> points, best = policy.evaluate(b), effort_frontier(b, **problem)
    >>> k = effort_penalty(b, k0=0.005, b_min=0.0, tau=1.0)
    >>> gap = (best.quality - k * best.cost) - (points.quality - k * points.cost)
    >>> bool(np.all(gap >= 0.0)), bool(np.all(gap < 0.01))  # no policy beats L*; this one is close
    (True, True)
    """

    mean_coef: NDArray[np.float64]
    log_spread_coef: NDArray[np.float64]
    b_min: float
    b_max: float
    q_max: float
    lam: float
    k0: float
    tau: float
    reward_history: NDArray[np.float64]

    def _efforts(self, b: ArrayLike) -> NDArray[np.float64]:
        arr = as_float_array(b, name="b")
        outside = (arr < self.b_min) | (arr > self.b_max)
        if np.any(outside):
            first = int(np.flatnonzero(outside.ravel())[0])
            raise invalid(
                "b",
                f"lie in the trained effort range [{self.b_min!r}, {self.b_max!r}]",
                arr,
                f"Entry {first} is {float(arr.ravel()[first])!r}; evaluate inside the range or "
                "train with a wider b_max.",
            )
        return arr

    def log_length_params(self, b: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(μ(b), σ(b))``: mean and standard deviation of ``ln ℓ`` at each effort."""
        arr = self._efforts(b)
        phi = _chebyshev_features(arr, self.b_min, self.b_max, self.mean_coef.size - 1)
        mu = phi @ self.mean_coef
        with np.errstate(over="ignore", under="ignore"):
            sigma = np.exp(phi @ self.log_spread_coef)
        return _out(mu), _out(sigma)

    def mean_length(self, b: ArrayLike) -> NDArray[np.float64]:
        r"""Expected length :math:`E[\ell \mid b] = e^{\mu(b) + \sigma(b)^2/2}`, shape of ``b``."""
        mu, sigma = self.log_length_params(b)
        with np.errstate(over="ignore"):
            return _out(np.exp(mu + 0.5 * sigma**2))

    def sample_lengths(self, b: ArrayLike, *, rng: np.random.Generator) -> NDArray[np.float64]:
        """One sampled length per entry of ``b``, drawn with the given generator."""
        if not isinstance(rng, np.random.Generator):
            raise wrong_type(
                "rng", "a numpy.random.Generator", rng, "Pass rng=np.random.default_rng(seed)."
            )
        mu, sigma = self.log_length_params(b)
        eps = rng.standard_normal(mu.shape)
        return _out(np.exp(np.minimum(mu + sigma * eps, _MAX_LOG_LENGTH)))

    def evaluate(self, b: ArrayLike) -> EffortFrontier:
        r"""The policy's cost/quality point at each effort: ``(E[ℓ | b], E[Q(ℓ) | b])``.

        The quality expectation over the log-normal length is computed by 64-point Gauss–Hermite
        quadrature (deterministic; relative error far below 1e-10 for the spreads training reaches).
        Evaluating the one trained policy at many ``b`` traces its frontier.
        """
        mu, sigma = self.log_length_params(b)
        log_ell = np.minimum(mu[..., None] + sigma[..., None] * _HERMITE_NODES, _MAX_LOG_LENGTH)
        with np.errstate(under="ignore"):
            e = np.exp(-np.exp(log_ell) / self.lam)
        quality = self.q_max * (1.0 - e @ _HERMITE_WEIGHTS)
        return EffortFrontier(cost=self.mean_length(b), quality=_out(quality))


_ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS = 0.9, 0.999, 1e-8


def _adam_step(
    params: NDArray[np.float64],
    grad: NDArray[np.float64],
    m1: NDArray[np.float64],
    m2: NDArray[np.float64],
    *,
    t: int,
    steps: int,
    lr: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    r"""One Adam ascent step ``t`` (1-based) of ``steps``, the step size decayed linearly to 0.

    :math:`m_t = \beta_1 m_{t-1} + (1 - \beta_1) g`, :math:`v_t = \beta_2 v_{t-1} + (1 - \beta_2) g^2`,
    :math:`\theta_t = \theta_{t-1} + \eta_t\, \hat m_t / (\sqrt{\hat v_t} + \epsilon)` with the bias
    corrections :math:`\hat m_t = m_t/(1 - \beta_1^t)`, :math:`\hat v_t = v_t/(1 - \beta_2^t)` and
    :math:`\eta_t = \eta\,(1 - (t - 1)/T)` (Kingma and Ba 2015; ``β = (0.9, 0.999)``, ``ε = 1e-8``).
    """
    m1 = _ADAM_BETA1 * m1 + (1.0 - _ADAM_BETA1) * grad
    m2 = _ADAM_BETA2 * m2 + (1.0 - _ADAM_BETA2) * grad * grad
    step = lr * (1.0 - (t - 1) / steps)
    params = params + step * (m1 / (1.0 - _ADAM_BETA1**t)) / (
        np.sqrt(m2 / (1.0 - _ADAM_BETA2**t)) + _ADAM_EPS
    )
    return params, m1, m2


def _as_generator(rng: Any) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool) and int(rng) >= 0:
        return np.random.default_rng(int(rng))
    raise wrong_type(
        "rng",
        "a numpy.random.Generator or a non-negative int seed",
        rng,
        "Pass rng=np.random.default_rng(seed) or rng=seed.",
    )


def train_effort_policy(
    *,
    q_max: float,
    lam: float,
    k0: float,
    b_min: float,
    tau: float,
    b_max: float,
    rng: np.random.Generator | int,
    steps: int = 1000,
    batch: int = 64,
    group: int = 8,
    degree: int = 6,
    learning_rate: float = 0.05,
    noise: float = 0.0,
    initial_spread: float = 0.5,
) -> EffortPolicy:
    r"""Train one effort-conditioned length policy by policy gradient (REINFORCE, leave-one-out baseline).

    Each step draws ``batch`` efforts stratified over ``[b_min, b_max]``, ``group`` lengths per effort
    from the policy (:class:`EffortPolicy`), scores them with the shaped reward

    .. math::

        r = Q(\ell) - k(b)\,\ell + \text{noise}\cdot\xi, \qquad
        Q(\ell) = q_\text{max}(1 - e^{-\ell/\lambda}),\quad \xi \sim \mathcal N(0, 1),

    and ascends the policy-gradient estimate

    .. math::

        \hat g = \frac{1}{BG} \sum_{i,j} A_{ij}\, \nabla_\theta \ln p_\theta(\ell_{ij} \mid b_i),
        \qquad A_{ij} = \frac{G}{G - 1}\Big(r_{ij} - \frac{1}{G}\sum_{j'} r_{ij'}\Big)

    (the leave-one-out, RLOO, baseline of the same effort) with Adam, the step size decayed linearly
    to 0 over the run.

    Parameters
    ----------
    q_max, lam : float
        Quality model, both ``> 0``.
    k0, b_min, tau : float
        Penalty ``k(b)``, ``k0 > 0``, ``tau > 0``.
    b_max : float
        Highest training effort, ``> b_min``.
    rng : numpy.random.Generator or int
        The only source of randomness (an int is a seed for ``np.random.default_rng``). The same seed
        reproduces the result bit for bit; a Generator is advanced by the call (pass a fresh one, or
        a seed, to repeat a run).
    steps : int, default 1000
        Optimiser steps, ``>= 1``.
    batch : int, default 64
        Efforts per step, ``>= 1``.
    group : int, default 8
        Lengths sampled per effort, ``>= 2`` (the baseline needs the others).
    degree : int, default 6
        Degree of the Chebyshev features of ``b``, ``>= 0``.
    learning_rate : float, default 0.05
        Initial Adam step size, ``> 0``.
    noise : float, default 0.0
        Standard deviation of zero-mean Gaussian reward noise, ``>= 0`` (does not move the optimum).
    initial_spread : float, default 0.5
        Initial ``σ`` of ``ln ℓ``, ``> 0`` with ``σ²`` a normal float64 (``σ >= 1.5e-154``);
        the initial median length is ``λ``.

    Returns
    -------
    EffortPolicy
        The trained parameters, the training problem and the reward history.

    Raises
    ------
    TypeError
        If ``rng`` is neither a Generator nor a non-negative int, or an argument has the wrong type.
    ValueError
        If a parameter is outside its domain (see above).

    Notes
    -----
    The reward-maximising deterministic length is :func:`optimal_length`; the policy learns to shrink
    ``σ(b)`` and to move its mean length towards ``L*(b)``. Measured at the defaults (about 0.2 s on
    one core) with ``q_max = 1, λ = 100, k0 = 0.005, τ = 1`` on ``b ∈ [0, 4]``, seeds 0–3: the learned
    mean length is within 0.6% of ``L*(b)`` over the whole range and the expected quality within 0.35%
    of the analytic frontier (the residual is the bias of the degree-6 features plus the remaining
    spread ``σ ≈ 0.05``); tests/test_effort.py checks 2% and 1%. Reward noise does not move the optimum
    but hides the small reward differences near it: with ``noise=0.05`` the error is about 20% at
    2000 steps, so raise ``group`` and ``steps`` with the noise. Meant for ranges where ``L*(b) > 0``
    (``q_max > λ k0``): where ``L* = 0`` the policy can only drive its lengths towards 0.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl import optimal_length, train_effort_policy
    >>> problem = dict(q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    >>> policy = train_effort_policy(**problem, b_max=4.0, rng=0)
    >>> b = np.array([0.5, 2.0, 3.5])
    >>> bool(np.all(np.abs(policy.mean_length(b) / optimal_length(b, **problem) - 1) < 0.05))
    True
    """
    run = _checked_run(
        q_max=q_max,
        lam=lam,
        k0=k0,
        b_min=b_min,
        tau=tau,
        b_max=b_max,
        rng=rng,
        steps=steps,
        batch=batch,
        group=group,
        degree=degree,
        learning_rate=learning_rate,
        noise=noise,
        initial_spread=initial_spread,
    )
    n_feat = run.degree + 1
    params = np.zeros(2 * n_feat)
    params[0] = math.log(run.lam)  # μ = ln λ, spread initial_spread at the start
    params[n_feat] = math.log(run.spread0)
    m1 = np.zeros_like(params)
    m2 = np.zeros_like(params)
    history = np.empty(run.steps)
    with np.errstate(over="ignore", under="ignore"):
        for t in range(1, run.steps + 1):
            history[t - 1], grad = _policy_gradient(params, run)
            params, m1, m2 = _adam_step(params, grad, m1, m2, t=t, steps=run.steps, lr=run.lr)
    if not np.all(np.isfinite(params)):  # pragma: no cover - guarded by the clipping above
        raise RuntimeError("training diverged; lower learning_rate")
    return EffortPolicy(
        mean_coef=_out(params[:n_feat].copy()),
        log_spread_coef=_out(params[n_feat:].copy()),
        b_min=run.b_min,
        b_max=run.b_max,
        q_max=run.q_max,
        lam=run.lam,
        k0=run.k0,
        tau=run.tau,
        reward_history=_out(history),
    )


class _Run(NamedTuple):
    """The checked settings of :func:`train_effort_policy`."""

    q_max: float
    lam: float
    k0: float
    b_min: float
    tau: float
    b_max: float
    generator: np.random.Generator
    steps: int
    batch: int
    group: int
    degree: int
    lr: float
    noise: float
    spread0: float


def _checked_run(
    *,
    q_max: Any,
    lam: Any,
    k0: Any,
    b_min: Any,
    tau: Any,
    b_max: Any,
    rng: Any,
    steps: Any,
    batch: Any,
    group: Any,
    degree: Any,
    learning_rate: Any,
    noise: Any,
    initial_spread: Any,
) -> _Run:
    """The arguments of :func:`train_effort_policy`, checked in its order of refusals."""
    q_max_, lam_ = _quality_parameters(q_max, lam)
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    if k0_ == 0.0:
        raise invalid("k0", "be > 0 to train a policy (k0 = 0 has no optimum)", k0, "Pass k0 > 0.")
    b_max_ = as_real(b_max, name="b_max", meaning="highest training effort")
    if b_max_ <= b_min_:
        raise invalid("b_max", f"be > b_min={b_min_!r}", b_max, "Pass b_max > b_min.")
    return _Run(
        q_max=q_max_,
        lam=lam_,
        k0=k0_,
        b_min=b_min_,
        tau=tau_,
        b_max=b_max_,
        generator=_as_generator(rng),
        steps=as_int(steps, name="steps", minimum=1, meaning="optimiser steps"),
        batch=as_int(batch, name="batch", minimum=1, meaning="efforts per step"),
        group=as_int(group, name="group", minimum=2, meaning="lengths per effort; RLOO needs >= 2"),
        degree=as_int(degree, name="degree", minimum=0, meaning="Chebyshev degree"),
        lr=as_real(learning_rate, name="learning_rate", low=0.0, low_open=True),
        noise=as_real(noise, name="noise", low=0.0, meaning="reward noise standard deviation"),
        spread0=_as_spread(initial_spread),
    )


def _as_spread(initial_spread: Any) -> float:
    """The initial spread σ > 0, with σ² a normal float64: the score (x − μ)/σ² is 0/0 below."""
    spread = as_real(initial_spread, name="initial_spread", low=0.0, low_open=True)
    if spread * spread < np.finfo(np.float64).tiny:
        raise invalid(
            "initial_spread",
            "be large enough that initial_spread² is a normal float64 (>= 1.5e-154)",
            initial_spread,
            "Pass a larger initial_spread (the default is 0.5).",
        )
    return spread


def _policy_gradient(params: NDArray[np.float64], run: _Run) -> tuple[float, NDArray[np.float64]]:
    """One step's mean reward and REINFORCE gradient (leave-one-out baseline per effort):
    stratified efforts, ``group`` lengths per effort, optional reward noise."""
    rng, batch, group = run.generator, run.batch, run.group
    n_feat = params.size // 2
    strata = np.arange(batch, dtype=np.float64)
    b = run.b_min + (run.b_max - run.b_min) * (strata + rng.uniform(size=batch)) / batch
    phi = _chebyshev_features(b, run.b_min, run.b_max, run.degree)
    mu = phi @ params[:n_feat]
    sigma = np.exp(phi @ params[n_feat:])
    eps = rng.standard_normal((batch, group))
    ell = np.exp(np.minimum(mu[:, None] + sigma[:, None] * eps, _MAX_LOG_LENGTH))
    k = run.k0 * np.exp(-(b - run.b_min) / run.tau)
    reward = -run.q_max * np.expm1(-ell / run.lam) - k[:, None] * ell
    if run.noise > 0.0:
        reward = reward + run.noise * rng.standard_normal((batch, group))
    adv = (reward - reward.mean(axis=1, keepdims=True)) * (group / (group - 1))
    grad_mu = (adv * eps).mean(axis=1) / sigma  # d ln p / d mu = eps / sigma
    grad_log_sigma = (adv * (eps**2 - 1.0)).mean(axis=1)  # d ln p / d ln sigma
    grad = np.concatenate([phi.T @ grad_mu, phi.T @ grad_log_sigma]) / batch
    return float(reward.mean()), grad
