r"""# Decoupled PPO: the PPO clip on the proximal policy times the behaviour weight

Notation for one token: $l = \log\pi_\theta(y)$ is what the gradient is taken with respect to,
$l_p$ the proximal log-probability (the weights before the update) and $l_b$ the behaviour
log-probability (the policy that sampled the token); both are fixed. $r = e^{l - l_p}$ is the PPO
ratio, $v = e^{l_p - l_b}$ the behaviour ratio, $A$ the advantage, $[\lambda, C]$ the bounds of the
weight. The loss is minimised; $\mathrm{sg}[w]$ contributes its value and no derivative.

**The product and its gradient (DP1).** Decoupled PPO writes the objective as
$\ell = \mathrm{sg}[w]\,\ell^{\text{PPO}}(l - l_p)$ with
$\ell^{\text{PPO}} = \max(-Ar, -A\,\mathrm{clip}(r, 1-\varepsilon_l, 1+\varepsilon_h))$. The weight
depends on $l_p$ and $l_b$ only, so $\partial\ell/\partial l = w\,\partial\ell^{\text{PPO}}/\partial l$
on every region of the clip: $-wAr$ where the unclipped branch is active, $0$ where the clip is.
At $l = l_p$ ($r = 1$, inside the clip) the gradient is $-wA$: with $w = v$ this is the
importance-weighted policy gradient of a sample from $\mu$, $\nabla_\theta\log\pi_\theta\cdot
\frac{\pi_\theta}{\mu}A$ evaluated at $\theta = \theta_{\text{prox}}$. With $l_b = l_p$ (no
staleness, $v = 1$) the loss is plain PPO.

**Rejection and truncation (DP2).** Rejection keeps $w = v$ on $\lambda \le v \le C$ and sets
$w = 0$ elsewhere; truncation sets $w = \mathrm{clip}(v, \lambda, C)$. A rejected token has loss
and gradient exactly 0, a truncated one keeps its gradient at the bound's scale. AReaL divides
the sum by the count of the tokens *before* rejection: for a batch of $N$ valid tokens of which
$K$ are kept, the token mean is $\frac1N\sum_{\text{kept}} w\ell^{\text{PPO}}$, which is
$\frac KN$ times the mean over the kept tokens (dividing by $K$ would scale every kept token's
gradient up by $N/K$ as the staleness grows).

**Clamping a row (DP3).** At the row levels every valid token carries the row's geometric-mean
ratio $g = (\prod_t v_t)^{1/L}$. AReaL's clamp acts on the rows whose statistic ($g$ itself, or
the product $P = g^L$) leaves $[\lambda, C]$, with $\lambda \le 1 \le C$. A row whose
statistic is inside has $g$ inside too: for the product, $\lambda \le P \le C$ gives
$\lambda \le \lambda^{1/L} \le g \le C^{1/L} \le C$. So clamping *every* row's $g$ to
$[\lambda, C]$ is the same weight, whichever statistic AReaL reads.

**Rejecting on a KL estimate (DP4).** With $d = l_p - l_b$, AReaL's estimates are
$k_1 = d$, $k_2 = d^2/2$ and $k_3 = e^{-d} - 1 + d$. $k_2 \ge 0$, and $k_3 \ge 0$ with equality
only at $d = 0$ ($k_3' = 1 - e^{-d}$ vanishes only there and $k_3'' = e^{-d} > 0$). A token, or
a row by the mean, sum or maximum of its estimates, is kept when the statistic lies in
$[\lambda, C]$, and a kept token keeps its own weight $v = e^{d}$ (not the row's geometric
mean). For the non-negative $k_2$ and $k_3$ the mean of a row is at most its sum and its
maximum, so a row kept by the sum or the maximum is kept by the mean.

**The largest ratio (DP5).** At ``agg="max"`` the row's statistic is its largest log-ratio
$\max_t d_t$, its weight still the geometric mean $g = e^{\bar d}$. Since $\bar d \le \max_t d_t$,
a row inside $[\lambda, C]$ has $g \le C$, but $g$ may lie below $\lambda$ (log2-ratios $0$ and
$-3$ with $\lambda = 1/2$: the maximum $1$ is inside, $g = 2^{-3/2} < 1/2$). AReaL clamps only
the rows outside the bounds, so unlike DP3 the clamp of every row is a different weight there;
refimpl keeps $g$ in a row inside.

The checks evaluate `refimpl.losses.decoupled_ppo_loss` at exact dyadic points (ratios and
weights powers of two, advantages dyadic) against values computed here independently, in
`Fraction` arithmetic, from the definition.
"""

from __future__ import annotations

import math
from fractions import Fraction

import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.aggregation import aggregate_loss
from refimpl.losses.decoupled import decoupled_ppo_loss

lg, lp, lb, A = sp.symbols("l l_p l_b A", real=True)
EL, EH = sp.symbols("e_l e_h", positive=True)


def _branch_gradient(branch: str) -> sp.Expr:
    """∂/∂l of sg[w]·(the active PPO branch): w held fixed while differentiating."""
    w = sp.Symbol("w", positive=True)
    ratio = sp.exp(lg - lp)
    ppo = {"unclipped": -A * ratio, "clip low": -A * (1 - EL), "clip high": -A * (1 + EH)}[branch]
    return sp.diff(w * ppo, lg).subs(w, sp.exp(lp - lb))


def _ppo(r: Fraction, a: Fraction, low: Fraction, high: Fraction) -> tuple[Fraction, Fraction]:
    """(ℓ^PPO, ∂ℓ^PPO/∂l) of one token at ratio r, from the definition (no kink drawn here)."""
    clipped = min(max(r, 1 - low), 1 + high)
    if clipped == r:  # inside the clip: both branches are −A·r
        return -a * r, -a * r
    unclipped, other = -a * r, -a * clipped
    return (unclipped, -a * r) if unclipped > other else (other, Fraction(0))


def _weight(v: Fraction, lower: Fraction, cap: Fraction, action: str) -> Fraction:
    if action == "clip":
        return min(max(v, lower), cap)
    return v if lower <= v <= cap else Fraction(0)


@claim(
    "DP1",
    r"Decoupled PPO: the gradient of $\mathrm{sg}[w]\,\ell^{\text{PPO}}$ is $w$ times the PPO "
    r"gradient on every branch (0 on a clipped one), $-wA$ at $\pi_\theta = \pi_{\text{prox}}$, "
    r"and $l_b = l_p$ gives plain PPO; refimpl matches these values at dyadic points.",
    scope=GENERAL,
)
def decoupled_gradient_is_the_weighted_ppo_gradient() -> None:
    v = sp.exp(lp - lb)
    assert_zero(_branch_gradient("unclipped") - v * (-A * sp.exp(lg - lp)), label="DP1 unclipped")
    assert_zero(_branch_gradient("clip low"), label="DP1 clipped below")
    assert_zero(_branch_gradient("clip high"), label="DP1 clipped above")
    assert_zero(_branch_gradient("unclipped").subs(lg, lp) + v * A, label="DP1 on-policy")
    assert_zero(v.subs(lb, lp) - 1, label="DP1 no staleness")
    # refimpl at ratios and weights that are powers of two (exact in float64)
    low, high = Fraction(1, 4), Fraction(1, 2)
    cases = [  # (log2 r, log2 v, A)
        (0, 1, Fraction(3, 2)),
        (-1, 2, Fraction(-1, 2)),
        (1, -1, Fraction(5, 4)),
        (1, 0, Fraction(-3, 4)),
        (-1, -2, Fraction(2)),
    ]
    for kr, kv, a in cases:
        r, v_ = Fraction(2) ** kr, Fraction(2) ** kv
        loss, grad = _ppo(r, a, low, high)
        got = decoupled_ppo_loss(
            [[kr * math.log(2.0)]], [[0.0]], [[-kv * math.log(2.0)]], [[float(a)]],
            eps_low=float(low), eps_high=float(high),
        )  # fmt: skip
        assert float(got.loss[0, 0]) == float(v_ * loss), f"DP1 loss at r={r}, v={v_}"
        assert float(got.grad[0, 0]) == float(v_ * grad), f"DP1 gradient at r={r}, v={v_}"


@claim(
    "DP2",
    r"Rejection zeroes a token's loss and gradient, truncation clamps its weight to "
    r"$[\lambda, C]$; AReaL's token mean divides by the valid tokens before rejection, "
    r"$K/N$ times the mean over the $K$ kept; refimpl's loss and that mean equal the exact sums.",
    method="exact",
    scope="one 2 × 3 batch with one padded token, weights 1/4 to 8, bounds [1/2, 4]",
)
def rejection_truncation_and_the_denominator() -> None:
    kr = [[0, 1, -1], [0, 0, 2]]  # log2 of π_θ/π_prox
    kv = [[3, 0, -2], [1, -1, 0]]  # log2 of π_prox/μ: 8 and 1/4 are outside [1/2, 4]
    adv = [[Fraction(1), Fraction(-1, 2), Fraction(2)], [Fraction(-1), Fraction(3, 4), Fraction(9)]]
    mask = [[1, 1, 1], [1, 1, 0]]
    low, high, lower, cap = Fraction(1, 5), Fraction(1, 5), Fraction(1, 2), Fraction(4)
    ln2 = math.log(2.0)
    for action in ("mask", "clip"):
        want: list[list[Fraction]] = []
        for i in range(2):
            row = []
            for j in range(3):
                w = _weight(Fraction(2) ** kv[i][j], lower, cap, action) * mask[i][j]
                row.append(w * _ppo(Fraction(2) ** kr[i][j], adv[i][j], low, high)[0])
            want.append(row)
        got = decoupled_ppo_loss(
            [[k * ln2 for k in row] for row in kr],
            [[0.0] * 3, [0.0] * 3],
            [[-k * ln2 for k in row] for row in kv],
            [[float(x) for x in row] for row in adv],
            eps_low=float(low), eps_high=float(high), cap=float(cap), lower=float(lower),
            above_cap=action, mask=mask,
        )  # fmt: skip
        assert got.loss.tolist() == [[float(x) for x in row] for row in want], f"DP2 {action}"
        n = sum(map(sum, mask))
        mean = sum(sum(row) for row in want) / n
        got_mean = float(aggregate_loss(got.loss, mask, mode="token_mean"))
        assert_close(got_mean, float(mean), rel=4e-16, label=f"DP2 token mean ({action})")
        if action == "mask":
            kept = [
                (i, j)
                for i in range(2)
                for j in range(3)
                if mask[i][j] and _weight(Fraction(2) ** kv[i][j], lower, cap, action) > 0
            ]
            kept_mean = sum(want[i][j] for i, j in kept) / len(kept)
            assert mean == Fraction(len(kept), n) * kept_mean, "DP2 K/N"
            assert got.grad[0, 0] == 0.0, "DP2 the rejected weight 8 carries no gradient"


@claim(
    "DP3",
    r"Row levels: with $\lambda \le 1 \le C$, a row whose product of ratios lies in "
    r"$[\lambda, C]$ has its geometric mean in $[\lambda, C]$, so AReaL's clamp of the rows out "
    r"of bounds is the clamp of every row; refimpl's clamped weight is that, for both statistics.",
    method="exact",
    scope="rows of 1 to 4 tokens with log2-ratios in -3..3, bounds 1/4, 1/2, 1 and 1, 2, 4 "
    "(refimpl evaluated on the rows of 1 and 2 tokens)",
)
def clamping_every_row_is_clamping_the_rows_out_of_bounds() -> None:
    import itertools

    ln2 = math.log(2.0)
    for length in range(1, 5):
        for ks in itertools.product(range(-3, 4), repeat=length):
            total = Fraction(sum(ks))
            for low, cap in itertools.product((-2, -1, 0), (0, 1, 2)):  # log2 of the bounds
                inside_product = low <= total <= cap
                mean = total / length
                if inside_product:
                    assert low <= mean <= cap, f"DP3 {ks} bounds 2^{low}, 2^{cap}"
                if length > 2:  # the inequality at every length; refimpl on the short rows
                    continue
                want = 2.0 ** float(min(max(mean, Fraction(low)), Fraction(cap)))
                lb = [[-k * ln2 for k in ks]]
                for level in ("geometric", "sequence"):
                    got = decoupled_ppo_loss(
                        [[0.0] * length], [[0.0] * length], lb, [[-1.0] * length],
                        cap=2.0**cap, lower=2.0**low, above_cap="clip", level=level,
                    )  # fmt: skip
                    assert_close(float(got.grad[0, 0]), want, rel=4e-15, label=f"DP3 {ks}")


def _kl(metric: str, d: sp.Expr) -> sp.Expr:
    """AReaL's estimate of ``d = log(π_prox/μ)`` (KLEstimator k1, k2, k3)."""
    return {"kl_k1": d, "kl_k2": d**2 / 2, "kl_k3": sp.exp(-d) - 1 + d}[metric]


@claim(
    "DP4",
    r"KL rejection: $k_2 \ge 0$, $k_3 = e^{-d} - 1 + d \ge 0$ (0 only at $d = 0$); a token, or a "
    r"row by the mean, sum or maximum of its estimates, is kept iff that lies in $[\lambda, C]$, "
    r"with the token's own weight $e^{d}$; refimpl's gradients equal the exact ones.",
    method="exact",
    scope="the inequalities in general; refimpl on rows of 1 and 2 tokens with log2-ratios in "
    "-2..2, bounds C in {1/4, 1, 2} and lower None or -1/2",
)
def kl_rejection_keeps_the_tokens_inside_the_bounds() -> None:
    import itertools

    d = sp.Symbol("d", real=True)
    k3 = _kl("kl_k3", d)
    assert_zero(sp.diff(k3, d) - (1 - sp.exp(-d)), label="DP4 k3'")
    assert sp.solve(sp.diff(k3, d), d) == [0], "DP4 k3' vanishes only at 0"
    assert sp.diff(k3, d, 2).is_positive, "DP4 k3 is convex"
    assert k3.subs(d, 0) == 0, "DP4 k3(0) = 0"
    ln2 = math.log(2.0)
    stat = {"token": None, "geometric": "mean", "sequence": "sum", "max": "max"}
    for length in range(1, 3):
        for ks in itertools.product(range(-2, 3), repeat=length):
            est = {m: [_kl(m, k * sp.log(2)) for k in ks] for m in ("kl_k1", "kl_k2", "kl_k3")}
            for metric, cap, lower, level in itertools.product(
                est, (sp.Rational(1, 4), sp.Integer(1), sp.Integer(2)), (None, -0.5), stat
            ):
                low = -sp.oo if lower is None else sp.Rational(lower)
                values = est[metric]
                row = stat[level]
                if row is None:
                    kept = [bool(low <= v) and bool(v <= cap) for v in values]
                else:
                    s_ = {"mean": sum(values) / length, "sum": sum(values), "max": sp.Max(*values)}
                    inside = bool(low <= s_[row]) and bool(s_[row] <= cap)
                    kept = [inside] * length
                want = [
                    -float(Fraction(2) ** k) if keep else 0.0
                    for k, keep in zip(ks, kept, strict=True)
                ]
                got = decoupled_ppo_loss(
                    [[0.0] * length], [[0.0] * length], [[-k * ln2 for k in ks]],
                    [[1.0] * length], cap=float(cap), lower=lower, level=level, metric=metric,
                )  # fmt: skip
                assert got.grad[0].tolist() == want, f"DP4 {metric} {level} {ks} C={cap}"
                if metric != "kl_k1" and stat[level] in ("sum", "max") and all(kept):
                    assert bool(sum(values) / length <= cap), "DP4 kept by sum/max: by the mean"


@claim(
    "DP5",
    r"Row level, largest ratio: a row whose largest ratio lies in $[\lambda, C]$ keeps its "
    r"geometric mean $g$ ($g \le C$ but possibly $g < \lambda$); a row outside has $g$ clamped "
    r"(or is rejected); refimpl's weights equal these, which differ from clamping every row.",
    method="exact",
    scope="rows of 1 to 3 tokens with log2-ratios in -3..3, bounds 1/4, 1/2, 1 and 1, 2, 4",
)
def the_largest_ratio_clamps_only_the_rows_outside() -> None:
    import itertools

    ln2 = math.log(2.0)
    differs = False
    for length in range(1, 4):
        for ks in itertools.product(range(-3, 4), repeat=length):
            mean, top = Fraction(sum(ks), length), max(ks)
            for low, cap in itertools.product((-2, -1, 0), (0, 1, 2)):  # log2 of the bounds
                inside = low <= top <= cap
                assert not inside or mean <= cap, f"DP5 g <= C in a row inside ({ks})"
                clamped = min(max(mean, Fraction(low)), Fraction(cap))
                differs |= inside and clamped != mean
                for action in ("clip", "mask"):
                    want = mean if inside else (clamped if action == "clip" else None)
                    got = decoupled_ppo_loss(
                        [[0.0] * length], [[0.0] * length], [[-k * ln2 for k in ks]],
                        [[-1.0] * length], cap=2.0**cap, lower=2.0**low, above_cap=action,
                        level="max",
                    )  # fmt: skip
                    expect = 0.0 if want is None else 2.0 ** float(want)
                    assert_close(float(got.grad[0, 0]), expect, rel=4e-15, label=f"DP5 {ks}")
    assert differs, "DP5: some row inside the bounds has its geometric mean below lower"
