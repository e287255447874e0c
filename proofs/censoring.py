r"""# Censoring: estimating the true length law from first-$k$-of-$n$ batches

First-$k$-of-$n$ dispatch observes the $k$ shortest lengths and only a lower bound, the cut-off
$x_{(k)}$, for the $n - k$ unfinished rollouts: the data are right-censored (type II). Reweighting by
$1/\pi$ needs $p$, so $p$ must be estimated from censored data.

**Kaplan–Meier.** At the distinct event times $t_1 < t_2 < \dots$ with $d_i$ finished and $r_i$ at
risk (length $\ge t_i$), $\hat S(t) = \prod_{t_i \le t}(1 - d_i/r_i)$. Without censoring the
at-risk counts satisfy $r_{i+1} = r_i - d_i$, so the product telescopes to $r_{m+1}/r_1$: the
fraction of lengths above $t_m$, the empirical survival ([KM1](#km1)). With censoring, the product
spreads the mass of a censored rollout over the lengths above its censoring point. Pool finished
and censored lengths across steps.

**Exponential lengths.** The likelihood of $k$ finished lengths and $n-k$ censored at $x_{(k)}$ is
$\lambda^k e^{-\lambda T}$ with the total time on test $T = \sum_{i\le k} x_{(i)} + (n-k)x_{(k)}$, so
the MLE is $k/T$. By the Rényi representation $T = \sum_{j \le k} (n - j + 1)(x_{(j)} - x_{(j-1)})$
is a sum of $k$ independent $\mathrm{Exp}(\lambda)$ variables, $T \sim \mathrm{Gamma}(k, \lambda)$,
so $E[1/T] = \lambda/(k-1)$: the MLE is biased up by $k/(k-1)$ and $(k-1)/T$ is unbiased
([KM2](#km2)).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

import refimpl
from proofs._framework import assert_close, assert_zero, claim


@claim(
    "KM1",
    "Without censoring the product-limit estimate telescopes to the empirical survival: "
    "$\\prod_{i \\le m} (1 - d_i/r_i) = r_{m+1}/r_1$ when $r_{i+1} = r_i - d_i$ (symbolic, "
    "$m = 5$); `refimpl.kaplan_meier` against the empirical survival of a sample with ties.",
)
def kaplan_meier_without_censoring() -> None:
    r1 = sp.symbols("r1", positive=True)
    ds = sp.symbols("d1:6", positive=True)
    at_risk = [r1]
    for d in ds:
        at_risk.append(at_risk[-1] - d)
    product = sp.Mul(*[1 - d / r for d, r in zip(ds, at_risk, strict=False)])
    assert_zero(sp.cancel(product - at_risk[-1] / r1), label="telescoping product")
    rng = np.random.default_rng(5)
    sample = rng.integers(1, 20, size=200).astype(float)
    km = refimpl.kaplan_meier(sample, np.ones_like(sample))
    for t, s in zip(km.times, km.survival, strict=True):
        assert_close(float(s), float(np.mean(sample > t)), rel=1e-13, abs_=1e-15, label=f"t={t}")


@claim(
    "KM2",
    "Type II censored exponential lengths: with $T \\sim \\mathrm{Gamma}(k, \\lambda)$, "
    "$E[(k-1)/T] = \\lambda$ and $E[k/T] = k\\lambda/(k-1)$ (symbolic in $k$ and $\\lambda$); "
    "`refimpl.exponential_rate_mle` computes $k/T$ and $(k-1)/T$ with "
    "$T = \\sum_{i \\le k} x_{(i)} + (n-k) x_{(k)}$.",
)
def exponential_rate_estimators() -> None:
    k = sp.symbols("k", positive=True, integer=True)
    lam, t = sp.symbols("lambda t", positive=True)
    kk = k + 1  # k >= 2
    gamma_density = lam**kk * t ** (kk - 1) * sp.exp(-lam * t) / sp.gamma(kk)
    unbiased = sp.integrate((kk - 1) / t * gamma_density, (t, 0, sp.oo), conds="none")
    assert_zero(sp.gammasimp(unbiased - lam), label="E[(k-1)/T] - lambda")
    mle = sp.integrate(kk / t * gamma_density, (t, 0, sp.oo), conds="none")
    assert_zero(sp.gammasimp(mle - kk * lam / (kk - 1)), label="E[k/T] - k lambda/(k-1)")
    x = np.array([0.3, 1.1, 0.2, 2.5, 0.9, 4.0])
    n, kk_ = x.size, 3
    order = np.sort(x)
    total = order[:kk_].sum() + (n - kk_) * order[kk_ - 1]
    durations = np.concatenate((order[:kk_], np.full(n - kk_, order[kk_ - 1])))
    observed = np.arange(n) < kk_
    assert_close(refimpl.exponential_rate_mle(durations, observed), kk_ / total, rel=1e-15)
    assert_close(
        refimpl.exponential_rate_mle(durations, observed, unbiased=True),
        (kk_ - 1) / total,
        rel=1e-15,
    )
