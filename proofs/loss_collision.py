r"""# The collision probability Σπ² of a softmax and its gradient

Let $z \in \mathbb{R}^V$ be the logits of one position, $T > 0$ the temperature, $y = z/T$,
$L(v) = \log\sum_j e^{v_j}$ and $\pi = \mathrm{softmax}(y)$, so $\log\pi_j = y_j - L(y)$.

**Three forms (claim CO1).** $S = \sum_j \pi_j^2 = \sum_j e^{2\log\pi_j} = e^{L(2y) - 2L(y)}$,
since $\sum_j e^{2y_j - 2L(y)} = e^{L(2y)}e^{-2L(y)}$. `refimpl` sums the second form (every
exponent is $\le 0$); verl 0.9.1's `calculate_sum_pi_squared_from_logits` evaluates the third.

**The gradient (claim CO1).** With $\partial\pi_k/\partial y_j = \pi_k(\mathbb{1}[k = j] - \pi_j)$,

$$
\frac{\partial S}{\partial z_j} = \frac{1}{T}\sum_k 2\pi_k\,\pi_k(\mathbb{1}[k = j] - \pi_j)
= \frac{2}{T}\,\pi_j\,(\pi_j - S).
$$

Its entries sum to $\frac{2}{T}(S - S) = 0$: a shift of every logit changes nothing.

**Range (claim CO2).** By Cauchy–Schwarz $1 = (\sum_j \pi_j)^2 \le V\sum_j\pi_j^2$, so
$1/V \le S \le 1$, with $S = 1/V$ exactly for equal logits. The library check uses logits
$z = \log w$ with positive integers $w$ and $T = 1/m$, where $\pi \propto w^m$ and $S$ and the
gradient are exact `Fraction`s.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import assert_close, assert_zero, claim
from refimpl.losses.collision import token_sum_pi_squared, token_sum_pi_squared_grad

V = 3  # vocabulary of the symbolic checks
z = sp.symbols(f"z0:{V}", real=True)
T = sp.Symbol("T", positive=True)


def _lse(values: list[sp.Expr]) -> sp.Expr:
    return sp.log(sp.Add(*(sp.exp(v) for v in values)))


def _tempered(w: list[int], m: int) -> list[Fraction]:
    """softmax(log(w) * m) exactly: the distribution at temperature 1/m."""
    powered = [Fraction(x) ** m for x in w]
    total = sum(powered, Fraction(0))
    return [x / total for x in powered]


@claim(
    "CO1",
    r"$\sum_j\pi_j^2 = \sum_j e^{2\log\pi_j} = e^{L(2y) - 2L(y)}$ and "
    r"$\partial\sum_j\pi_j^2/\partial z_j = \frac{2}{T}\pi_j(\pi_j - \sum_k\pi_k^2)$ for "
    r"$\pi = \mathrm{softmax}(z/T)$; `token_sum_pi_squared` and `token_sum_pi_squared_grad` "
    r"match the exact values at rational points.",
    method="symbolic",
    scope="3 tokens (symbolic logits and temperature); the library check on 30 random rational "
    "set-ups of 1 to 6 tokens",
)
def forms_and_gradient() -> None:
    y = [zi / T for zi in z]
    pi = [sp.exp(yi - _lse(y)) for yi in y]
    s = sp.Add(*(p**2 for p in pi))
    assert_zero(s - sp.Add(*(sp.exp(2 * (yi - _lse(y))) for yi in y)), label="CO1 log form")
    assert_zero(s - sp.exp(_lse([2 * yi for yi in y]) - 2 * _lse(y)), label="CO1 lse form")
    for j in range(V):
        expected = 2 / T * pi[j] * (pi[j] - s)
        assert_zero(sp.diff(s, z[j]) - expected, label=f"CO1 gradient z{j}")
    rng = random.Random(31)
    for _ in range(30):
        w = [rng.randint(1, 9) for _ in range(rng.randint(1, 6))]
        m = rng.choice([1, 2, 3])
        q = _tempered(w, m)
        exact_s = sum((p * p for p in q), Fraction(0))
        logits = np.log(np.asarray([[w]], dtype=np.float64))
        found = float(token_sum_pi_squared(logits, temperature=1.0 / m)[0, 0])
        assert_close(found, float(exact_s), rel=1e-13, label="CO1 value")
        grad = token_sum_pi_squared_grad(logits, temperature=1.0 / m)[0, 0]
        for j, p in enumerate(q):
            exact = 2 * m * p * (p - exact_s)
            assert_close(float(grad[j]), float(exact), rel=1e-12, abs_=1e-14, label="CO1 grad")


@claim(
    "CO2",
    r"$1/V \le \sum_j\pi_j^2 \le 1$, with $1/V$ exactly at equal logits; "
    r"`token_sum_pi_squared` stays in that range for logits up to $\pm 10^4$.",
    method="exact",
    scope="Cauchy–Schwarz (general); the library check on 200 random positions of 1 to 8 tokens "
    "with offsets up to 1e4",
)
def range_of_the_collision_probability() -> None:
    rng = np.random.default_rng(32)
    for _ in range(200):
        vocab = int(rng.integers(1, 9))
        logits = rng.normal(0.0, 30.0, (1, 1, vocab)) + rng.choice([0.0, 1e3, -1e4, 1e4])
        s = float(token_sum_pi_squared(logits)[0, 0])
        assert 1.0 / vocab * (1 - 1e-12) <= s <= 1.0, (logits, s)
        flat = np.full((1, 1, vocab), float(logits[0, 0, 0]))
        assert_close(float(token_sum_pi_squared(flat)[0, 0]), 1.0 / vocab, rel=1e-14, label="CO2")
