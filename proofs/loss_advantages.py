r"""# Outcome advantages: group z-score, leave-one-out baseline, and the weight of a group

A prompt is sampled $n$ times; the responses $y_1..y_n$ earn rewards $r_1..r_n$. With the group
mean $\bar r = \frac1n\sum_j r_j$ the three advantages of `refimpl.losses.advantages` are

$$
A^{\mathrm{GRPO}}_i = \frac{r_i - \bar r}{\sigma + \varepsilon}, \qquad
A^{\mathrm{Dr}}_i = r_i - \bar r, \qquad
A^{\mathrm{RLOO}}_i = r_i - \frac{1}{n-1}\sum_{j \ne i} r_j .
$$

**The z-score (claim AD1).** With $Q = \sum_i (r_i - \bar r)^2$, the sample standard deviation is
$\sigma = \sqrt{Q/(n-1)}$ and the population one $\sqrt{Q/n}$. For $\varepsilon = 0$ and $Q > 0$,
$\sum_i A_i = (\sum_i r_i - n\bar r)/\sigma = 0$ and $\sum_i A_i^2 = Q/\sigma^2$, which is $n - 1$
(sample) or $n$ (population): the advantages have mean 0 and standard deviation exactly 1 in the
convention used to compute them, and the *other* convention's standard deviation is
$\sqrt{n/(n-1)}$ or $\sqrt{(n-1)/n}$ instead. The check proves both sums symbolically for
$n = 2..6$ and evaluates `grpo_advantages` against the closed form.

**Leave-one-out (claims AD2, AD3).** Writing $\sum_{j \ne i} r_j = n\bar r - r_i$,

$$
A^{\mathrm{RLOO}}_i = r_i - \frac{n\bar r - r_i}{n-1} = \frac{n}{n-1}\,(r_i - \bar r),
$$

so RLOO is the mean-centred advantage scaled by $n/(n-1)$. Its baseline
$b_i = \frac{1}{n-1}\sum_{j \ne i} r_j$ is a function of the *other* samples only. For i.i.d.
samples, $y_i$ is independent of $b_i$ and $\mathbb{E}[\nabla\log\pi(y_i)] = 0$, so

$$
\mathbb{E}\bigl[A_i \nabla\log\pi(y_i)\bigr] = \mathbb{E}\bigl[r_i\nabla\log\pi(y_i)\bigr] -
\mathbb{E}[b_i]\,\mathbb{E}\bigl[\nabla\log\pi(y_i)\bigr] = \nabla_\theta\,\mathbb{E}_\pi[r],
$$

the policy gradient, unbiased. The check enumerates every tuple of $n$ samples from a softmax
policy over three outcomes with rational probabilities, where the score
$\partial\log\pi_a/\partial\theta_b = \mathbb{1}[a = b] - \pi_b$ is rational, and compares the
expectation with the exact gradient $\sum_a \pi_a r_a(e_a - \pi)$ in `Fraction` arithmetic.

**The mean-centred form keeps $r_i$ in its baseline (claim AD4).** $\bar r$ contains $r_i/n$, so
$A^{\mathrm{Dr}}_i = \frac{n-1}{n}A^{\mathrm{RLOO}}_i$ and its expected gradient is
$\frac{n-1}{n}\nabla_\theta\mathbb{E}_\pi[r]$: the direction is right, the scale is shrunk by
$(n-1)/n$ (by $1/2$ for pairs). The same enumeration shows it exactly.

**Dividing by the standard deviation re-weights groups (claim AD5).**
$A^{\mathrm{GRPO}}_i = A^{\mathrm{Dr}}_i/(\sigma + \varepsilon)$: relative to Dr GRPO every group is
multiplied by $1/(\sigma_g + \varepsilon)$, so a group with a small spread (a prompt nearly always
solved or nearly never) weighs more. For binary rewards with $k$ successes out of $n$
($0 < k < n$, population std $\sigma = \sqrt{k(n-k)}/n$),

$$
\sum_i \lvert A^{\mathrm{Dr}}_i\rvert = \frac{2k(n-k)}{n}, \qquad
\sum_i \lvert A^{\mathrm{GRPO}}_i\rvert = 2\sqrt{k(n-k)} \quad (\varepsilon = 0),
$$

a factor $n/\sqrt{k(n-k)} = 1/\sigma$. For $n = 8$: $k = 4$ gets factor 2, $k = 1$ gets
$8/\sqrt 7 \approx 3.02$, so the 1-of-8 prompt is up-weighted $4/\sqrt 7 \approx 1.51$ times more
than the 4-of-8 prompt. In squared terms $\sum_i (A^{\mathrm{GRPO}}_i)^2 = n$ for every
non-constant group, whatever its variance: the z-score gives every informative prompt the same
squared-advantage mass, where Dr GRPO gives it $n\sigma^2$.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.advantages import grpo_advantages, rloo_advantages

SIZES = range(2, 7)


def _random_rewards(rng: random.Random, n: int) -> list[Fraction]:
    return [Fraction(rng.randint(-9, 9), rng.randint(1, 4)) for _ in range(n)]


@claim(
    "AD1",
    r"For a group of $n \ge 2$ rewards that are not all equal and $\varepsilon = 0$, the z-scored "
    r"advantages $(r_i - \bar r)/\sigma$ sum to 0 and their squares sum to $n - 1$ with the sample "
    r"std ($n$ with the population std): mean 0 and standard deviation 1 in the declared convention.",
    method="symbolic",
    scope="group sizes n = 2..6 (symbolic rewards); refimpl evaluated on 40 random rational groups",
)
def z_score_moments() -> None:
    for n in SIZES:
        r = sp.symbols(f"r0:{n}", real=True)
        mean = sp.Add(*r) / n
        q = sp.Add(*((x - mean) ** 2 for x in r))
        for ddof, target in ((1, n - 1), (0, n)):
            sigma = sp.sqrt(q / (n - ddof))
            z = [(x - mean) / sigma for x in r]
            assert_zero(sp.Add(*z), label=f"AD1 sum, n={n}")
            assert_zero(sp.Add(*(x**2 for x in z)) - target, label=f"AD1 squares, n={n}")
    rng = random.Random(11)
    for _ in range(40):
        n = rng.randint(2, 6)
        rewards = _random_rewards(rng, n)
        if len(set(rewards)) == 1:
            continue
        mean = sum(rewards, Fraction(0)) / n
        q = sum(((x - mean) ** 2 for x in rewards), Fraction(0))
        for std, ddof in (("sample", 1), ("population", 0)):
            found = grpo_advantages(rewards, group=[0] * n, std=std, eps=0.0)
            sigma = math.sqrt(q / (n - ddof))
            for x, a in zip(rewards, found, strict=True):
                assert_close(float(a), float(x - mean) / sigma, rel=1e-13, abs_=1e-15, label="AD1")
            assert_close(float(sum(found)), 0.0, abs_=1e-12, label="AD1 refimpl sum")
            squares = float(sum(a * a for a in found))
            assert_close(squares, float(n - ddof), rel=1e-12, label="AD1 refimpl squares")


@claim(
    "AD2",
    r"RLOO equals the scaled mean-centred advantage: "
    r"$r_i - \frac{1}{n-1}\sum_{j\ne i} r_j = \frac{n}{n-1}(r_i - \bar r)$.",
    method="symbolic",
    scope="group sizes n = 2..6 (symbolic rewards); refimpl exact on 40 random rational batches",
)
def rloo_is_scaled_centring() -> None:
    for n in SIZES:
        r = sp.symbols(f"r0:{n}", real=True)
        mean = sp.Add(*r) / n
        for i in range(n):
            loo = r[i] - sp.Add(*(r[j] for j in range(n) if j != i)) / (n - 1)
            assert_zero(loo - sp.Rational(n, n - 1) * (r[i] - mean), label=f"AD2 n={n} i={i}")
    rng = random.Random(12)
    for _ in range(40):
        sizes = [rng.randint(2, 5) for _ in range(rng.randint(1, 3))]
        group = [g for g, s in enumerate(sizes) for _ in range(s)]
        rng.shuffle(group)
        rewards = _random_rewards(rng, len(group))
        found = rloo_advantages(rewards, group=group)
        for i, g in enumerate(group):
            others = [rewards[j] for j in range(len(group)) if j != i and group[j] == g]
            expected = rewards[i] - sum(others, Fraction(0)) / len(others)
            if found[i] != expected:
                raise AssertionError(f"AD2: refimpl {found[i]} != leave-one-out {expected}")


def _softmax_expectations(
    p: list[Fraction], values: list[Fraction], n: int, advantage: str
) -> list[list[Fraction]]:
    """``E[A_i ∇_θ log π(y_i)]`` for every sample ``i``, by enumeration of all ``K^n`` tuples."""
    k = len(p)
    out = [[Fraction(0)] * k for _ in range(n)]
    for ys in itertools.product(range(k), repeat=n):
        prob = math.prod((p[y] for y in ys), start=Fraction(1))
        rewards = [values[y] for y in ys]
        if advantage == "rloo":
            adv = rloo_advantages(rewards, group=[0] * n)
        else:
            adv = grpo_advantages(rewards, group=[0] * n, std="none")
        for i, y in enumerate(ys):
            for b in range(k):
                score = (1 if y == b else 0) - p[b]
                out[i][b] += prob * adv[i] * score
    return out


def _policy_gradient(p: list[Fraction], values: list[Fraction]) -> list[Fraction]:
    """``∇_θ E_π[r]`` for softmax logits θ: ``Σ_a π_a r_a (e_a − π)``."""
    k = len(p)
    return [
        sum(
            (p[a] * values[a] * ((1 if a == b else 0) - p[b]) for a in range(k)),
            Fraction(0),
        )
        for b in range(k)
    ]


def _random_policy(rng: random.Random, k: int) -> list[Fraction]:
    raw = [Fraction(rng.randint(1, 9)) for _ in range(k)]
    total = sum(raw, Fraction(0))
    return [x / total for x in raw]


@claim(
    "AD3",
    r"The RLOO baseline of sample $i$ does not depend on $r_i$, and for i.i.d. samples "
    r"$\mathbb{E}[A^{\mathrm{RLOO}}_i\nabla_\theta\log\pi(y_i)] = \nabla_\theta\mathbb{E}_\pi[r]$ "
    r"(unbiased), for every sample $i$.",
    method="exact",
    scope="softmax policy over 3 outcomes, group sizes n = 2, 3, 4, 8 random rational policies "
    "and rewards each (every tuple of samples enumerated)",
)
def rloo_unbiased() -> None:
    rng = random.Random(13)
    for n in (2, 3, 4):
        for _ in range(8):
            p = _random_policy(rng, 3)
            values = _random_rewards(rng, 3)
            truth = _policy_gradient(p, values)
            for i, row in enumerate(_softmax_expectations(p, values, n, "rloo")):
                if row != truth:
                    raise AssertionError(f"AD3: E[A_{i} score] = {row} != gradient {truth}")
            rewards = _random_rewards(rng, n)
            base = [
                r - a for r, a in zip(rewards, rloo_advantages(rewards, group=[0] * n), strict=True)
            ]
            bumped = [rewards[0] + 7, *rewards[1:]]
            moved = [
                r - a for r, a in zip(bumped, rloo_advantages(bumped, group=[0] * n), strict=True)
            ]
            if base[0] != moved[0]:
                raise AssertionError("AD3: the RLOO baseline of sample 0 moved with r_0")


@claim(
    "AD4",
    r"The mean-centred advantage (Dr GRPO, $\bar r$ includes $r_i$) has expected gradient "
    r"$\frac{n-1}{n}\nabla_\theta\mathbb{E}_\pi[r]$: right direction, scale shrunk by $(n-1)/n$.",
    method="exact",
    scope="softmax policy over 3 outcomes, group sizes n = 2, 3, 4, 8 random rational policies "
    "and rewards each (every tuple of samples enumerated)",
)
def centred_is_shrunk() -> None:
    rng = random.Random(14)
    for n in (2, 3, 4):
        for _ in range(8):
            p = _random_policy(rng, 3)
            values = _random_rewards(rng, 3)
            truth = [Fraction(n - 1, n) * g for g in _policy_gradient(p, values)]
            for i, row in enumerate(_softmax_expectations(p, values, n, "centred")):
                if row != truth:
                    raise AssertionError(f"AD4: E[A_{i} score] = {row} != (n-1)/n gradient {truth}")


@claim(
    "AD5",
    r"Relative to Dr GRPO the z-score multiplies a group by $1/(\sigma_g + \varepsilon)$. For binary "
    r"rewards with $k$ of $n$ correct ($0<k<n$, population std, $\varepsilon = 0$), "
    r"$\sum_i|A_i|$ is $2k(n-k)/n$ mean-centred and $2\sqrt{k(n-k)}$ z-scored, a factor "
    r"$n/\sqrt{k(n-k)} = 1/\sigma$; and $\sum_i A_i^2 = n$ for every non-constant group.",
    method="symbolic",
    scope=GENERAL + " (0 < k < n); refimpl checked for every k at n = 2..8",
)
def std_reweights_groups() -> None:
    k, j, eps = sp.symbols("k j epsilon", positive=True)  # j = n - k failures
    n = k + j
    p = k / n
    sigma = sp.sqrt(p * (1 - p))
    centred_abs = k * (1 - p) + j * p
    assert_zero(centred_abs - 2 * k * j / n, label="AD5 centred mass")
    assert_zero(centred_abs / sigma - 2 * sp.sqrt(k * j), label="AD5 z-scored mass")
    assert_zero((centred_abs / sigma) / centred_abs - n / sp.sqrt(k * j), label="AD5 factor")
    squares = (k * (1 - p) ** 2 + j * p**2) / sigma**2
    assert_zero(squares - n, label="AD5 squared mass")
    a = sp.Symbol("a", real=True)
    assert_zero(a / (sigma + eps) * (sigma + eps) - a, label="AD5 scaling")
    for size in range(2, 9):
        for wins in range(1, size):
            rewards = [Fraction(1)] * wins + [Fraction(0)] * (size - wins)
            centred = grpo_advantages(rewards, group=[0] * size, std="none")
            if sum((abs(x) for x in centred), Fraction(0)) != Fraction(
                2 * wins * (size - wins), size
            ):
                raise AssertionError(f"AD5: centred mass at n={size}, k={wins}")
            z = grpo_advantages(
                [float(x) for x in rewards], group=[0] * size, std="population", eps=0.0
            )
            expected = 2 * math.sqrt(wins * (size - wins))
            assert_close(float(abs(z).sum()), expected, rel=1e-13, label="AD5 refimpl mass")
            assert_close(float((z * z).sum()), float(size), rel=1e-13, label="AD5 refimpl squares")
