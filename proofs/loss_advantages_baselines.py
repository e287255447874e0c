r"""# Advantages with other baselines: GPG, OPO, MaxRL, Pass@k, GDPO and the optimal token baseline

A prompt is sampled $n$ times; response $i$ earns reward $r_i$ and has $\ell_i$ tokens. Each
estimator of `refimpl.losses.advantages_baselines` and `refimpl.losses.advantages_tokens` is a
baseline subtracted from the reward (or the return) and a scale.

**GPG (claim AB1).** $A_i = \frac{\alpha}{F}(r_i - \bar r)$ with the batch factor
$\alpha = B/\max(M, 1)$, $M$ the number of non-zero rewards. A constant factor changes no
direction: the group's advantages sum to $\frac{\alpha}{F}(\sum_i r_i - n\bar r) = 0$, and with
$\alpha = F = 1$ they are Dr GRPO's.

**OPO (claim AB2).** With the sequence loss summed over tokens, OPO approximates the squared norm
of the score of response $i$ by its length: $\lVert\nabla\log\pi(y_i)\rVert^2 \approx c\,\ell_i$.
The variance of $(r - b)\nabla\log\pi(y)$ is then, up to terms free of $b$,
$c\,\mathbb{E}[\ell\,(r - b)^2]$, whose derivative in $b$ vanishes at

$$
b^\star = \frac{\mathbb{E}[\ell\, r]}{\mathbb{E}[\ell]}
\quad\Longrightarrow\quad
\hat b = \frac{\sum_j \ell_j r_j}{\sum_j \ell_j}
$$

over the group (the second derivative $2\,\mathbb{E}[\ell] > 0$: a minimum). The advantages
cancel once weighted by length: $\sum_i \ell_i (r_i - \hat b) = 0$; equal lengths give the group
mean.

**MaxRL (claims AB3, AB4).** $A_i = (r_i - p)/(p + \varepsilon)$ with $p$ the group mean. The
numerators sum to 0, and at $\varepsilon = 0$ the ratio is unchanged when every reward is
multiplied by $c > 0$. For binary rewards and $\varepsilon = 0$,

$$
\frac1n\sum_i A_i\nabla\log\pi(y_i)
= \frac{1}{K}\sum_{i:\,r_i = 1}\nabla\log\pi(y_i) - \frac1n\sum_i\nabla\log\pi(y_i),
$$

with $K = n p$ the number of successes, when $K \ge 1$; a group with no success gets 0 (there is
no pass rate to divide by). Given $K = k \ge 1$ the successes are i.i.d. draws of $\pi$ restricted
to the correct answers, whose score has mean $\nabla\log p_\theta$ ($p_\theta$ the probability of
a correct answer), so the first term has expectation $(1 - (1 - p_\theta)^n)\nabla\log p_\theta$.
The second term has mean 0 over *all* groups, but it is left out of the groups with no success,
whose scores have mean $\nabla\log(1 - p_\theta)$; removing them leaves
$-\mathbb{E}[\frac1n\sum_i\nabla\log\pi(y_i)\,\mathbb{1}\{K \ge 1\}]
= -(1 - p_\theta)^{n-1}\nabla p_\theta$. Altogether

$$
\mathbb{E}\Bigl[\frac1n\sum_i A_i\nabla\log\pi(y_i)\Bigr]
= \frac{1 - (1 - p_\theta)^n}{p_\theta}\nabla p_\theta - (1 - p_\theta)^{n-1}\nabla p_\theta
= \nabla\Bigl(-\sum_{k=1}^{n-1}\frac{(1 - p_\theta)^k}{k}\Bigr),
$$

the gradient of the maximum-likelihood objective $\log p_\theta = -\sum_{k \ge 1}(1-p_\theta)^k/k$
truncated at $n - 1$ terms (the first alone, $\nabla p_\theta$, for $n = 2$: REINFORCE's). The
check enumerates every tuple of samples of a softmax policy in `Fraction` arithmetic.

**Pass@k (claim AB5).** The group's value is its best reward $\max_j r_j$. Removing the best
response lowers it to the second best, so the best response's marginal contribution is
$r_{(1)} - r_{(2)}$, and every other response's is 0 (removing it leaves the maximum). The
advantages therefore have at most one non-zero entry, $\ge 0$, summing to $(r_{(1)} - r_{(2)})/D$.

**GDPO (claim AB6).** Whitening a sum $S$ over $N$ tokens,
$A_i = (S_i - m)/s$ with $m$ the token-weighted mean and $s^2$ the sample variance, gives
$\sum_i w_i A_i = 0$ and $\sum_i w_i A_i^2 = N - 1$: whatever the components' scales and
weights, the result has token-weighted mean 0 and sample standard deviation 1 ($\varepsilon = 0$).

**The optimal token baseline (claim AB7).** With $W_{i,t}$ the cumulative path variance of
trajectory $i$ up to $t$ (a proxy for the squared norm of its score), the baseline minimising
$\sum_i W_{i,t}(G_{i,t} - b)^2$ is $b_t = \sum_i W_{i,t}G_{i,t}/\sum_i W_{i,t}$ (as for OPO, with
$W$ in place of $\ell$), and the advantages cancel once weighted by $W$:
$\sum_i W_{i,t}(G_{i,t} - b_t) = 0$; with $\varepsilon > 0$ in the denominator the sum is
$\varepsilon\,b_t$ instead.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.advantages import grpo_advantages
from refimpl.losses.advantages_baselines import (
    gpg_advantages,
    maxrl_advantages,
    opo_advantages,
    passk_advantages,
)
from refimpl.losses.advantages_tokens import gdpo_advantages, optimal_token_baseline_advantages

SIZES = range(2, 7)


def _random_rewards(rng: random.Random, n: int) -> list[Fraction]:
    return [Fraction(rng.randint(-9, 9), rng.randint(1, 4)) for _ in range(n)]


@claim(
    "AB1",
    r"GPG's advantages $\frac{\alpha}{F}(r_i - \bar r)$ of a group sum to 0, and with "
    r"$\alpha = F = 1$ equal Dr GRPO's $r_i - \bar r$.",
    method="symbolic",
    scope="group sizes n = 2..6 (symbolic rewards, α, F); refimpl exact on 40 random rational "
    "batches against α = B/max(M, 1) computed by hand",
)
def gpg_sums_to_zero() -> None:
    alpha, f = sp.symbols("alpha F", positive=True)
    for n in SIZES:
        r = sp.symbols(f"r0:{n}", real=True)
        mean = sp.Add(*r) / n
        assert_zero(sp.Add(*(alpha / f * (x - mean) for x in r)), label=f"AB1 n={n}")
    rng = random.Random(21)
    for _ in range(40):
        sizes = [rng.randint(2, 5) for _ in range(rng.randint(1, 3))]
        group = [g for g, s in enumerate(sizes) for _ in range(s)]
        rewards = [
            r if rng.random() < 0.7 else Fraction(0) for r in _random_rewards(rng, len(group))
        ]
        a = Fraction(len(rewards), max(sum(1 for r in rewards if r != 0), 1))
        found = gpg_advantages(rewards, group=group)
        centred = grpo_advantages(rewards, group=group, std="none")
        if found != [a * c for c in centred]:
            raise AssertionError(f"AB1: refimpl {found} != α·(r − mean) with α = {a}")
        same = gpg_advantages(rewards, group=group, alpha=1)
        if same != centred:
            raise AssertionError("AB1: α = F = 1 is not Dr GRPO")


@claim(
    "AB2",
    r"The baseline minimising $\sum_j \ell_j (r_j - b)^2$ is $b = \sum_j \ell_j r_j / \sum_j \ell_j$ "
    r"(OPO's), and OPO's advantages cancel once weighted by length: "
    r"$\sum_i \ell_i (r_i - b) = 0$.",
    method="symbolic",
    scope="group sizes n = 2..6 (symbolic rewards and positive lengths); refimpl exact on 40 "
    "random rational batches",
)
def opo_optimal_baseline() -> None:
    b = sp.Symbol("b", real=True)
    for n in SIZES:
        r = sp.symbols(f"r0:{n}", real=True)
        ell = sp.symbols(f"l0:{n}", positive=True)
        loss = sp.Add(*(w * (x - b) ** 2 for w, x in zip(ell, r, strict=True)))
        (stationary,) = sp.solve(sp.diff(loss, b), b)
        best = sp.Add(*(w * x for w, x in zip(ell, r, strict=True))) / sp.Add(*ell)
        assert_zero(stationary - best, label=f"AB2 stationary point n={n}")
        assert_zero(sp.diff(loss, b, 2) - 2 * sp.Add(*ell), label=f"AB2 convexity n={n}")
        weighted = sp.Add(*(w * (x - best) for w, x in zip(ell, r, strict=True)))
        assert_zero(weighted, label=f"AB2 weighted sum n={n}")
    rng = random.Random(22)
    for _ in range(40):
        n = rng.randint(2, 6)
        rewards = _random_rewards(rng, n)
        lengths = [rng.randint(1, 9) for _ in range(n)]
        found = opo_advantages(rewards, group=[0] * n, lengths=lengths)
        base = sum((ell * x for ell, x in zip(lengths, rewards, strict=True)), Fraction(0))
        base /= sum(lengths)
        if found != [x - base for x in rewards]:
            raise AssertionError(f"AB2: refimpl {found} != r − length-weighted mean")


@claim(
    "AB3",
    r"MaxRL's advantages $(r_i - p)/(p + \varepsilon)$ of a group sum to 0, and at "
    r"$\varepsilon = 0$ they are unchanged when every reward is multiplied by $c > 0$.",
    method="symbolic",
    scope="group sizes n = 2..6 (symbolic positive rewards); refimpl exact on 40 random "
    "non-negative rational groups",
)
def maxrl_sum_and_scale() -> None:
    eps, c = sp.symbols("epsilon c", positive=True)
    for n in SIZES:
        r = sp.symbols(f"r0:{n}", positive=True)
        p = sp.Add(*r) / n
        assert_zero(sp.Add(*((x - p) / (p + eps) for x in r)), label=f"AB3 sum n={n}")
        scaled = [(c * x - c * p) / (c * p) for x in r]
        for x, y in zip(r, scaled, strict=True):
            assert_zero(y - (x - p) / p, label=f"AB3 scale n={n}")
    rng = random.Random(23)
    for _ in range(40):
        n = rng.randint(2, 6)
        rewards = [abs(x) for x in _random_rewards(rng, n)]
        found = maxrl_advantages(rewards, group=[0] * n, eps=0.0)
        if sum(found, Fraction(0)) != 0:
            raise AssertionError(f"AB3: refimpl advantages {found} do not sum to 0")
        if maxrl_advantages([3 * x for x in rewards], group=[0] * n, eps=0.0) != found:
            raise AssertionError("AB3: scaling the rewards moved the advantages")


def _maxrl_expectation(p: list[Fraction], correct: list[bool], n: int) -> list[Fraction]:
    """``E[(1/n) Σ_i A_i ∇_θ log π(y_i)]`` for softmax logits, by enumeration of all tuples."""
    k = len(p)
    out = [Fraction(0)] * k
    for ys in itertools.product(range(k), repeat=n):
        prob = math.prod((p[y] for y in ys), start=Fraction(1))
        rewards = [Fraction(int(correct[y])) for y in ys]
        adv = maxrl_advantages(rewards, group=[0] * n, eps=0.0)
        for i, y in enumerate(ys):
            for b in range(k):
                out[b] += prob * adv[i] * ((1 if y == b else 0) - p[b]) / n
    return out


@claim(
    "AB4",
    r"For binary rewards and $\varepsilon = 0$ (a group with no success gets 0), "
    r"$\mathbb{E}[\frac1n\sum_i A_i\nabla\log\pi(y_i)] = \frac{1 - (1 - p_\theta)^n}{p_\theta}"
    r"\nabla p_\theta - (1 - p_\theta)^{n-1}\nabla p_\theta = "
    r"\nabla(-\sum_{k=1}^{n-1}(1-p_\theta)^k/k)$: MaxRL follows the gradient of the "
    r"maximum-likelihood objective $\log p_\theta$ truncated at $n - 1$ terms.",
    method="exact",
    scope="softmax policy over 3 and 4 outcomes (1 or 2 correct), group sizes n = 2, 3, 4, six "
    "random rational policies each (every tuple of samples enumerated)",
)
def maxrl_follows_truncated_likelihood() -> None:
    rng = random.Random(24)
    for k, correct in ((3, [True, False, False]), (4, [True, True, False, False])):
        for n in (2, 3, 4):
            for _ in range(6):
                raw = [Fraction(rng.randint(1, 9)) for _ in range(k)]
                p = [x / sum(raw, Fraction(0)) for x in raw]
                p_ok = sum((q for q, ok in zip(p, correct, strict=True) if ok), Fraction(0))
                grad_p = [
                    sum(
                        (p[a] * ((1 if a == b else 0) - p[b]) for a in range(k) if correct[a]),
                        Fraction(0),
                    )
                    for b in range(k)
                ]
                factor = (1 - (1 - p_ok) ** n) / p_ok - (1 - p_ok) ** (n - 1)
                truncated = sum(((1 - p_ok) ** (j - 1) for j in range(1, n)), Fraction(0))
                if factor != truncated:  # d/dp of −Σ_{k<n} (1 − p)^k / k is Σ_{k<n} (1 − p)^(k−1)
                    raise AssertionError(f"AB4: {factor} is not the truncated series {truncated}")
                truth = [factor * g for g in grad_p]
                found = _maxrl_expectation(p, correct, n)
                if found != truth:
                    raise AssertionError(f"AB4: E = {found} != {factor}·∇p = {truth}")


@claim(
    "AB5",
    r"Pass@k's advantages have at most one non-zero entry per group, at a best reward, equal to "
    r"the best response's marginal contribution to the group's maximum "
    r"$\max_j r_j - \max_{j \ne i^\star} r_j = r_{(1)} - r_{(2)} \ge 0$ (over $D$).",
    method="exact",
    scope="60 random rational groups of 2..6 rewards (many with ties), exact arithmetic",
)
def passk_marginal_contribution() -> None:
    rng = random.Random(25)
    for _ in range(60):
        n = rng.randint(2, 6)
        rewards = [Fraction(rng.randint(0, 3), rng.randint(1, 2)) for _ in range(n)]
        found = passk_advantages(rewards, group=[0] * n, std="none")
        nonzero = [i for i, a in enumerate(found) if a != 0]
        if len(nonzero) > 1:
            raise AssertionError(f"AB5: several non-zero advantages {found}")
        for i in range(n):
            rest = rewards[:i] + rewards[i + 1 :]
            marginal = max(rewards) - max(rest)
            if found[i] != marginal:
                raise AssertionError(f"AB5: response {i} got {found[i]}, marginal {marginal}")
        if sum(found, Fraction(0)) != sorted(rewards)[-1] - sorted(rewards)[-2]:
            raise AssertionError(f"AB5: advantages {found} do not sum to r(1) − r(2)")


@claim(
    "AB6",
    r"Whitening with token weights $w_i$ ($N = \sum_i w_i$, sample variance, $\varepsilon = 0$) "
    r"gives $\sum_i w_i A_i = 0$ and $\sum_i w_i A_i^2 = N - 1$: GDPO's advantages have "
    r"token-weighted mean 0 and standard deviation 1 whatever the components and weights.",
    method="symbolic",
    scope="batches of B = 2..4 sequences (symbolic sums and positive token counts); refimpl on "
    "30 random batches of 1..3 components",
)
def gdpo_whitened_moments() -> None:
    for b in range(2, 5):
        s = sp.symbols(f"s0:{b}", real=True)
        w = sp.symbols(f"w0:{b}", positive=True)
        total = sp.Add(*w)
        m = sp.Add(*(wi * si for wi, si in zip(w, s, strict=True))) / total
        q = sp.Add(*(wi * (si - m) ** 2 for wi, si in zip(w, s, strict=True)))
        a = [(si - m) / sp.sqrt(q / (total - 1)) for si in s]
        assert_zero(
            sp.Add(*(wi * ai for wi, ai in zip(w, a, strict=True))), label=f"AB6 mean B={b}"
        )
        squares = sp.Add(*(wi * ai**2 for wi, ai in zip(w, a, strict=True)))
        assert_zero(squares - (total - 1), label=f"AB6 variance B={b}")
    rng = np.random.default_rng(26)
    for _ in range(30):
        b = int(rng.integers(2, 7))
        k = int(rng.integers(1, 4))
        rewards = rng.integers(0, 3, size=(b, k)) / 2.0
        group = rng.integers(0, 2, size=b)
        lengths = rng.integers(1, 5, size=b)
        mask = (np.arange(4)[None, :] < lengths[:, None]).astype(float)
        weights = rng.integers(1, 4, size=k).astype(float)
        found = gdpo_advantages(rewards, group=group, weights=weights, mask=mask, whiten_eps=0.0)
        if not np.any(found):
            continue  # every component constant in every group: nothing to whiten
        n = lengths.sum()
        assert_close(float(np.sum(lengths * found)), 0.0, abs_=1e-12, label="AB6 refimpl mean")
        variance = float(np.sum(lengths * found**2)) / (n - 1)
        assert_close(variance, 1.0, rel=1e-12, label="AB6 refimpl variance")


@claim(
    "AB7",
    r"At each position the optimal token baseline $b_t = \sum_i W_{i,t}G_{i,t}/\sum_i W_{i,t}$ "
    r"minimises $\sum_i W_{i,t}(G_{i,t} - b)^2$, and the advantages cancel once weighted by $W$: "
    r"$\sum_i W_{i,t}(G_{i,t} - b_t) = 0$ (with $\varepsilon$: $= \varepsilon b_t$).",
    method="symbolic",
    scope=GENERAL + " for groups of 2..5 trajectories (symbolic returns and weights); refimpl "
    "on 30 random batches (zero tail off)",
)
def otb_weighted_cancellation() -> None:
    b, eps = sp.symbols("b epsilon", positive=True)
    for n in range(2, 6):
        g = sp.symbols(f"G0:{n}", real=True)
        w = sp.symbols(f"W0:{n}", positive=True)
        loss = sp.Add(*(wi * (gi - b) ** 2 for wi, gi in zip(w, g, strict=True)))
        (stationary,) = sp.solve(sp.diff(loss, b), b)
        best = sp.Add(*(wi * gi for wi, gi in zip(w, g, strict=True))) / sp.Add(*w)
        assert_zero(stationary - best, label=f"AB7 stationary n={n}")
        shrunk = sp.Add(*(wi * gi for wi, gi in zip(w, g, strict=True))) / (sp.Add(*w) + eps)
        residual = sp.Add(*(wi * (gi - shrunk) for wi, gi in zip(w, g, strict=True)))
        assert_zero(residual - eps * shrunk, label=f"AB7 weighted sum n={n}")
    rng = np.random.default_rng(27)
    for _ in range(30):
        rows, t = int(rng.integers(2, 5)), int(rng.integers(1, 5))
        lengths = rng.integers(1, t + 1, size=rows)
        mask = (np.arange(t)[None, :] < lengths[:, None]).astype(float)
        pi = rng.uniform(0.05, 0.9, size=(rows, t))
        s2 = pi**2 + rng.uniform(0, 1, size=(rows, t)) * (1 - pi) ** 2
        r = rng.integers(-2, 3, size=(rows, t)) * mask
        found = optimal_token_baseline_advantages(
            r, np.log(pi), s2, group=[0] * rows, mask=mask, zero_tail=False
        )
        big_w = np.cumsum((1 - 2 * pi + s2) * mask, axis=1)
        total = np.sum(mask * big_w * found, axis=0)
        scale = np.sum(mask * big_w * (np.abs(found) + 1), axis=0)
        for x, s in zip(total, scale, strict=True):
            assert_close(float(x), 0.0, abs_=1e-13 * float(s), label="AB7 refimpl")
