r"""# The KL penalty in the reward, and the batch-mean baseline

Notation: a sequence $b$ with real tokens $t = 1..L_b$, outcome reward $R_b$, per-token KL estimate
$\mathrm{kl}_{bt}$, coefficient $\beta \ge 0$. The token rewards are
$r_{bt} = -\beta\,\mathrm{kl}_{bt} + \mathbb 1[t = L_b]\,\mathrm{clip}(R_b)$.

**Return (KR1).** With $\gamma = 1$ the return from token $t$ is
$G_{bt} = \sum_{s \ge t} r_{bs} = \mathrm{clip}(R_b) - \beta\sum_{s \ge t}\mathrm{kl}_{bs}$: every
token carries the outcome, and the KL of the tokens from $t$ on. From the first token it is
$\mathrm{clip}(R_b) - \beta\sum_t \mathrm{kl}_{bt}$.

**What the penalty estimates (KR2).** With the k1 estimate
$\mathrm{kl}_t = \log\pi(y_t \mid y_{<t}) - \log\pi_{\text{ref}}(y_t \mid y_{<t})$ the sum over a
sequence is $\log\pi(y) - \log\pi_{\text{ref}}(y)$, whose expectation under $y \sim \pi$ is
$\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})$ of the sequence distributions: the return's expectation is
$\mathbb E[\mathrm{clip}(R)] - \beta\,\mathrm{KL}$, the KL-regularised objective. Checked exactly
on a two-step, two-token tree with symbolic probabilities.

**Batch-mean baseline (BB1).** $A_i = r_i - \frac1B\sum_j r_j$ sums to 0, is unchanged by adding a
constant to every reward, and is the expected-value-preserving baseline of the single-rollout
regime: $\mathbb E[A_i \nabla\log\pi(y_i)] = \mathbb E[r_i\nabla\log\pi(y_i)]\,(1 - \tfrac1B)$ for
independent samples (the mean includes $r_i$ itself, which shrinks the gradient by $1 - 1/B$). The
check computes the first two properties exactly and the shrink factor on a two-outcome policy by
enumeration.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import assert_zero, claim
from refimpl.losses.advantages import grpo_advantages
from refimpl.losses.kl_reward import kl_penalized_rewards


@claim(
    "KR1",
    r"With $\gamma = 1$ the return from token $t$ of the KL-penalised token rewards is "
    r"$\mathrm{clip}(R) - \beta\sum_{s \ge t}\mathrm{kl}_s$; refimpl's token rewards give exactly "
    r"these returns on a padded batch with dyadic entries.",
    method="exact",
    scope="one padded 3 × 4 batch with dyadic entries, beta = 1/4, clip (-2, 2)",
)
def kl_reward_returns() -> None:
    rewards = [Fraction(3), Fraction(-1, 2), Fraction(5, 4)]
    kl = [
        [Fraction(1, 2), Fraction(-1, 4), Fraction(1), Fraction(7)],
        [Fraction(2), Fraction(0), Fraction(3), Fraction(3)],
        [Fraction(-1), Fraction(1, 8), Fraction(1, 16), Fraction(5, 2)],
    ]
    lengths = [3, 1, 4]
    beta = Fraction(1, 4)
    mask = [[1 if t < n else 0 for t in range(4)] for n in lengths]
    got = kl_penalized_rewards(
        [float(r) for r in rewards],
        [[float(x) for x in row] for row in kl],
        beta=float(beta),
        mask=mask,
        reward_clip=(-2.0, 2.0),
    )
    returns = np.cumsum(got[:, ::-1], axis=1)[:, ::-1]
    for b, (r, n) in enumerate(zip(rewards, lengths, strict=True)):
        clipped = min(max(r, Fraction(-2)), Fraction(2))
        for t in range(n):
            want = clipped - beta * sum(kl[b][t:n], Fraction(0))
            assert Fraction(float(returns[b, t])) == want, f"KR1 return b={b} t={t}"


@claim(
    "KR2",
    r"The expected sum of the k1 estimates over a sequence sampled from $\pi$ is "
    r"$\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})$ of the sequence distributions.",
    scope="a two-step tree with two tokens per step and symbolic probabilities",
)
def k1_sum_is_the_sequence_kl() -> None:
    p = sp.symbols("p0 p1 p2", positive=True)  # π(a), π(a | a), π(a | b)
    q = sp.symbols("q0 q1 q2", positive=True)
    expected, kl = sp.Integer(0), sp.Integer(0)
    for first, second in itertools.product((0, 1), repeat=2):
        pf = p[0] if first == 0 else 1 - p[0]
        qf = q[0] if first == 0 else 1 - q[0]
        ps_branch = p[1] if first == 0 else p[2]
        qs_branch = q[1] if first == 0 else q[2]
        ps = ps_branch if second == 0 else 1 - ps_branch
        qs = qs_branch if second == 0 else 1 - qs_branch
        k1_sum = (sp.log(pf) - sp.log(qf)) + (sp.log(ps) - sp.log(qs))
        expected += pf * ps * k1_sum
        kl += pf * ps * sp.log((pf * ps) / (qf * qs))
    assert_zero(sp.expand_log(expected - kl, force=True), label="KR2")


@claim(
    "BB1",
    r"The batch-mean advantages $r_i - \bar r$ sum to 0 and are shift invariant; for $B$ "
    r"independent samples the expected $A_i\,\partial_\theta\log\pi(y_i)$ is "
    r"$(1 - 1/B)$ times the REINFORCE gradient.",
    method="exact",
    scope="GENERAL for the sum and shift; the shrink factor on a two-outcome policy, B = 1..4",
)
def batch_mean_baseline() -> None:
    r = [Fraction(3), Fraction(-1, 2), Fraction(5, 4), Fraction(0)]
    got = grpo_advantages(r, group=[0, 0, 0, 0], std="none")
    assert sum(got, Fraction(0)) == 0, "BB1 sum"
    moved = grpo_advantages([x + 7 for x in r], group=[0, 0, 0, 0], std="none")
    assert moved == got, "BB1 shift"
    # two outcomes: y = 1 with probability p (reward 1, score 1/p), y = 0 (reward 0, score -1/(1-p))
    prob = Fraction(1, 3)
    outcomes = [(prob, Fraction(1), 1 / prob), (1 - prob, Fraction(0), -1 / (1 - prob))]
    reinforce = sum(w * rw * sc for w, rw, sc in outcomes)
    for size in range(1, 5):
        total = Fraction(0)
        for draw in itertools.product(outcomes, repeat=size):
            weight = Fraction(1)
            for w, _, _ in draw:
                weight *= w
            mean = sum((rw for _, rw, _ in draw), Fraction(0)) / size
            total += weight * (draw[0][1] - mean) * draw[0][2]
        assert total == reinforce * (1 - Fraction(1, size)), f"BB1 shrink B={size}"
