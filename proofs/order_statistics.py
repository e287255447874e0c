r"""# Order statistics: the synchronous step time and the speedup bound

Synchronous dispatch waits for the slowest of $n$ rollouts, so its step time is
$E[\max_{i\le n} L_i] = \int_0^1 F^{-1}(u)\, n u^{n-1}\,du$; continuous asynchronous dispatch keeps every
slot busy and produces a sample per $E[L]$ of slot time. The ratio $E[\max]/E[L]$ bounds the speedup
asynchrony can buy (conventions §when-async-pays).

**Exponential lengths** (rate $\lambda$). By memorylessness the spacings
$L_{(j)} - L_{(j-1)}$ are independent exponentials with rates $(n-j+1)\lambda$ (Rényi), so
$E[L_{(j)}] = \frac1\lambda\sum_{i=n-j+1}^{n} \frac1i = (H_n - H_{n-j})/\lambda$ and
$E[\max] = H_n/\lambda$: the speedup bound is the harmonic number $H_n \approx \ln n + 0.577$
([OS1](#os1)). The mean *trained* length of first-$k$-of-$n$ dispatch is the average of the first $k$
order statistics, $\frac{1}{k\lambda}\sum_{j\le k}(H_n - H_{n-j})$.

**Uniform lengths** on $[a, b]$: $(L_{(n)} - a)/(b-a) \sim \mathrm{Beta}(n, 1)$ with mean $n/(n+1)$, so
$E[\max] = a + (b-a)\frac{n}{n+1}$ and the bound is $(a + (b-a)\frac{n}{n+1}) / \frac{a+b}{2}$, below 2
for every $n$ ([OS2](#os2)). Constant lengths give 1: no asynchrony gain at all.

**The continuous length bias in the $u$ coordinate.** Substituting $u = F(\ell)$ maps every continuous
law to the uniform one; $q/p = \frac nk I_{1-u}(n-k, k)$ depends on $u$ only, so the total variation
and the KL divergence between $q$ and $p$ depend on $(n, k)$ and not on the law. The ratio crosses 1
at $u^*$ with $I_{1-u^*}(n-k,k) = k/n$, and with the antiderivative
$G(u) = \frac kn I_u(k+1, n-k) + u I_{1-u}(n-k, k)$ of [LB2](#lb2),
$\mathrm{TV} = \int_0^{u^*} (\frac nk I_{1-u}(n-k,k) - 1)\,du = \frac nk G(u^*) - u^* = I_{u^*}(k+1, n-k)$
([OS3](#os3)).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats
import sympy as sp
from scipy import integrate, special

import refimpl
from proofs._framework import GENERAL, assert_close, assert_zero, claim


@claim(
    "OS1",
    "Exponential lengths: $E[L_{(j)}] = (H_n - H_{n-j})/\\lambda$ and $E[\\max] = H_n/\\lambda$ "
    "(symbolic integration of the order-statistic density for every $n \\le 6$, $j \\le n$, with "
    "symbolic $\\lambda$); `refimpl.expected_max`, `refimpl.async_speedup` and "
    "`refimpl.selected_mean` against the closed forms up to $n = 1000$.",
    scope="every n <= 6, j <= n (symbolic λ); the library check up to n = 1000",
)
def exponential_order_statistics() -> None:
    lam, x = sp.symbols("lambda x", positive=True)
    cdf = 1 - sp.exp(-lam * x)
    pdf = lam * sp.exp(-lam * x)
    for n in range(1, 7):
        for j in range(1, n + 1):
            dens = (
                sp.factorial(n)
                / (sp.factorial(j - 1) * sp.factorial(n - j))
                * cdf ** (j - 1)
                * (1 - cdf) ** (n - j)
                * pdf
            )
            mean = sp.integrate(sp.expand(x * dens), (x, 0, sp.oo))
            assert_zero(mean - (sp.harmonic(n) - sp.harmonic(n - j)) / lam, label=f"n={n}, j={j}")
    scale = 37.0
    dist = scipy.stats.expon(scale=scale)
    for n in [1, 2, 3, 10, 100, 1000]:
        h_n = math.fsum(1.0 / i for i in range(1, n + 1))
        assert_close(refimpl.expected_max(dist, n=n), scale * h_n, rel=1e-9, label=f"E[max] n={n}")
        assert_close(refimpl.async_speedup(dist, n=n), h_n, rel=1e-9, label=f"speedup n={n}")
    for n, k in [(2, 1), (8, 4), (30, 29), (100, 10)]:
        h = [math.fsum(1.0 / i for i in range(1, m + 1)) for m in range(n + 1)]
        want = scale * math.fsum(h[n] - h[n - j] for j in range(1, k + 1)) / k
        assert_close(refimpl.selected_mean(dist, n=n, k=k), want, rel=1e-9, label=f"E_q n={n}")


@claim(
    "OS2",
    "Uniform lengths on $[a, b]$: $E[\\max] = a + (b-a)\\,n/(n+1)$ and the speedup bound is "
    "$(a + (b-a) n/(n+1))/((a+b)/2)$, symbolically for symbolic $n$, $a$, $b$; "
    "`refimpl.expected_max` and `refimpl.async_speedup` against them.",
    scope=GENERAL,
)
def uniform_order_statistics() -> None:
    n, a, b, t = sp.symbols("n a b t", positive=True)
    # L = a + (b-a) T with T = max of n uniforms on (0, 1), density n t^(n-1)
    mean_max = a + (b - a) * sp.integrate(t * n * t ** (n - 1), (t, 0, 1), conds="none")
    assert_zero(mean_max - (a + (b - a) * n / (n + 1)), label="E[max] uniform")
    speedup = mean_max / ((a + b) / 2)
    assert_zero(speedup - (a + (b - a) * n / (n + 1)) / ((a + b) / 2), label="speedup uniform")
    lo, hi = 100.0, 900.0
    dist = scipy.stats.uniform(loc=lo, scale=hi - lo)
    for nn in [1, 2, 5, 64, 512]:
        want = float(speedup.subs({n: nn, a: lo, b: hi}))
        assert_close(refimpl.async_speedup(dist, n=nn), want, rel=1e-9, label=f"n={nn}")
        assert_close(refimpl.expected_max(dist, n=nn), want * (lo + hi) / 2, rel=1e-9)


@claim(
    "OS3",
    "Continuous laws: $q/p$ at $\\ell$ is $r(u) = \\frac nk I_{1-u}(n-k,k)$ with $u = F(\\ell)$, "
    "decreasing, $= 1$ at $u^*$. $G(u) = \\frac kn I_u(k+1, n-k) + u I_{1-u}(n-k,k)$ has "
    "derivative $I_{1-u}(n-k,k)$ (symbolic in $n$ and $k$, SymPy's regularised incomplete beta), "
    "so $\\int_0^u (r - 1) = I_u(k+1,n-k) + u\\,(r(u) - 1)$, and at $u^*$: "
    "$\\mathrm{TV}(q, p) = I_{u^*}(k+1, n-k)$ for every law (the same identities as exact "
    "polynomials for every $1 \\le k < n \\le 10$). Library check: `refimpl.length_bias` against "
    "direct quadrature of $\\frac12\\int_0^1 |r(u) - 1|\\,du$ and of the KL integral, for an "
    "exponential and a lognormal law.",
    method="symbolic",
    scope="general (symbolic in n and k); as exact polynomials for every 1 <= k < n <= 10",
)
def continuous_bias_is_law_free() -> None:
    n, k = sp.symbols("n k", positive=True, integer=True)
    u, v = sp.symbols("u v", positive=True)

    def reg_beta(a: sp.Expr, b: sp.Expr, x: sp.Expr) -> sp.Expr:
        return sp.betainc_regularized(a, b, 0, x)

    antiderivative = k / n * reg_beta(k + 1, n - k, u) + u * reg_beta(n - k, k, 1 - u)
    derivative = sp.diff(antiderivative, u) - reg_beta(n - k, k, 1 - u)
    assert_zero(sp.gammasimp(sp.expand_func(derivative)), label="G'(u) - I_{1-u}(n-k, k)")
    # The same, and the TV identity, as exact polynomial identities for small n and k (for integer
    # parameters the regularised incomplete beta is a polynomial).
    for nn in range(2, 11):
        for kk in range(1, nn):

            def poly_beta(a: int, b: int, x: sp.Expr) -> sp.Expr:
                body = v ** (a - 1) * (1 - v) ** (b - 1)
                return sp.integrate(body, (v, 0, x)) / sp.integrate(body, (v, 0, 1))

            ratio = sp.Rational(nn, kk) * poly_beta(nn - kk, kk, 1 - u)
            excess = sp.integrate((ratio - 1).subs(u, v), (v, 0, u))
            closed = poly_beta(kk + 1, nn - kk, u) + u * (ratio - 1)
            assert_zero(sp.expand(excess - closed), label=f"∫(r - 1) n={nn} k={kk}")
    for law in [scipy.stats.expon(scale=5.0), scipy.stats.lognorm(s=1.0, scale=np.exp(6.0))]:
        for nn, kk in [(2, 1), (10, 3), (64, 60)]:
            bias = refimpl.length_bias(law, n=nn, k=kk)

            def ratio(x: float, nn: int = nn, kk: int = kk) -> float:
                return nn / kk * float(special.betainc(nn - kk, kk, 1.0 - x))

            s_star = float(special.betaincinv(nn - kk, kk, kk / nn))
            tv = 0.5 * sum(
                integrate.quad(lambda x: abs(ratio(x) - 1), lo, hi, epsabs=1e-14)[0]
                for lo, hi in [(0.0, 1 - s_star), (1 - s_star, 1.0)]
            )
            kl = sum(
                integrate.quad(
                    lambda x: ratio(x) * math.log(ratio(x)) if ratio(x) > 0 else 0.0,
                    lo,
                    hi,
                    epsabs=1e-14,
                    limit=200,
                )[0]
                for lo, hi in [(0.0, 1 - s_star), (1 - s_star, 1.0)]
            )
            assert_close(float(bias.total_variation), tv, rel=1e-9, label=f"TV n={nn} k={kk}")
            assert_close(bias.kl_divergence, kl, rel=1e-7, label=f"KL n={nn} k={kk}")
