r"""# The fluid model of continuous asynchronous dispatch

$N$ slots each relaunch the instant they finish; the trainer takes completions in completion order,
$B$ per step; a token takes one time unit. In steady state with nothing dropped, completions arrive
at rate $N/E[L]$, so a step takes $\Delta = B\,E[L]/N$.

**Staleness is proportional to length.** Why the launch phase is uniform: in the fluid limit
completions form a stationary stream of constant rate $N/E[L]$, and every completion relaunches its
slot at once, so launches are that same stream; a version lasts a fixed $\Delta$ (it ends after $B$
completions), so the launch instant of a rollout is uniform within its version's interval; and the
new rollout's length is drawn afresh, independent of when it starts. So a rollout of length $\ell$
is launched at a uniformly random phase $U$ of the version clock, independent of $\ell$, and its
staleness is the number of version boundaries it spans,
$s = \lfloor \ell/\Delta + U \rfloor$ with $U \sim U(0, 1)$. Writing $\ell/\Delta = m + f$ with
$m$ an integer and $0 \le f < 1$, $s = m$ with probability $1 - f$ and $m + 1$ with probability
$f$, so $E[s \mid \ell] = \ell/\Delta$ and
$P(s \ge j \mid \ell) = \operatorname{clip}(\ell/\Delta - j + 1, 0, 1)$; averaging over the
(unbiased) trained law, $E[s] = E[L]/\Delta = N/B$ ([FL1](#fl1)).

**Masking turns staleness into length bias.** Dropping samples with $s > \eta$ keeps a rollout of
length $\ell$ with probability $\mathrm{keep}(\ell) = P(s \le \eta \mid \ell) =
\operatorname{clip}(\eta + 1 - \ell/\Delta, 0, 1)$. Since
$\mathrm{keep}(\ell) = \frac1\Delta\int_{\eta\Delta}^{(\eta+1)\Delta} \mathbf 1[\ell \le x]\,dx$,
Fubini gives $E_p[\mathrm{keep}] = \frac1\Delta\int_{\eta\Delta}^{(\eta+1)\Delta} F(x)\,dx =
\int_0^1 F((\eta + t)\Delta)\,dt$, which is non-decreasing in $\Delta$. Dropped rollouts do not fill
batches, so a step needs $B/E_p[\mathrm{keep}]$ completions:
$\Delta = B\,E[L]/(N\,E_p[\mathrm{keep}_\Delta])$. The right side is non-increasing in $\Delta$ and
the left side increasing, so the fixed point is unique, and it lies above $B\,E[L]/N$ ([FL2](#fl2)).
The trained law is $q_\eta(\ell) \propto p(\ell)\,\mathrm{keep}(\ell)$; lengths above
$(\eta + 1)\Delta$ are never trained.

**Staleness of what is trained.** $E[s\,\mathbf 1[s \le \eta]] = \sum_{j=1}^{\eta}
(P(s \ge j) - P(s \ge \eta+1))$ and $P(s \ge j) = E_p[\operatorname{clip}(L/\Delta - j + 1, 0, 1)] =
\frac1\Delta\int_{(j-1)\Delta}^{j\Delta} S(x)\,dx$, which telescopes to
$\frac1\Delta\int_0^{\eta\Delta} S - \frac{\eta}{\Delta}\int_{\eta\Delta}^{(\eta+1)\Delta} S$;
divide by $E_p[\mathrm{keep}]$ for the trained samples' mean ([FL3](#fl3)).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats
import sympy as sp
from scipy import integrate

import refimpl
from proofs._framework import GENERAL, assert_close, assert_zero, claim


@claim(
    "FL1",
    "Fluid staleness: given the fluid premise (a uniform launch phase independent of the length, "
    "derived above), $E[\\lfloor m + f + U\\rfloor] = m + f$ for integer $m$ and $0 \\le f < 1$, "
    "so $E[s \\mid \\ell] = \\ell/\\Delta$, and with $\\Delta = B E[L]/N$, $E[s] = N/B$ "
    "(symbolic). Library check: $E[s] = \\sum_{j \\ge 1} P(s \\ge j)$ integrated by quadrature "
    "from $P(s \\ge j \\mid \\ell)$, against `refimpl.fluid_steady_state` unmasked and masked at a "
    "bound no rollout reaches; `fluid_keep_probability` against $P(s \\le \\eta \\mid \\ell)$ from "
    "the two-point law of $s$. The premise's consequence is checked against the simulator in "
    "the test suite (`test_mean_staleness_of_continuous_dispatch_is_slots_over_batch`).",
    scope=GENERAL,
)
def fluid_staleness() -> None:
    m = sp.symbols("m", integer=True, nonnegative=True)
    f = sp.symbols("f", nonnegative=True)
    expected = m * (1 - f) + (m + 1) * f  # s = m w.p. 1-f, m+1 w.p. f
    assert_zero(expected - (m + f), label="E[floor(x + U)] - x")
    n_slots, batch, mean = sp.symbols("N B EL", positive=True)
    delta = batch * mean / n_slots
    assert_zero(mean / delta - n_slots / batch, label="E[s] - N/B")
    # Independently of the closed form: E[s] = sum_j P(s >= j), each term a quadrature of
    # P(s >= j | l) = clip(l/Δ - j + 1, 0, 1) over the length law (Δ from the step time's definition).
    dist = scipy.stats.lognorm(s=0.5, scale=math.exp(6.0))
    for slots, b in [(128, 256), (64, 8), (7, 3)]:
        delta_ = b * float(dist.mean()) / slots
        total, j = 0.0, 1
        while True:
            term = integrate.quad(
                lambda v, j=j, d=delta_: min(max(v / d - j + 1, 0.0), 1.0) * dist.pdf(v),
                (j - 1) * delta_,
                float(dist.ppf(1 - 1e-16)) + j * delta_,
                points=[j * delta_],
                limit=400,
                epsabs=1e-15,
            )[0]
            total += term
            if term < 1e-14:
                break
            j += 1
        state = refimpl.fluid_steady_state(dist, slots=slots, batch=b)
        assert_close(state.mean_staleness, total, rel=1e-7, label="E[s] unmasked")
        assert_close(state.step_time, delta_, rel=1e-15, label="step time")
        # the masked path (other code) at a bound that keeps every rollout gives the same E[s]
        eta_all = math.ceil(float(dist.ppf(1 - 1e-16)) / delta_) + 1
        masked = refimpl.fluid_steady_state(dist, slots=slots, batch=b, eta=eta_all)
        assert_close(masked.mean_staleness, total, rel=1e-7, label="E[s] masked, nothing dropped")
    lengths = np.array([0.0, 0.3, 1.0, 1.7, 2.0, 2.5, 3.2])
    for eta in (0, 1, 2):
        found = refimpl.fluid_keep_probability(lengths, step_time=1.0, eta=eta)
        for x, keep in zip(lengths, found, strict=True):
            whole, frac = math.floor(x), x - math.floor(x)
            want = (1 - frac) * (whole <= eta) + frac * (whole + 1 <= eta)
            assert_close(float(keep), want, abs_=1e-15, label=f"keep({x}) eta={eta}")


@claim(
    "FL2",
    "Masked fixed point: $E_p[\\operatorname{clip}(\\eta+1-L/\\Delta, 0, 1)] = "
    "\\frac1\\Delta\\int_{\\eta\\Delta}^{(\\eta+1)\\Delta} F$ for every law (symbolic: "
    "$\\mathrm{keep}(\\ell) = \\frac1\\Delta\\int_{\\eta\\Delta}^{(\\eta+1)\\Delta} "
    "\\mathbf 1[\\ell \\le x]\\,dx$ on each of the three ranges of $\\ell$, for symbolic "
    "$\\eta$ and $\\Delta$, then Tonelli; and, as a spot check, the whole expectation for "
    "exponential lengths, $\\eta = 0, 1, 2$), non-decreasing in $\\Delta$ (symbolic for an "
    "undefined $F$: the derivative is $(\\eta + t) F'((\\eta + t)\\Delta) \\ge 0$); `refimpl.fluid_steady_state` solves "
    "$\\Delta = B E[L]/(N E_p[\\mathrm{keep}_\\Delta])$ and its kept fraction and trained mean "
    "length match direct quadrature.",
    scope="general (symbolic η and Δ, any law); the whole expectation spot-checked for exponential lengths, η = 0, 1, 2",
)
def masked_fixed_point() -> None:
    # Every law: keep(ℓ) as an integral of an indicator, checked on each range of ℓ.
    eta_s = sp.Symbol("eta", integer=True, nonnegative=True)
    d_s, xx = sp.symbols("Delta x", positive=True)
    t_s = sp.Symbol("t", nonnegative=True)  # the position inside a range, scaled by Δ
    lo, hi = eta_s * d_s, (eta_s + 1) * d_s

    def keep(length: sp.Expr) -> sp.Expr:  # clip(η + 1 - ℓ/Δ, 0, 1) on the range it is used in
        return eta_s + 1 - length / d_s

    below = sp.integrate(sp.Integer(1), (xx, lo, hi)) / d_s  # ℓ <= ηΔ: 1[ℓ <= x] = 1 on the window
    assert_zero(below - 1, label="keep = 1 below the window")
    inside = lo + t_s * d_s  # ℓ = (η + t)Δ, 0 <= t <= 1: 1[ℓ <= x] = 1 for x in [ℓ, (η+1)Δ]
    assert_zero(sp.integrate(sp.Integer(1), (xx, inside, hi)) / d_s - keep(inside), label="ramp")
    # ℓ >= (η+1)Δ: the indicator is 0 on the whole window, and clip(...) = 0 there too
    assert_zero(sp.Max(0, sp.Min(1, keep(hi + t_s * d_s))), label="keep = 0 above the window")
    big_f = sp.Function("F")
    mean_keep = sp.diff(big_f((eta_s + t_s) * d_s), d_s)
    assert_zero(
        mean_keep - (eta_s + t_s) * sp.Subs(sp.Derivative(big_f(xx), xx), xx, (eta_s + t_s) * d_s),
        label="d/dΔ F((η + t)Δ)",
    )
    lam, delta, x = sp.symbols("lambda Delta x", positive=True)
    pdf = lam * sp.exp(-lam * x)
    cdf = 1 - sp.exp(-lam * x)
    for eta in range(3):
        direct = sp.integrate(pdf, (x, 0, eta * delta)) + sp.integrate(
            (eta + 1 - x / delta) * pdf, (x, eta * delta, (eta + 1) * delta)
        )
        window = sp.integrate(cdf, (x, eta * delta, (eta + 1) * delta)) / delta
        assert_zero(direct - window, label=f"E[keep] eta={eta}")
        t = sp.symbols("t", nonnegative=True)
        derivative = sp.diff(cdf.subs(x, (eta + t) * delta), delta)
        assert_zero(derivative - (eta + t) * pdf.subs(x, (eta + t) * delta), label="d/dΔ >= 0")
    dist = scipy.stats.gamma(a=2.0, scale=300.0)
    mean = float(dist.mean())
    for slots, b, eta in [(128, 256, 0), (32, 8, 1), (16, 64, 2)]:
        state = refimpl.fluid_steady_state(dist, slots=slots, batch=b, eta=eta)
        d = state.step_time
        keep = lambda v, d=d, eta=eta: min(max(eta + 1 - v / d, 0.0), 1.0)  # noqa: E731
        kept = sum(
            integrate.quad(lambda v, keep=keep: keep(v) * dist.pdf(v), lo, hi, epsabs=0, limit=200)[
                0
            ]
            for lo, hi in [(0.0, eta * d), (eta * d, (eta + 1) * d)]
            if hi > lo
        )
        assert_close(state.kept_fraction, kept, rel=1e-8, label="kept fraction")
        assert_close(d, b * mean / (slots * kept), rel=1e-8, label="fixed point")
        length = sum(
            integrate.quad(
                lambda v, keep=keep: v * keep(v) * dist.pdf(v), lo, hi, epsabs=0, limit=200
            )[0]
            for lo, hi in [(0.0, eta * d), (eta * d, (eta + 1) * d)]
            if hi > lo
        )
        assert_close(state.trained_mean_length, length / kept, rel=1e-8, label="trained mean")


@claim(
    "FL3",
    "Mean staleness of the trained samples: $E[s\\,\\mathbf 1[s\\le\\eta]] = "
    "\\frac1\\Delta\\int_0^{\\eta\\Delta} S - \\frac\\eta\\Delta\\int_{\\eta\\Delta}^{(\\eta+1)\\Delta} S$ "
    "(symbolic for exponential lengths, $\\eta \\le 3$, against the direct expectation over "
    "$\\ell$ of $\\sum_s s\\,P(s \\mid \\ell)$); `refimpl.fluid_steady_state` against it.",
    scope="exponential lengths, η <= 3",
)
def trained_staleness() -> None:
    lam, delta, x = sp.symbols("lambda Delta x", positive=True)
    pdf = lam * sp.exp(-lam * x)
    sf = sp.exp(-lam * x)
    for eta in range(4):
        # for ℓ in [mΔ, (m+1)Δ): s = m w.p. 1-f, m+1 w.p. f, f = ℓ/Δ - m; keep only s <= eta
        direct = sp.Integer(0)
        for m in range(eta + 1):
            f = x / delta - m
            part = m * (1 - f) + ((m + 1) * f if m + 1 <= eta else 0)
            direct += sp.integrate(part * pdf, (x, m * delta, (m + 1) * delta))
        formula = (
            sp.integrate(sf, (x, 0, eta * delta))
            - eta * sp.integrate(sf, (x, eta * delta, (eta + 1) * delta))
        ) / delta
        assert_zero(sp.simplify(direct - formula), label=f"E[s; s <= eta], eta={eta}")
    dist = scipy.stats.expon(scale=250.0)
    for slots, b, eta in [(64, 16, 1), (64, 16, 3), (10, 10, 0)]:
        state = refimpl.fluid_steady_state(dist, slots=slots, batch=b, eta=eta)
        d = state.step_time
        value = sum(
            integrate.quad(
                lambda v, m=m, d=d, eta=eta: (
                    (m * (1 - (v / d - m)) + ((m + 1) * (v / d - m) if m + 1 <= eta else 0))
                    * dist.pdf(v)
                ),
                m * d,
                (m + 1) * d,
            )[0]
            for m in range(eta + 1)
        )
        assert_close(state.mean_staleness, value / state.kept_fraction, rel=1e-8, abs_=1e-12)
