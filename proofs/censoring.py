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
    scope="the telescoping product for m = 5 factors; the library check on one sample with ties",
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
    "Type II censored exponential lengths: $T = \\sum_{i\\le k} x_{(i)} + (n-k) x_{(k)} = "
    "\\sum_{j \\le k} (n-j+1)(x_{(j)} - x_{(j-1)})$ (symbolic, every $k \\le n \\le 6$); the "
    "normalised spacings of $n$ iid $\\mathrm{Exp}(\\lambda)$ lengths are iid $\\mathrm{Exp}(\\lambda)$ "
    "(Rényi: the order statistics' density $n!\\,\\lambda^n e^{-\\lambda \\sum x}$, the map to "
    "spacings has Jacobian $n!$ and preserves $\\sum x$; symbolic, $n \\le 5$), so "
    "$T \\sim \\mathrm{Gamma}(k, \\lambda)$ (the product of $k$ exponential moment generating "
    "functions is Gamma's, symbolic for $k \\le 4$), and $E[(k-1)/T] = \\lambda$, $E[k/T] = k\\lambda/(k-1)$ "
    "(symbolic in $k$ and $\\lambda$). Library check: `refimpl.exponential_rate_mle` against the "
    "maximiser of the censored log-likelihood $\\sum_{\\text{finished}} \\log f + "
    "\\sum_{\\text{censored}} \\log S$ found numerically (scipy), and its unbiased variant against "
    "$(k-1)/k$ times that maximiser.",
    scope="the identity for every k <= n <= 6; the Rényi spacings for n <= 5; the Gamma law for k <= 4; the expectations symbolic in k and λ",
)
def exponential_rate_estimators() -> None:
    # 1. Total time on test as a sum of normalised spacings (an identity of linear forms).
    for n in range(1, 7):
        xs = sp.symbols(f"x1:{n + 1}", real=True)  # the order statistics x_(1) <= ... <= x_(n)
        for k in range(1, n + 1):
            total = sum(xs[:k]) + (n - k) * xs[k - 1]
            spacings = sum((n - j) * (xs[j] - (xs[j - 1] if j else 0)) for j in range(k))
            assert_zero(sp.expand(total - spacings), label=f"T as spacings, n={n}, k={k}")
    # 2. Rényi: the map from order statistics to normalised spacings D_j = (n-j+1)(x_(j) - x_(j-1))
    #    is linear with determinant n! and keeps sum x = sum D, so the density n! λ^n e^{-λ Σx} of
    #    the order statistics becomes λ^n e^{-λ Σ D}: iid Exp(λ) spacings.
    lam, t = sp.symbols("lambda t", positive=True)
    for n in range(1, 6):
        xs = sp.symbols(f"x1:{n + 1}", real=True)
        d = [(n - j) * (xs[j] - (xs[j - 1] if j else 0)) for j in range(n)]
        jacobian = sp.Matrix([[sp.diff(dj, x) for x in xs] for dj in d]).det()
        assert_zero(jacobian - sp.factorial(n), label=f"Jacobian of the spacings map, n={n}")
        assert_zero(sp.expand(sum(d) - sum(xs)), label=f"sum of spacings, n={n}")
    # 3. A sum of k iid Exp(λ) is Gamma(k, λ): the MGF (λ/(λ-u))^k is Gamma's, for every u < λ
    #    (written u = λ - w with w > 0, so the integral converges symbolically).
    k = sp.symbols("k", positive=True, integer=True)
    kk = k + 1  # k >= 2
    gamma_density = lam**kk * t ** (kk - 1) * sp.exp(-lam * t) / sp.gamma(kk)
    w = sp.symbols("w", positive=True)
    for order in range(1, 5):
        density = lam**order * t ** (order - 1) * sp.exp(-lam * t) / sp.gamma(order)
        mgf = sp.integrate(sp.exp((lam - w) * t) * density, (t, 0, sp.oo), conds="none")
        assert_zero(sp.simplify(mgf - (lam / w) ** order), label=f"Gamma({order}) MGF")
    # 4. The moments of 1/T under Gamma(k, λ).
    unbiased = sp.integrate((kk - 1) / t * gamma_density, (t, 0, sp.oo), conds="none")
    assert_zero(sp.gammasimp(unbiased - lam), label="E[(k-1)/T] - lambda")
    mle = sp.integrate(kk / t * gamma_density, (t, 0, sp.oo), conds="none")
    assert_zero(sp.gammasimp(mle - kk * lam / (kk - 1)), label="E[k/T] - k lambda/(k-1)")
    # 5. Library: against the numerical maximiser of the censored likelihood (no T formula used).
    import scipy.optimize
    import scipy.stats

    rng = np.random.default_rng(11)
    for n_, k_ in [(6, 3), (10, 10), (20, 4), (7, 1)]:
        x = np.sort(rng.exponential(scale=3.0, size=n_))
        durations = np.concatenate((x[:k_], np.full(n_ - k_, x[k_ - 1])))
        observed = np.arange(n_) < k_

        def negative_log_likelihood(
            log_rate: float, d: np.ndarray = durations, o: np.ndarray = observed
        ) -> float:
            law = scipy.stats.expon(scale=float(np.exp(-log_rate)))
            return -float(law.logpdf(d[o]).sum() + law.logsf(d[~o]).sum())

        best = scipy.optimize.minimize_scalar(
            negative_log_likelihood, bracket=(-5.0, 5.0), tol=1e-12
        )
        rate = float(np.exp(best.x))
        assert_close(refimpl.exponential_rate_mle(durations, observed), rate, rel=1e-6)
        if k_ >= 2:
            assert_close(
                refimpl.exponential_rate_mle(durations, observed, unbiased=True),
                (k_ - 1) / k_ * rate,
                rel=1e-6,
            )
