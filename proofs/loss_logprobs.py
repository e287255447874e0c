r"""# Token log-probabilities: temperature, top-k, top-p, and the sampler/trainer mismatch

Let $z \in \mathbb{R}^V$ be the logits of one position, $T > 0$ the temperature, $y = z/T$, and
write $L(v) = \log\sum_j e^{v_j}$ (log-sum-exp). The sampler draws token $x$ from
$\mu = \mathrm{softmax}(y)$, possibly restricted to a kept support $S$; the trainer recomputes a
log-probability for the same token from the same logits. `refimpl.losses.logprobs` fixes both.

**Temperature on the logits (claim LP1).** $\log\mu_x = y_x - L(y)$ and
$\sum_x e^{y_x - L(y)} = e^{L(y)}e^{-L(y)} = 1$: dividing the *logits* by $T$ gives a
normalised distribution for every $T$.

**Truncation renormalises (claim LP2).** A sampler that keeps only the tokens of $S$ draws from
$\mu^S_x = p_x/P(S)$ on $S$ (0 elsewhere), with $p = \mathrm{softmax}(y)$ and $P(S) = \sum_{j\in S}
p_j$, so on the support

$$
\log\mu^S_x = y_x - \log\sum_{j\in S} e^{y_j} = \log p_x - \log P(S),
$$

and a token outside $S$ has log-probability $-\infty$. The kept support is built in vLLM's order:
temperature, then top-k (the tokens with $y_j$ at least the $k$-th largest value; every token tied
with the $k$-th is kept), then top-p on the distribution $q$ *renormalised over the top-k
support*: sorting by decreasing $q$, the smallest prefix whose cumulative mass is $\ge p$, widened
to every token tied with its last one. Equivalently, token $i$ is kept iff
$\sum_{j:\,q_j > q_i} q_j < p$. A trainer that scores the full softmax for a token the sampler drew
under truncation therefore sees the ratio $\pi/\mu = P(S) \le 1$, the same for every kept token
of that position.

The order matters. With $p = (0.4, 0.3, 0.2, 0.1)$, $k = 2$ and top-p $= 0.5$: top-k first keeps
$\{0, 1\}$, renormalised to $(4/7, 3/7)$; the mass before token 1 is $4/7 \ge 0.5$, so top-p keeps
$\{0\}$. Top-p first, on the full distribution, keeps $\{0, 1\}$ (the mass before token 1 is
$0.4 < 0.5$), and top-k then keeps both.

**Temperature on the log-probabilities (claims LP3, LP4).** The bug of dividing the
log-probabilities, $\ell_x = \log p^{(1)}_x / T$ with $p^{(1)} = \mathrm{softmax}(z)$, gives

$$
\ell_x - \log\mu_x = \frac{z_x - L(z)}{T} - \Bigl(\frac{z_x}{T} - L(z/T)\Bigr)
= L(z/T) - \frac{L(z)}{T} =: \Delta,
$$

the same for every token $x$ of the position, with $e^{\Delta} = \sum_x e^{\ell_x}
= \sum_x \bigl(p^{(1)}_x\bigr)^{1/T}$: $\ell$ is not a log-distribution unless $\Delta = 0$. Written
with the brief's terms, $\Delta = \bigl[L(z/T) - L(z)\bigr] - (1/T - 1)L(z)$. For $V \ge 2$ and finite
logits every $p^{(1)}_x$ lies in $(0, 1)$, and for such $a$, $a^{s} < a$ when $s > 1$ and $a^s > a$
when $s < 1$. Summing over $x$ with $s = 1/T$: $\Delta < 0$ for $T < 1$, $\Delta > 0$ for $T > 1$,
and $\Delta = 0$ only at $T = 1$. So the buggy trainer's importance ratio $e^{\Delta}$ is 1 only at
$T = 1$; below it every token of the position is under-weighted by the same factor
$\sum_x (p^{(1)}_x)^{1/T} < 1$.

**The gradient (claim LP5).** $\partial(y_x - L(y))/\partial z_j = (\mathbb{1}[j = x] - \mu_j)/T$.
With a support $S$ held fixed (it is piecewise constant in the logits), the same computation on
$y_x - \log\sum_{j\in S} e^{y_j}$ gives $(\mathbb{1}[j = x] - \mu^S_j)/T$ with $\mu^S_j = 0$ off $S$.

**Entropy (claim LP6).** $H = -\sum_j \mu_j \log\mu_j = L(y) - \sum_j \mu_j y_j$, since
$\log\mu_j = y_j - L(y)$ and $\sum_j\mu_j = 1$; verl's `entropy_from_logits` uses the second form.

The exact checks use logits $z = \log w$ with positive integers $w$ and temperatures $T = 1/m$
(then $\mu \propto w^m$ is rational) or $T = 2, 3$ with square or cube weights, so every
probability is an exact `Fraction`; `refimpl` is evaluated in float64 against them.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import assert_close, assert_zero, claim
from refimpl.losses.logprobs import (
    LogprobSemantics,
    logprob_mismatch,
    token_entropy,
    token_logprobs,
    token_logprobs_grad,
)

V = 3  # vocabulary of the symbolic checks
z = sp.symbols(f"z0:{V}", real=True)
T = sp.Symbol("T", positive=True)
u = sp.symbols(f"u0:{V}", positive=True)  # u_j = exp(z_j)


def _lse(values: list[sp.Expr]) -> sp.Expr:
    return sp.log(sp.Add(*(sp.exp(v) for v in values)))


# ---------------------------------------------------------------------------------------------
# exact rational set-ups and an independent definition of the kept support
# ---------------------------------------------------------------------------------------------


def _tempered(w: list[int], m: int) -> list[Fraction]:
    """softmax(log(w) * m) exactly: the distribution at temperature 1/m."""
    powered = [Fraction(x) ** m for x in w]
    total = sum(powered, Fraction(0))
    return [x / total for x in powered]


def _kept_by_definition(q: list[Fraction], top_k: int | None, top_p: Fraction | None) -> set[int]:
    """Top-k (ties kept), then top-p on the renormalised mass (ties kept), from the definitions."""
    kept = set(range(len(q)))
    if top_k is not None:
        kth = sorted(q, reverse=True)[top_k - 1]
        kept = {i for i in kept if q[i] >= kth}
    if top_p is not None:
        mass = sum((q[i] for i in kept), Fraction(0))
        r = {i: q[i] / mass for i in kept}
        kept = {i for i in kept if sum((r[j] for j in kept if r[j] > r[i]), Fraction(0)) < top_p}
    return kept


def _smallest_prefix(r: dict[int, Fraction], top_p: Fraction) -> set[int]:
    """Brute force: the fewest highest-probability tokens with mass >= top_p, plus boundary ties."""
    ranked = sorted(r.values(), reverse=True)
    n = next(n for n in range(1, len(ranked) + 1) if sum(ranked[:n], Fraction(0)) >= top_p)
    return {i for i, x in r.items() if x >= ranked[n - 1]}


def _near_boundary(q: list[Fraction], kept_k: set[int], top_p: Fraction) -> bool:
    """True when the mass before a token is within 1e-9 of top_p (float64 may decide it either way)."""
    mass = sum((q[i] for i in kept_k), Fraction(0))
    ranked = sorted((q[i] / mass for i in kept_k), reverse=True)
    before = itertools.accumulate(ranked[:-1], initial=Fraction(0))
    return any(abs(float(s - top_p)) < 1e-9 for s in before)


def _rows(w: list[int]) -> np.ndarray:
    return np.log(np.array([[w]], dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# claims
# ---------------------------------------------------------------------------------------------


@claim(
    "LP1",
    r"Temperature on the logits gives a normalised distribution: "
    r"$\sum_x e^{z_x/T - L(z/T)} = 1$ (symbolic logits, 3 tokens); `token_logprobs` equals "
    r"$\log(w_x^m/\sum_j w_j^m)$ exactly for $z = \log w$, $T = 1/m$.",
    method="symbolic",
    scope="3 tokens (symbolic logits and temperature); the library check on 40 random rational "
    "set-ups with V <= 6 and T in {1, 1/2, 1/3}",
)
def tempered_logprobs_are_normalised() -> None:
    y = [zi / T for zi in z]
    assert_zero(sp.Add(*(sp.exp(yi - _lse(y)) for yi in y)) - 1, label="LP1 normalised")
    rng = random.Random(11)
    for _ in range(40):
        w = [rng.randint(1, 9) for _ in range(rng.randint(1, 6))]
        m = rng.choice([1, 2, 3])
        q = _tempered(w, m)
        for x in range(len(w)):
            found = float(token_logprobs(_rows(w), [[x]], temperature=1.0 / m)[0, 0])
            assert_close(found, math.log(q[x]), rel=1e-12, abs_=1e-14, label="LP1 refimpl")


@claim(
    "LP2",
    r"On the kept support, truncated log-probabilities are $\log p_x - \log P(S)$ and sum to 1; "
    r"off it they are $-\infty$. The support (top-k with ties, then top-p on the renormalised "
    r"mass with boundary ties) equals the smallest highest-probability prefix of mass $\ge p$; "
    r"`token_logprobs` matches exact `Fraction` values, `logprob_mismatch` of a full-softmax "
    r"trainer against it is $\log P(S)$ on every kept token, and the order of top-k and top-p "
    r"matters.",
    method="exact",
    scope="3 tokens and every support for the identity (symbolic); the library check on 300 "
    "random rational set-ups (V <= 6, T in {1, 1/2}) whose cumulative masses avoid top_p exactly",
)
def truncation_renormalises() -> None:
    p = sp.symbols(f"p0:{V}", positive=True)
    for size in range(1, V + 1):
        for support in itertools.combinations(range(V), size):
            mass = sp.Add(*(p[j] for j in support))
            for x in support:
                renormalised = sp.log(p[x] / mass)
                assert_zero(
                    sp.expand_log(renormalised - (sp.log(p[x]) - sp.log(mass)), force=True),
                    label=f"LP2 log p - log P(S), S={support}",
                )
            assert_zero(sp.Add(*(p[x] / mass for x in support)) - 1, label="LP2 sums to 1")
    rng = random.Random(12)
    checked = 0
    while checked < 300:
        w = [rng.randint(1, 6) for _ in range(rng.randint(1, 6))]
        m = rng.choice([1, 2])
        q = _tempered(w, m)
        top_k = rng.choice([None, *range(1, len(w) + 1)])
        top_p = rng.choice([None, Fraction(1), Fraction(rng.randint(1, 19), 20)])
        kept_k = _kept_by_definition(q, top_k, None)
        if top_p is not None and _near_boundary(q, kept_k, top_p):
            continue
        checked += 1
        kept = _kept_by_definition(q, top_k, top_p)
        if top_p is not None:
            mass_k = sum((q[i] for i in kept_k), Fraction(0))
            prefix = _smallest_prefix({i: q[i] / mass_k for i in kept_k}, top_p)
            assert prefix == kept, f"LP2 prefix definition {prefix} != {kept}"
        mass = sum((q[i] for i in kept), Fraction(0))
        found = token_logprobs(
            np.repeat(_rows(w), len(w), axis=1),
            [list(range(len(w)))],
            temperature=1.0 / m,
            top_k=top_k,
            top_p=None if top_p is None else float(top_p),
        )[0]
        for x in range(len(w)):
            if x in kept:
                exact = math.log(q[x] / mass)
                assert_close(float(found[x]), exact, rel=1e-12, abs_=1e-14, label="LP2 refimpl")
            elif found[x] != -math.inf:
                raise AssertionError(f"LP2: token {x} outside {kept} has log-prob {found[x]}")
        sampler_p = None if top_p is None else float(top_p)
        ratio = logprob_mismatch(
            np.repeat(_rows(w), len(w), axis=1),
            [list(range(len(w)))],
            sampler={"temperature": 1.0 / m, "top_k": top_k, "top_p": sampler_p},
            trainer={"temperature": 1.0 / m},
        ).log_ratio[0]
        for x in kept:  # a full-softmax trainer against the truncating sampler: log P(S)
            assert_close(float(ratio[x]), math.log(mass), rel=1e-11, abs_=1e-13, label="LP2 ratio")
    q = [Fraction(4, 10), Fraction(3, 10), Fraction(2, 10), Fraction(1, 10)]
    assert _kept_by_definition(q, 2, Fraction(1, 2)) == {0}
    top_p_first = _kept_by_definition(q, None, Fraction(1, 2))
    assert {i for i in top_p_first if q[i] >= sorted(q)[-2]} == {0, 1}
    found = token_logprobs(_rows([4, 3, 2, 1]), [[1]], top_k=2, top_p=0.5)
    assert found[0, 0] == -math.inf, "LP2 order: token 1 must be cut by top-p after top-k"


@claim(
    "LP3",
    r"Dividing log-probabilities by $T$ shifts every token's log-probability by the same "
    r"$\Delta = L(z/T) - L(z)/T$, and $\sum_x e^{\log p^{(1)}_x/T} = e^{\Delta}$ "
    r"(symbolic, 3 tokens); `logprob_mismatch` with the trainer on `temperature_on='logprobs'` "
    r"returns $\Delta = \log\sum_x (p^{(1)}_x)^{1/T}$ on every token.",
    method="symbolic",
    scope="3 tokens (symbolic logits and temperature); the library check on 30 rational set-ups "
    "with T in {1/3, 1/2, 1}",
)
def temperature_on_logprobs_shift() -> None:
    log_total = sp.log(sp.Add(*u))
    delta = sp.log(sp.Add(*(ui ** (1 / T) for ui in u))) - log_total / T
    for x in range(V):
        bug = (sp.log(u[x]) - log_total) / T
        correct = sp.log(u[x]) / T - sp.log(sp.Add(*(ui ** (1 / T) for ui in u)))
        assert_zero(sp.expand_log(bug - correct - delta, force=True), label="LP3 shift")
    bug_sum = sp.Add(*(sp.exp((sp.log(ui) - log_total) / T) for ui in u))
    assert_zero(bug_sum - sp.exp(delta), label="LP3 mass")
    rng = random.Random(13)
    for _ in range(30):
        w = [rng.randint(1, 9) for _ in range(rng.randint(2, 5))]
        m = rng.choice([1, 2, 3])
        p1 = _tempered(w, 1)
        exact = math.log(sum((x**m for x in p1), Fraction(0)))
        out = logprob_mismatch(
            np.repeat(_rows(w), len(w), axis=1),
            [list(range(len(w)))],
            sampler=LogprobSemantics(temperature=1.0 / m),
            trainer=LogprobSemantics(temperature=1.0 / m, temperature_on="logprobs"),
        )
        for x in range(len(w)):
            assert_close(float(out.log_ratio[0, x]), exact, rel=1e-11, abs_=1e-13, label="LP3")


@claim(
    "LP4",
    r"The bug's shift $\Delta = \log\sum_x (p^{(1)}_x)^{1/T}$ is $< 0$ for $T < 1$, $> 0$ for "
    r"$T > 1$ and $0$ only at $T = 1$ (any $V \ge 2$, finite logits): the ratio is 1 only when "
    r"$T = 1$. Checked exactly on rational distributions; the general argument is in the text.",
    method="exact",
    scope="rational distributions with V in 2..5 and T in {1/4, 1/3, 1/2, 1}, and square or cube "
    "weights for T in {2, 3}; the sign for every V >= 2 follows from the text's inequality",
)
def temperature_on_logprobs_is_one_only_at_t1() -> None:
    rng = random.Random(14)
    for _ in range(40):
        p1 = _tempered([rng.randint(1, 9) for _ in range(rng.randint(2, 5))], 1)
        for m in (1, 2, 3, 4):  # T = 1/m: sum p^m
            total = sum((x**m for x in p1), Fraction(0))
            if (total < 1) != (m > 1) or (total == 1) != (m == 1):
                raise AssertionError(f"LP4: sum p^{m} = {total} for p = {p1}")
    for w, root in (([9, 16], 2), ([1, 4, 4], 2), ([1, 4, 4, 16], 2), ([27, 64, 125], 3)):
        total_w = sum(w)
        base = round(total_w ** (1 / root))
        assert base**root == total_w
        roots = [Fraction(round(x ** (1 / root)), base) for x in w]
        assert all(r**root == Fraction(x, total_w) for r, x in zip(roots, w, strict=True))
        if not sum(roots, Fraction(0)) > 1:
            raise AssertionError(f"LP4: sum p^(1/{root}) <= 1 for w = {w}")
        out = logprob_mismatch(
            _rows(w),
            [[0]],
            sampler=LogprobSemantics(temperature=float(root)),
            trainer=LogprobSemantics(temperature=float(root), temperature_on="logprobs"),
        )
        exact = math.log(sum(roots, Fraction(0)))
        assert_close(float(out.log_ratio[0, 0]), exact, rel=1e-12, label=f"LP4 T={root}")


@claim(
    "LP5",
    r"$\partial(y_x - \log\sum_{j\in S}e^{y_j})/\partial z_j = (\mathbb{1}[j=x] - "
    r"\mu^S_j)/T$ for every support $S \ni x$ held fixed (the full vocabulary: $(\text{onehot} - "
    r"p)/T$); `token_logprobs_grad` matches it at rational points.",
    method="symbolic",
    scope="3 tokens, every support containing the token (symbolic logits and temperature); the "
    "library check on 20 random rational set-ups",
)
def gradient_wrt_logits() -> None:
    y = [zi / T for zi in z]
    for size in range(1, V + 1):
        for support in itertools.combinations(range(V), size):
            log_norm = sp.log(sp.Add(*(sp.exp(y[j]) for j in support)))
            mu = {j: sp.exp(y[j]) / sp.exp(log_norm) for j in support}
            for x in support:
                value = y[x] - log_norm
                for j in range(V):
                    expected = ((1 if j == x else 0) - mu.get(j, 0)) / T
                    assert_zero(sp.diff(value, z[j]) - expected, label=f"LP5 S={support}")
    rng = random.Random(15)
    for _ in range(20):
        w = [rng.randint(1, 9) for _ in range(rng.randint(1, 5))]
        m = rng.choice([1, 2])
        top_k = rng.choice([None, *range(1, len(w) + 1)])
        q = _tempered(w, m)
        kept = _kept_by_definition(q, top_k, None)
        mass = sum((q[i] for i in kept), Fraction(0))
        x = rng.randrange(len(w))
        found = token_logprobs_grad(_rows(w), [[x]], temperature=1.0 / m, top_k=top_k)[0, 0]
        for j in range(len(w)):
            mu_j = q[j] / mass if j in kept else Fraction(0)
            exact = m * (Fraction(int(j == x and x in kept)) - mu_j)
            assert_close(float(found[j]), float(exact), rel=1e-12, abs_=1e-14, label="LP5")


@claim(
    "LP6",
    r"$-\sum_j\mu_j\log\mu_j = L(y) - \sum_j \mu_j y_j$ for $\mu = \mathrm{softmax}(y)$ "
    r"(symbolic, 3 tokens); `token_entropy` matches the exact entropy of rational distributions.",
    method="symbolic",
    scope="3 tokens (symbolic); the library check on 20 random rational set-ups with top-k",
)
def entropy_forms_agree() -> None:
    y = [zi / T for zi in z]
    mu = [sp.exp(yi - _lse(y)) for yi in y]
    lhs = -sp.Add(*(mi * (yi - _lse(y)) for mi, yi in zip(mu, y, strict=True)))
    rhs = _lse(y) - sp.Add(*(mi * yi for mi, yi in zip(mu, y, strict=True)))
    assert_zero(lhs - rhs, label="LP6 entropy forms")
    rng = random.Random(16)
    for _ in range(20):
        w = [rng.randint(1, 9) for _ in range(rng.randint(1, 6))]
        m = rng.choice([1, 2])
        top_k = rng.choice([None, *range(1, len(w) + 1)])
        q = _tempered(w, m)
        kept = _kept_by_definition(q, top_k, None)
        mass = sum((q[i] for i in kept), Fraction(0))
        exact = -sum(float(q[i] / mass) * math.log(q[i] / mass) for i in kept)
        found = float(token_entropy(_rows(w), temperature=1.0 / m, top_k=top_k)[0, 0])
        assert_close(found, exact, rel=1e-12, abs_=1e-14, label="LP6 refimpl")
