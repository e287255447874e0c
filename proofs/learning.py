r"""# Learning under asynchrony: the gradient under dispatch, staleness and corrections

The toy policy stops at position $t$ with hazard $h(t)$ (and always at $M$), so
$p(\ell) = h(\ell)\prod_{t<\ell}(1-h(t))$; a rollout of length $\ell$ earns $\bar R(\ell)$ on average,
and with a constant baseline $b$ the on-policy gradient is

$$
\nabla J = \sum_\ell p(\ell)\,A(\ell)\,s(\ell),\qquad A(\ell) = \bar R(\ell) - b,\quad
s(\ell) = \nabla\log p(\ell) = \sum_{t\le\ell}\nabla\log\pi(a_t).
$$

Write $f(\ell) = A(\ell)\,s(\ell)$ (one coordinate of it, or its projection on a direction $u$).

**Inverse propensity makes the first-$k$ gradient exact (claim LRN1).** Under first $k$ of $n$ with
ties broken uniformly, the uncorrected batch gradient $\frac1k\sum_{i\in\beta} f(L_i)$ has mean
$\sum_\ell q(\ell) f(\ell)$ with $q = \frac nk p\,\pi$, and weighting each member by
$w = k/(n\pi)$ gives

$$
E\Bigl[\frac1k\sum_{i\in\beta} w(L_i) f(L_i)\Bigr]
= \sum_\ell \frac{f(\ell)\,E[N_\ell]}{n\pi(\ell)},
$$

where $N_\ell$ counts the batch members of length $\ell$, and $E[N_\ell] = n\,p(\ell)\,\pi(\ell)$,
so the sum is $\sum_\ell p(\ell) f(\ell) = \nabla J$.

The proof enumerates every $n$-tuple of launched lengths with symbolic probabilities (support of 3,
$n \le 3$), computes $\pi$ from the same enumeration (the tied share of the free places), and
SymPy cancels the difference to 0. The self-normalised (Hájek) estimate is not unbiased at finite
$k$: an exact rational counterexample is part of the claim.

**The bias of token TIS (claim LRN2).** A rollout of length $\ell$ drawn by the behaviour $\mu$ and
trained at $\pi$ has token ratios $\rho_t = \pi(a_t)/\mu(a_t)$; token TIS uses
$G(\ell) = \sum_t \min(\rho_t, C)\,\nabla\log\pi(a_t)$. Since $\min(\rho, C) = \rho - (\rho - C)^+$
and $\mu(\ell)\rho_t = \pi(a_t)\prod_{u\ne t}\mu(a_u)$,

$$
E_\mu[A\,G] - \nabla J = B_\text{ratio} - B_\text{trunc},
$$

$$
B_\text{ratio} = \sum_\ell A(\ell)\sum_{t\le\ell} s_t(\ell)\Bigl[\pi(a_t)\prod_{u\ne t}\mu(a_u)
  - \prod_u \pi(a_u)\Bigr],
$$

$$
B_\text{trunc} = \sum_\ell A(\ell)\,\mu(\ell)\sum_{t\le\ell}(\rho_t - C)^+ s_t(\ell).
$$

$B_\text{ratio}$ is the bias of per-token ratios: they ignore the other tokens.
$B_\text{trunc}$ is the truncation.

$B_\text{ratio}$ is there even without a cap: a token-level ratio corrects the token's own
probability, not those of the tokens before it, so token IS is biased for a sequence-level reward
unless $\mu = \pi$. $B_\text{trunc}$ is IS1's truncation bias, token by token. The proof checks the
identity symbolically for $M = 3$ (symbolic target and behaviour hazards, symbolic advantages and
scores) on every subset of tokens over the cap, and `refimpl.learning.corrected_scores` against it.

**Direction of the length bias (claims LRN3, LRN4).** For any two laws $q, p$ on $1..M$ with CDFs
$F_q, F_p$, summation by parts gives

$$
\sum_\ell (q(\ell) - p(\ell))\,f(\ell)
= \sum_{\ell=1}^{M-1} D(\ell)\,\bigl(f(\ell) - f(\ell+1)\bigr),
$$

with $D = F_q - F_p$.

First-$k$ dispatch and a staleness mask (without lag: $q_\eta \propto p\,\mathrm{keep}$, keep
non-increasing) both make $q$ stochastically smaller than $p$ ($F_q \ge F_p$; conventions
§first-k-of-n, §async-dispatch). So **if $\ell \mapsto A(\ell)\,u^\top s(\ell)$ is non-increasing,
the bias has a non-negative component along $u$** (LRN3). For the one-parameter policy with a
common logit ($h(t) = \sigma(\theta)$ before $M$), $s(\ell+1) - s(\ell) = -h$ for $\ell + 1 < M$ and
$-1$ at $M$: the score falls with length, raising $\theta$ shortens the outputs, and
$\partial_\theta E[L] < 0$. With a length-neutral positive advantage ($A \equiv a > 0$, e.g. a
reward that does not depend on the length and no baseline), the on-policy gradient is 0 and the
bias is $\ge 0$ along $\theta$, i.e. **the length bias pushes the policy towards shorter outputs**;
with $A \equiv a < 0$ (a baseline above every reward) it pushes towards longer ones (LRN4).

**Carried leftovers remove the length bias and leave staleness (claim LRN5).** First $k$ of $n$
whose leftovers keep running into the next step launches exactly $k$ fresh rollouts per step (to
have $n$ in flight again) and trains every launched rollout exactly once, after at most a bounded
number of steps. In the stationary chain of carried rollouts, the expected number of trained
samples of length $\ell$ per step therefore equals the expected number launched, $k\,p(\ell)$: the
trained length law **is** $p$, and at a fixed policy the uncorrected batch gradient is $\nabla J$.
The $n - k$ carried rollouts each gain one version of staleness per step, so the staleness
trained per step sums to $n - k$ and (Little's law) $E[s] = (n-k)/k$. The proof builds the chain of
$n = 2$, $k = 1$ on a two-point law with a symbolic probability, solves its stationary law with
SymPy and checks both identities; `refimpl.learning.first_k_carry_gradient` agrees on random
rational laws. The first batches of a cold start are short-biased (they are plain first $k$).

**Inverse propensity for the staleness mask (claim LRN6).** The mask keeps a rollout of length
$\ell$ with probability $\mathrm{keep}(\ell)$ (fluid model), so the trained law is
$q = p\,\mathrm{keep}/\kappa$ with $\kappa = \sum p\,\mathrm{keep}$ the kept fraction; weighting each
kept sample by $\kappa/\mathrm{keep}(\ell)$ gives $E_q[w f] = \sum_{\ell:\,\mathrm{keep}(\ell) > 0}
p(\ell) f(\ell)$: unbiased for every length the mask can keep, and blind to the lengths
$\ell \ge (\eta+1)\Delta$ it never keeps.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

import refimpl
from proofs._framework import assert_close, assert_nonnegative, assert_zero, claim
from refimpl import learning as lrn


def _tuple_expectation(probs: list[Any], n: int, k: int, value: Any) -> tuple[Any, list[Any]]:
    """``E[value(lengths, shares)]`` over every n-tuple, and the inclusion probability per length.

    ``shares[i]`` is the probability that rollout ``i`` is in the batch given the tuple (the tied
    share of the free places)."""
    m = len(probs)
    total = sp.Integer(0)
    incl = [sp.Integer(0)] * m
    for tup in itertools.product(range(m), repeat=n):
        prob = sp.Integer(1)
        for j in tup:
            prob *= probs[j]
        shares = []
        for i, j in enumerate(tup):
            shorter = sum(1 for x in tup if x < j)
            equal = sum(1 for x in tup if x == j)  # including i
            shares.append(sp.Min(sp.Max(sp.Rational(k - shorter, equal), 0), 1))
            if i == 0:
                incl[j] += prob * shares[-1] / probs[j]
        total += prob * value(tup, shares)
    return total, incl


@claim(
    "LRN1",
    r"Inverse propensity makes the first-$k$ gradient exact: the HT batch gradient with "
    r"weights $k/(n\pi)$ has mean $\nabla J$ for every $n \le 3$, "
    r"$k \le n$, with symbolic probabilities $p_1, p_2, 1 - p_1 - p_2$ and symbolic $A s$ per length "
    r"(batch enumerated, $\pi$ from the same enumeration); the uncorrected mean is "
    r"$\sum_\ell q(\ell)A s$ with $q$ = `selected_pmf`; the Hájek estimate is biased for $k < n$ "
    r"(exact counterexample); `refimpl.learning.first_k_gradient` agrees on rational policies.",
    method="exact",
    scope="every n <= 3, k <= n, three-point laws with symbolic probabilities; the library check on rational policies",
)
def ipw_first_k_gradient_is_exact() -> None:
    p1, p2 = sp.symbols("p1 p2", positive=True)
    probs = [p1, p2, 1 - p1 - p2]
    f = sp.symbols("f1:4", real=True)
    target = sp.Add(*(probs[j] * f[j] for j in range(3)))
    for n in range(1, 4):
        for k in range(1, n + 1):
            _, pi = _tuple_expectation(probs, n, k, lambda tup, sh: 0)
            pi = [sp.factor(sp.expand(x)) for x in pi]

            def ht(
                tup: tuple[int, ...], sh: list[Any], pi: list[Any] = pi, k: int = k, n: int = n
            ) -> Any:
                return (
                    sp.Add(
                        *(
                            s * sp.Rational(k, n) / pi[j] * f[j]
                            for s, j in zip(sh, tup, strict=True)
                        )
                    )
                    / k
                )

            def plain(tup: tuple[int, ...], sh: list[Any], k: int = k) -> Any:
                return sp.Add(*(s * f[j] for s, j in zip(sh, tup, strict=True))) / k

            mean_ht, _ = _tuple_expectation(probs, n, k, ht)
            assert_zero(sp.cancel(sp.together(mean_ht - target)), label=f"LRN1 HT n={n} k={k}")
            mean_plain, _ = _tuple_expectation(probs, n, k, plain)
            q = [sp.Rational(n, k) * probs[j] * pi[j] for j in range(3)]
            assert_zero(
                sp.expand(mean_plain - sp.Add(*(q[j] * f[j] for j in range(3)))),
                label=f"LRN1 uncorrected = selected law, n={n} k={k}",
            )
            # the library's pi and q on a rational point
            point = {p1: sp.Rational(1, 5), p2: sp.Rational(1, 2)}
            pmf = [Fraction(1, 5), Fraction(1, 2), Fraction(3, 10)]
            lib_pi = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
            for j in range(3):
                assert_zero(
                    pi[j].subs(point) - sp.Rational(lib_pi[j].numerator, lib_pi[j].denominator)
                )
    # the library on random rational tabular policies, and the Hájek counterexample
    rng = random.Random(18)
    eye = [[int(i == j) for j in range(4)] for i in range(4)]
    for _ in range(10):
        h = [Fraction(rng.randint(1, 9), 10) for _ in range(3)] + [Fraction(1)]
        p = lrn.hazard_length_pmf(h)
        s = lrn.token_scores(h, eye).sum(axis=1)
        qual = [Fraction(rng.randint(0, 8), 8) for _ in range(4)]
        n = rng.randint(1, 5)
        k = rng.randint(1, n)
        got = lrn.first_k_gradient(p, s, qual, n=n, k=k, correction="horvitz_thompson")
        assert list(got.mean) == list(lrn.policy_gradient(p, s, qual).mean)
    h = [Fraction(1, 3), Fraction(1, 2), Fraction(1)]
    p = lrn.hazard_length_pmf(h)
    s = lrn.token_scores(h, [[int(i == j) for j in range(3)] for i in range(3)]).sum(axis=1)
    qual = [Fraction(1, 4), Fraction(1, 2), Fraction(3, 4)]
    hajek = lrn.first_k_gradient(p, s, qual, n=3, k=1, correction="hajek").mean
    assert list(hajek) != list(lrn.policy_gradient(p, s, qual).mean), "LRN1 Hájek counterexample"


# M = 3: tokens of each length (position, action); 'c' continue, 's' stop. Stop at 3 is forced.
_TOKENS = {1: [(1, "s")], 2: [(1, "c"), (2, "s")], 3: [(1, "c"), (2, "c")]}


@claim(
    "LRN2",
    r"The bias of token TIS is $B_\text{ratio} - B_\text{trunc}$ (above), on every subset of "
    r"tokens over the cap ($M = 3$, symbolic "
    r"hazards of target and behaviour, advantages, scores); $B_\text{ratio}$ vanishes for all $A, s$ "
    r"only if $\mu = \pi$ (it is not 0 at a rational point with $\mu \ne \pi$), so token IS is "
    r"biased even without a cap; `refimpl.learning.corrected_scores` agrees.",
    method="exact",
    scope="M = 3 (symbolic hazards, advantages and scores), every subset of tokens over the cap",
)
def token_tis_bias_closed_form() -> None:
    h1, h2, g1, g2, cap = sp.symbols("h1 h2 g1 g2 C", positive=True)
    pi_tok = {(1, "s"): h1, (1, "c"): 1 - h1, (2, "s"): h2, (2, "c"): 1 - h2}
    mu_tok = {(1, "s"): g1, (1, "c"): 1 - g1, (2, "s"): g2, (2, "c"): 1 - g2}
    adv = sp.symbols("A1:4", real=True)
    score = {
        (ell, i): sp.Symbol(f"s{ell}_{i}", real=True)
        for ell in _TOKENS
        for i in range(len(_TOKENS[ell]))
    }
    slots = [(ell, i) for ell in _TOKENS for i in range(len(_TOKENS[ell]))]

    def prod(values: list[Any]) -> Any:
        return sp.Mul(*values) if values else sp.Integer(1)

    on = sp.Add(
        *(
            prod([pi_tok[a] for a in _TOKENS[ell]])
            * adv[ell - 1]
            * sp.Add(*(score[(ell, i)] for i in range(len(_TOKENS[ell]))))
            for ell in _TOKENS
        )
    )
    for size in range(len(slots) + 1):
        for over in itertools.combinations(slots, size):
            estimate = sp.Integer(0)
            ratio_part = sp.Integer(0)
            trunc_part = sp.Integer(0)
            for ell, toks in _TOKENS.items():
                mu_seq = prod([mu_tok[a] for a in toks])
                pi_seq = prod([pi_tok[a] for a in toks])
                for i, a in enumerate(toks):
                    rho = pi_tok[a] / mu_tok[a]
                    w = cap if (ell, i) in over else rho
                    estimate += mu_seq * adv[ell - 1] * w * score[(ell, i)]
                    others = prod([mu_tok[b] for j, b in enumerate(toks) if j != i])
                    ratio_part += adv[ell - 1] * score[(ell, i)] * (pi_tok[a] * others - pi_seq)
                    if (ell, i) in over:
                        trunc_part += adv[ell - 1] * mu_seq * (rho - cap) * score[(ell, i)]
            assert_zero(
                sp.cancel(estimate - on - (ratio_part - trunc_part)),
                label=f"LRN2 token TIS bias, over-cap tokens {over}",
            )
    point = {
        h1: sp.Rational(1, 2),
        h2: sp.Rational(1, 3),
        g1: sp.Rational(1, 4),
        g2: sp.Rational(1, 2),
    }
    first = ratio_part.subs(point)  # the ratio term does not depend on the over-cap set
    assert sp.simplify(first) != 0, "LRN2: token IS without a cap is biased when mu != pi"
    # the library: token TIS at theta vs behaviour on the real policy, against the closed form
    phi = lrn.length_features(5, degree=1)
    theta, beh = np.array([-0.8, 0.5]), np.array([-0.3, -0.4])
    for cap_value in (1.0, 1.3, 5.0):
        got = lrn.corrected_scores(theta, beh, phi, correction="token_tis", cap=cap_value)
        ht, hb = lrn.stop_hazard(theta, phi), lrn.stop_hazard(beh, phi)
        tok = lrn.token_scores(ht, phi)
        lt, mask = lrn.token_log_probs(ht)
        lb, _ = lrn.token_log_probs(hb)
        rho = np.exp(lt - lb) * mask
        pb = lrn.hazard_length_pmf(hb)
        pt = lrn.hazard_length_pmf(ht)
        a = np.linspace(-1.0, 2.0, 5)
        found = (pb * a) @ got
        # closed form: pi(a_t) prod_{u != t} mu(a_u) = mu(l) rho_t; minus the truncation term
        ratio = ((a * pb)[:, None, None] * rho[:, :, None] * tok).sum(axis=(0, 1)) - (
            (a * pt)[:, None] * tok.sum(axis=1)
        ).sum(axis=0)
        trunc = ((a * pb)[:, None, None] * np.maximum(rho - cap_value, 0.0)[:, :, None] * tok).sum(
            axis=(0, 1)
        )
        on_lib = (a * pt) @ tok.sum(axis=1)
        for c in range(2):
            assert_close(
                float(found[c]),
                float(on_lib[c] + ratio[c] - trunc[c]),
                rel=1e-12,
                abs_=1e-14,
                label=f"LRN2 refimpl C={cap_value}",
            )


@claim(
    "LRN3",
    r"Direction of a length bias: summation by parts (symbolic, $M = 5$), so $F_q \ge F_p$ and "
    r"$f$ non-increasing give a "
    r"non-negative bias along $u$ for $f = A\,u^\top s$; first-$k$ (`selected_pmf`) and the fluid "
    r"staleness mask give $F_q \ge F_p$ exactly on random rational laws.",
    method="symbolic",
    scope="M = 5 (symbolic summation by parts); the library check on random rational laws",
)
def direction_of_length_bias() -> None:
    m = 5
    q = sp.symbols(f"q1:{m + 1}", real=True)
    p = sp.symbols(f"p1:{m + 1}", real=True)
    f = sp.symbols(f"f1:{m + 1}", real=True)
    # laws: the last mass closes the total to 1 for both
    qq = [*list(q[:-1]), 1 - sp.Add(*q[:-1])]
    pp = [*list(p[:-1]), 1 - sp.Add(*p[:-1])]
    lhs = sp.Add(*((qq[i] - pp[i]) * f[i] for i in range(m)))
    fq = [sp.Add(*qq[: i + 1]) for i in range(m)]
    fp = [sp.Add(*pp[: i + 1]) for i in range(m)]
    rhs = sp.Add(*((fq[i] - fp[i]) * (f[i] - f[i + 1]) for i in range(m - 1)))
    assert_zero(sp.expand(lhs - rhs), label="LRN3 summation by parts")
    gap = sp.symbols(f"D1:{m}", nonnegative=True)
    fall = sp.symbols(f"e1:{m}", nonnegative=True)
    assert_nonnegative(sp.Add(*(gap[i] * fall[i] for i in range(m - 1))), label="LRN3 sign")
    rng = random.Random(3)
    for _ in range(20):
        raw = [Fraction(rng.randint(0, 9)) for _ in range(rng.randint(2, 8))]
        raw[0] += 1
        pmf = [x / sum(raw) for x in raw]
        n = rng.randint(1, 6)
        sel = refimpl.selected_pmf(pmf, n=n, k=rng.randint(1, n))
        cq = cp = Fraction(0)
        for a, b in zip(sel, pmf, strict=True):
            cq, cp = cq + a, cp + b
            assert cq >= cp, "first-k trained law is stochastically smaller"
        ell = np.arange(1, len(pmf) + 1)
        keep = refimpl.fluid_keep_probability(
            ell, step_time=rng.uniform(0.5, 4.0), eta=rng.randint(0, 2)
        )
        pf = np.array([float(x) for x in pmf])
        qm = pf * keep / (pf @ keep)
        assert np.all(np.cumsum(qm) >= np.cumsum(pf) - 1e-12), "mask trained law is smaller"


@claim(
    "LRN4",
    r"One-parameter stop hazard $h = \sigma(\theta)$ before $M$: the score falls with length "
    r"($s(\ell+1) - s(\ell) = -h$ for $\ell+1 < M$, $-1$ at $M$; symbolic, $M = 6$), so with a "
    r"length-neutral advantage $A \equiv a$ the on-policy gradient is 0 and first-$k$'s is "
    r"$\ge 0$ along $\theta$ for $a > 0$ (towards shorter outputs: $\partial_\theta E[L] < 0$) and "
    r"$\le 0$ for $a < 0$; `first_k_gradient` agrees on rational hazards.",
    method="symbolic",
    scope="M = 6 (symbolic); the library check on rational hazards",
)
def length_bias_pushes_towards_shorter_outputs() -> None:
    m = 6
    theta = sp.Symbol("theta", real=True)
    h = 1 / (1 + sp.exp(-theta))
    logp = [sp.log(h) + (ell - 1) * sp.log(1 - h) for ell in range(1, m)]
    logp.append((m - 1) * sp.log(1 - h))

    def formula(ell: int, hh: Any) -> Any:
        return (1 - hh) - (ell - 1) * hh if ell < m else -(m - 1) * hh

    for ell in range(1, m + 1):
        assert_zero(sp.diff(logp[ell - 1], theta) - formula(ell, h), label=f"LRN4 score {ell}")
    hs = sp.Symbol("h", positive=True)
    for ell in range(1, m - 1):
        assert_zero(formula(ell + 1, hs) - formula(ell, hs) + hs, label=f"LRN4 step {ell}")
    assert_zero(formula(m, hs) - formula(m - 1, hs) + 1, label="LRN4 last step")
    # E[L] = 1 + sum_{t<M} (1-h)^t; dE[L]/dθ = -h(1-h) sum_t t (1-h)^(t-1) < 0
    e_len = 1 + sp.Add(*((1 - h) ** t for t in range(1, m)))
    slope = -h * (1 - h) * sp.Add(*(t * (1 - h) ** (t - 1) for t in range(1, m)))
    assert_zero(sp.diff(e_len, theta) - slope, label="LRN4 dE[L]/dθ")
    r = sp.Symbol("r", positive=True)  # r = 1 - h
    assert_nonnegative(sp.Add(*(t * r ** (t - 1) for t in range(1, m))), label="LRN4 sign of slope")
    rng = random.Random(4)
    for _ in range(10):
        hz = [Fraction(rng.randint(1, 9), 10)] * 4 + [Fraction(1)]
        sc = lrn.token_scores(hz, [[1]] * 5).sum(axis=1)
        pmf = lrn.hazard_length_pmf(hz)
        qual = [Fraction(1, 2)] * 5
        for a in (Fraction(1, 2), Fraction(-1, 2)):
            base = Fraction(1, 2) - a  # advantage Q - b = a at every length
            assert lrn.policy_gradient(pmf, sc, qual, baseline=base).mean[0] == 0
            got = lrn.first_k_gradient(pmf, sc, qual, n=3, k=1, baseline=base).mean[0]
            assert (got > 0) if a > 0 else (got < 0), "LRN4 sign on the library"


def _carry_chain(probs: list[Any], n: int, k: int) -> tuple[list[Any], dict[Any, Any]]:
    """Stationary law of the carried rollouts (remaining, age, length) and the trained law.

    Written apart from the library: fresh rollouts are drawn one by one (ordered tuples), the
    batch is the k that finish first, ties in launch order (older first, then launch position)."""
    m = len(probs)

    def step(state: tuple[Any, ...], fresh: tuple[int, ...]) -> tuple[list[Any], tuple[Any, ...]]:
        items = [(r, -a, i, ell) for i, (r, a, ell) in enumerate(state)]
        items += [(ell + 1, 0, len(state) + i, ell) for i, ell in enumerate(fresh)]
        items.sort()
        batch, rest = items[:k], items[k:]
        end = batch[-1][0]
        return [(-na, ell) for _, na, _, ell in batch], tuple(
            sorted((r - end, -na + 1, ell) for r, na, _, ell in rest)
        )

    def outs(state: tuple[Any, ...]) -> list[tuple[Any, list[Any], tuple[Any, ...]]]:
        res = []
        for fresh in itertools.product(range(m), repeat=n - len(state)):
            prob = sp.Integer(1)
            for ell in fresh:
                prob *= probs[ell]
            batch, nxt = step(state, fresh)
            res.append((prob, batch, nxt))
        return res

    seen: dict[tuple[Any, ...], Any] = {}
    todo: list[tuple[Any, ...]] = [()]
    while todo:
        st = todo.pop()
        if st in seen:
            continue
        seen[st] = outs(st)
        todo += [nxt for _, _, nxt in seen[st] if nxt not in seen]
    states = [st for st in seen if st != ()]
    x = sp.symbols(f"x0:{len(states)}")
    eqs = [sp.Add(*x) - 1]
    for j, target in enumerate(states):
        inflow = sp.Add(
            *(
                x[i] * prob
                for i, st in enumerate(states)
                for prob, _, nxt in seen[st]
                if nxt == target
            )
        )
        eqs.append(inflow - x[j])
    sol = sp.solve(eqs[:-1], x, dict=True)[0]
    pi = [sp.factor(sol[v]) for v in x]
    trained: dict[Any, Any] = {}
    for w, st in zip(pi, states, strict=True):
        for prob, batch, _ in seen[st]:
            for age, ell in batch:
                trained[(age, ell)] = trained.get((age, ell), 0) + w * prob / k
    return pi, trained


@claim(
    "LRN5",
    r"First $k$ of $n$ with carried leftovers, stationary chain: the trained length law is $p$ "
    r"(so at a fixed policy the uncorrected batch gradient is $\nabla J$) and the mean staleness is "
    r"$(n-k)/k$; the chain solved symbolically ($n = 2$, $k = 1$, two- and three-point laws with "
    r"symbolic probabilities); `first_k_carry_gradient` agrees exactly on random rational laws "
    r"($n \le 4$, $n - k = 1$).",
    method="exact",
    scope="n = 2, k = 1 on two- and three-point laws (symbolic); the library on rational laws",
)
def carried_leftovers_remove_the_length_bias() -> None:
    a, b = sp.symbols("a b", positive=True)
    for probs in ([a, 1 - a], [a, b, 1 - a - b]):
        _, trained = _carry_chain(probs, 2, 1)
        for ell, p_ell in enumerate(probs):
            got = sp.Add(*(v for (age, e), v in trained.items() if e == ell))
            assert_zero(sp.cancel(sp.together(got - p_ell)), label=f"LRN5 law {len(probs)}:{ell}")
        mean_s = sp.Add(*(age * v for (age, _), v in trained.items()))
        assert_zero(sp.cancel(sp.together(mean_s - 1)), label=f"LRN5 staleness {len(probs)}")
    rng = random.Random(5)
    for _ in range(6):
        m = rng.randint(2, 3)
        h = [Fraction(rng.randint(1, 9), 10) for _ in range(m - 1)] + [Fraction(1)]
        eye = [[int(i == j) for j in range(m)] for i in range(m)]
        p = lrn.hazard_length_pmf(h)
        sc = lrn.token_scores(h, eye).sum(axis=1)
        qual = [Fraction(rng.randint(0, 8), 8) for _ in range(m)]
        n = rng.randint(2, 4)
        c = lrn.first_k_carry_gradient(p, sc, qual, n=n, k=n - 1)
        assert list(c.trained_law.sum(axis=0)) == list(p), "LRN5 library law"
        assert list(c.mean) == list(lrn.policy_gradient(p, sc, qual).mean), "LRN5 library mean"
        ages = sum((age * x for age, row in enumerate(c.trained_law) for x in row), Fraction(0))
        assert ages == Fraction(1, n - 1), "LRN5 library staleness"
        # the chain written here and the library's give the same (staleness, length) law
        _, trained = _carry_chain([sp.Rational(x.numerator, x.denominator) for x in p], n, n - 1)
        for (age, ell), v in trained.items():
            lib = c.trained_law[age, ell]
            assert_zero(v - sp.Rational(lib.numerator, lib.denominator), label="LRN5 chain")


@claim(
    "LRN6",
    r"Inverse propensity for the staleness mask: with $q = p\,\mathrm{keep}/\kappa$ and weights "
    r"$\kappa/\mathrm{keep}$, $E_q[w f] = \sum_{\mathrm{keep} > 0} p f$ (symbolic, $M = 4$, the last "
    r"length never kept); `async_gradient_exact(mask_ipw=True)` equals that sum over the lengths "
    r"the fluid mask keeps, exactly, on rational laws.",
    method="symbolic",
    scope="M = 4 (symbolic); the library on rational tabular policies",
)
def mask_ipw_recovers_the_kept_lengths() -> None:
    m = 4
    p = sp.symbols(f"p1:{m + 1}", positive=True)
    kp = [*sp.symbols(f"k1:{m}", positive=True), sp.Integer(0)]
    f = sp.symbols(f"f1:{m + 1}", real=True)
    kappa = sp.Add(*(p[i] * kp[i] for i in range(m)))
    got = sp.Add(*(p[i] * kp[i] / kappa * (kappa / kp[i]) * f[i] for i in range(m) if kp[i] != 0))
    assert_zero(sp.simplify(got - sp.Add(*(p[i] * f[i] for i in range(m - 1)))), label="LRN6")
    rng = random.Random(6)
    for _ in range(6):
        h = [Fraction(rng.randint(1, 9), 10) for _ in range(4)] + [Fraction(1)]
        eye = [[int(i == j) for j in range(5)] for i in range(5)]
        qual = [Fraction(rng.randint(0, 8), 8) for _ in range(5)]
        slots, batch, eta = rng.randint(2, 8), rng.randint(1, 4), rng.randint(0, 2)
        got_lib = lrn.async_gradient_exact(
            h, [h] * 40, eye, qual, slots=slots, batch=batch, eta=eta, mask_ipw=True
        ).mean
        pmf = lrn.hazard_length_pmf(h)
        sc = lrn.token_scores(h, eye).sum(axis=1)
        delta = lrn.fluid_step_time(pmf, slots=slots, batch=batch, eta=eta)
        want = [
            sum(
                (pmf[j] * qual[j] * sc[j][c] for j in range(5) if j + 1 < (eta + 1) * delta),
                Fraction(0),
            )
            for c in range(5)
        ]
        assert list(got_lib) == want, "LRN6 library"
