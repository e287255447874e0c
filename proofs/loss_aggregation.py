r"""# Loss aggregation: length dependence and partition invariance

Every aggregation of per-token losses $\ell_{bt}$ that the frameworks use is linear,
$J = \sum_{bt} w_{bt}\,\ell_{bt}$, so a mode *is* its weight matrix $w$, read off as
$w_{bt} = \partial J/\partial \ell_{bt}$. With $m_{bt}$ the 0/1 mask, $L_b = \sum_t m_{bt}$,
$N = \sum_b L_b$, $S$ the number of sequences counted and $H$ a declared constant:

| mode | $w_{bt}$ (valid token) | total weight of a row of length $L$ | per-token weight ratio, short row $L_1$ over long row $L_2$ |
|---|---|---|---|
| `token_sum` | $1$ | $L$ | $1$ |
| `token_mean` | $1/N$ | $L/N$ | $1$ |
| `seq_mean_token_mean` | $1/(S L_b)$ | $1/S$ | $L_2/L_1$ |
| `seq_mean_token_sum` | $1/S$ | $L/S$ | $1$ |
| `token_sum_norm` | $1/(S H)$ | $L/(S H)$ | $1$ |

**Length dependence (AG1, AG2).** Only `seq_mean_token_mean` gives every sequence the same total
weight $1/S$ whatever its length; a token of a sequence of length $L_1$ then weighs $L_2/L_1$ times
a token of a sequence of length $L_2$. With a negative advantage on a long wrong answer, each of its
tokens is pushed down $L_2/L_1$ times less than a short answer's tokens, the length bias that
Dr GRPO removes by dividing by a constant $H$ instead of $L_b$ (`token_sum_norm`, where every token
weighs $1/(SH)$). `token_mean` also weighs every token equally, but by $1/N$, which changes with
the batch.

**Gradients are weighted VJPs (AG4).** For a token-level surrogate $\ell_{bt} = f(x_{bt})$ of the
log-probability $x_{bt}$ (the policy gradient $-A\rho$, PPO's clip, CISPO…),
$\partial J/\partial x_{bt} = w_{bt} f'(x_{bt})$, elementwise. Hence two aggregations give the same
gradient for every such loss **iff** their weights are equal: if $w_{bt} \ne w'_{bt}$ at one token,
the surrogate $-A\rho$ with $A \ne 0$ has $f' = -A\rho \ne 0$ there. The accumulated gradient of
micro-batches is the gradient of the sum of their losses (linearity), so comparing a split's
*effective weights* with the full batch's is comparing the accumulated gradients.

**The classic error (AG3).** Split one step into $K$ micro-batches with $N_k$ valid tokens
($\sum_k N_k = N$), normalise each by its own count and average:
$J_{\text{local}} = \frac1K \sum_k \frac1{N_k}\sum_{t \in k}\ell_t$. A token of micro-batch $k$
gets $1/(K N_k)$ instead of $1/N$, and

$$
\frac{1}{K N_k} - \frac{1}{N} = \frac{N - K N_k}{K N_k N},
$$

which vanishes for every $k$ iff $N_k = N/K$ for all $k$: the local mean equals the global token
mean **iff every micro-batch holds the same number of valid tokens**. (A micro-batch without a
valid token makes that impossible unless $N = 0$: the other $K' < K$ would need
$K' N/K = N$.) With $R$ data-parallel ranks averaged by the all-reduce, $K$ becomes $KR$. A token
of a micro-batch with few tokens is over-weighted by $N/(K N_k)$.

**Sequence means with local counts (AG6).** A per-sequence mode normalised by the micro-batch's
own sequence count $S_k$ and averaged gives a sequence of micro-batch $k$ the weight
$\frac{1}{K S_k}$ (times its within-sequence factor) instead of $\frac1S$, a ratio $S/(K S_k)$:
invariant iff every micro-batch counts the same number of sequences, which a fixed micro-batch
size in rows guarantees when empty rows are counted (TRL's `grpo`), and not when empty rows are
excluded.

**The global forms (AG5).** Normalise each micro-batch by the step's global count, multiply by the
world size $R$, sum the micro-batches, and average the ranks (verl's `agg_loss` with
`global_batch_info`, OpenRLHF, SkyRL's pre-scaled advantages, TRL's `dapo`): a token gets
$\frac1R \cdot R \cdot w_{bt} = w_{bt}$, exactly the full-batch weight for every split. AReaL's
local token mean weighted by the micro-batch's token share and scaled by $R$ gets
$\frac1R \cdot R \cdot \frac{N_k}{N} \cdot \frac1{N_k} = \frac1N$: also invariant.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.aggregation import aggregation_weights, length_weight
from refimpl.losses.clipped import ppo_clip_loss
from refimpl.losses.partition import ScalingRule, partition_gap, split_weights

L1, L2, S, N, H, x, rest1, rest2 = sp.symbols("L1 L2 S N H x r1 r2", positive=True)
MODES5 = ("token_sum", "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "token_sum_norm")


def _symbolic_objectives() -> dict[str, sp.Expr]:
    """Each mode's J for two rows of lengths L1, L2 (plus S − 2 other rows' contribution), with x
    one token of row 1 and r1, r2 the sums of the other tokens' losses of rows 1 and 2."""
    row1, row2, others = x + rest1, rest2, sp.Symbol("o")
    return {
        "token_sum": row1 + row2 + others,
        "token_mean": (row1 + row2 + others) / N,
        "seq_mean_token_mean": (row1 / L1 + row2 / L2 + others) / S,
        "seq_mean_token_sum": (row1 + row2 + others) / S,
        "token_sum_norm": (row1 + row2 + others) / (S * H),
    }


@claim(
    "AG1",
    r"Length dependence: read as $w = \partial J/\partial\ell$, a row of length $L$ gets total "
    r"weight $L$, $L/N$, $1/S$, $L/S$, $L/(SH)$ under `token_sum`, `token_mean`, "
    r"`seq_mean_token_mean`, `seq_mean_token_sum`, `token_sum_norm`; the per-token weight of a row "
    r"of length $L_1$ over one of length $L_2$ is $L_2/L_1$ under `seq_mean_token_mean` and 1 "
    r"under the others. `refimpl.length_weight` and the row sums of `aggregation_weights` agree "
    r"on every batch of lengths up to 6.",
    method="symbolic",
    scope=GENERAL + "; the library check on every pair of lengths 1..6",
)
def length_dependence() -> None:
    totals = {
        "token_sum": L1,
        "token_mean": L1 / N,
        "seq_mean_token_mean": 1 / S,
        "seq_mean_token_sum": L1 / S,
        "token_sum_norm": L1 / (S * H),
    }
    per_token_ratio = {m: sp.Integer(1) for m in totals}
    per_token_ratio["seq_mean_token_mean"] = L2 / L1
    for mode, objective in _symbolic_objectives().items():
        w1 = sp.diff(objective, x)  # weight of one token of row 1 (every token of a row alike)
        w2 = sp.diff(objective, rest2)  # row 2 enters through the sum of its losses
        assert_zero(L1 * w1 - totals[mode], label=f"AG1 total weight, {mode}")
        assert_zero(w1 / w2 - per_token_ratio[mode], label=f"AG1 per-token ratio, {mode}")
    for a, b in itertools.product(range(1, 7), repeat=2):
        mask = np.zeros((2, 6))
        mask[0, :a] = 1
        mask[1, :b] = 1
        for mode in MODES5:
            extra = {"constant": 7.0} if mode == "token_sum_norm" else {}
            rows = aggregation_weights(mask, mode=mode, **extra).sum(axis=1)
            count = a + b if mode == "token_mean" else None
            total = length_weight([a, b], mode=mode, sequence_count=2, token_count=count, **extra)
            exact = {
                "token_sum": [Fraction(a), Fraction(b)],
                "token_mean": [Fraction(a, a + b), Fraction(b, a + b)],
                "seq_mean_token_mean": [Fraction(1, 2), Fraction(1, 2)],
                "seq_mean_token_sum": [Fraction(a, 2), Fraction(b, 2)],
                "token_sum_norm": [Fraction(a, 14), Fraction(b, 14)],
            }[mode]
            for i in range(2):
                assert_close(float(rows[i]), float(exact[i]), rel=1e-15, label="AG1 rows")
                assert_close(float(total[i]), float(exact[i]), rel=1e-15, label="AG1 length")


def _fraction_weights(mask: np.ndarray, mode: str, empty_rows: str) -> list[list[Fraction]]:
    lengths = [int(r.sum()) for r in mask]
    n = sum(lengths)
    s = sum(1 for v in lengths if v) if empty_rows == "excluded" else len(lengths)
    out = []
    for row, length in zip(mask, lengths, strict=True):
        if length == 0 or (mode == "token_mean" and n == 0):
            out.append([Fraction(0)] * len(row))
            continue
        per = {
            "token_sum": Fraction(1),
            "token_mean": Fraction(1, n),
            "seq_mean_token_mean": Fraction(1, s * length),
            "seq_mean_token_sum": Fraction(1, s),
            "token_sum_norm": Fraction(1, s * 5),
        }[mode]
        out.append([per * int(v) for v in row])
    return out


@claim(
    "AG2",
    r"`aggregation_weights` equals the definitions (computed in exact fractions) for every 0/1 "
    r"mask of shape (3, 3), every mode, both empty-row conventions; a batch without a valid "
    r"token gets weight 0, not $0/0$.",
    method="exact",
    scope="every 0/1 mask of shape (3, 3) (512 masks), 5 modes, both empty-row conventions",
)
def weights_match_the_definitions() -> None:
    for bits in itertools.product((0, 1), repeat=9):
        mask = np.array(bits, dtype=np.float64).reshape(3, 3)
        for mode in MODES5:
            extra = {"constant": 5.0} if mode == "token_sum_norm" else {}
            for empty in ("excluded", "counted"):
                w = aggregation_weights(mask, mode=mode, empty_rows=empty, **extra)
                exact = _fraction_weights(mask, mode, empty)
                for b, t in itertools.product(range(3), repeat=2):
                    assert_close(float(w[b, t]), float(exact[b][t]), rel=1e-15, label="AG2")


@claim(
    "AG3",
    r"A per-micro-batch token mean averaged over $K$ micro-batches (and $R$ ranks) gives a token of "
    r"micro-batch $k$ the weight $1/(KRN_k)$; it equals the global token mean for every loss iff "
    r"all micro-batches hold the same number of valid tokens $N_k = N/(KR)$. "
    r"`refimpl.partition_gap` reports invariance exactly then.",
    method="symbolic",
    scope=GENERAL + " (the system solved for K = 2, 3, 4); the library check on every split "
    "of token counts 0..4 into K = 2, 3 micro-batches and R = 1, 2 ranks",
)
def local_token_mean_needs_equal_counts() -> None:
    for k in (2, 3, 4):
        counts = sp.symbols(f"n0:{k}", positive=True)
        total = sp.Add(*counts)
        gaps = [1 / (k * c) - 1 / total for c in counts]
        for c, gap in zip(counts, gaps, strict=True):
            assert_zero(gap - (total - k * c) / (k * c * total), label="AG3 coefficient gap")
        solutions = sp.solve(gaps[:-1], counts[:-1], dict=True)
        assert len(solutions) == 1, solutions
        for c in counts[:-1]:
            assert_zero(solutions[0][c] - counts[-1], label="AG3 equal counts")
    for ranks, steps in ((1, 2), (1, 3), (2, 2)):
        slots = ranks * steps
        for counts_tuple in itertools.product(range(5), repeat=slots):
            if sum(counts_tuple) == 0:
                continue
            mask = np.zeros((slots, 4))
            for i, c in enumerate(counts_tuple):
                mask[i, :c] = 1
            splits = [[[r * steps + s] for s in range(steps)] for r in range(ranks)]
            gap = partition_gap(mask, splits=splits, mode="token_mean", rule="local_mean")
            equal = len(set(counts_tuple)) == 1
            assert gap.invariant == equal, (counts_tuple, gap.max_relative_difference)
            n = sum(counts_tuple)
            for i, c in enumerate(counts_tuple):
                if c:
                    expected = Fraction(n, slots * c)
                    assert_close(float(gap.sequence_ratio[i]), float(expected), label="AG3 ratio")


@claim(
    "AG4",
    r"For a token-level surrogate $\ell_{bt} = f(x_{bt})$, $\partial(\sum w\ell)/\partial x_{bt} = "
    r"w_{bt} f'(x_{bt})$; so equal effective weights $\Leftrightarrow$ equal accumulated gradients "
    r"for every surrogate, and `ppo_clip_loss(..., cotangent=w).grad` is $w \cdot (-A\rho)$ inside "
    r"the clip range.",
    method="symbolic",
    scope=GENERAL + " (symbolic 2 x 2 batch, any f); the library check on a 3 x 4 batch",
)
def weights_determine_the_gradient() -> None:
    f = sp.Function("f")
    xs = sp.symbols("x0:4", real=True)
    ws = sp.symbols("w0:4", real=True)
    objective = sp.Add(*(w * f(v) for w, v in zip(ws, xs, strict=True)))
    for w, v in zip(ws, xs, strict=True):
        assert_zero(sp.diff(objective, v) - w * sp.diff(f(v), v), label="AG4 elementwise")
    a, lp, lo = sp.symbols("A lp lo", real=True)
    surrogate = -a * sp.exp(lp - lo)
    derivative = sp.diff(surrogate, lp)
    assert_zero(derivative - surrogate, label="AG4 d(-A rho)/dlogp = -A rho")
    # converse: two weights that differ at a token give different gradients where f' != 0
    w_a, w_b = sp.symbols("wa wb", real=True)
    difference = (w_a - w_b) * derivative
    assert_zero(sp.simplify(difference / (-a * sp.exp(lp - lo))) - (w_a - w_b), label="AG4 iff")
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=np.float64)
    logp_old = np.log(np.array([[0.5, 0.25, 0.2, 0.1]] * 3))
    logp = logp_old + 0.05 * mask
    adv = np.array([1.0, -0.5, 2.0])
    for mode in MODES5:
        extra = {"constant": 4.0} if mode == "token_sum_norm" else {}
        w = aggregation_weights(mask, mode=mode, **extra)
        terms = ppo_clip_loss(logp, logp_old, adv, mask=mask, cotangent=w)
        expected = w * (-adv[:, None] * np.exp(logp - logp_old))
        for b, t in itertools.product(range(3), range(4)):
            assert_close(float(terms.grad[b, t]), float(expected[b, t]), rel=1e-14, label="AG4")


@claim(
    "AG5",
    r"Global forms are partition invariant: with the step's counts, the loss times $R$, "
    r"micro-batches summed and ranks averaged, a token gets $\frac1R R\, w_{bt} = w_{bt}$ for every "
    r"split (verl, OpenRLHF, SkyRL, TRL `dapo`); AReaL's token-share weighting of local token means "
    r"gives $\frac1R R \frac{N_k}{N}\frac1{N_k} = \frac1N$. `split_weights` returns the full-batch "
    r"weights for every split of a 4-row batch.",
    method="symbolic",
    scope=GENERAL + "; the library check on every assignment of 4 rows to 1 x 2, 2 x 1 and "
    "2 x 2 (rank x micro-batch) slots, 5 modes",
)
def global_forms_are_invariant() -> None:
    r, nk, w = sp.symbols("R N_k w", positive=True)
    assert_zero(1 / r * r * w - w, label="AG5 global")
    assert_zero(1 / r * r * (nk / N) * (1 / nk) - 1 / N, label="AG5 AReaL token share")
    mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=np.float64)
    for ranks, steps in ((1, 2), (2, 1), (2, 2)):
        for slots in itertools.product(range(ranks * steps), repeat=4):
            splits: list[list[list[int]]] = [[[] for _ in range(steps)] for _ in range(ranks)]
            for row, slot in enumerate(slots):
                splits[slot // steps][slot % steps].append(row)
            for mode in MODES5:
                extra = {"constant": 3.0} if mode == "token_sum_norm" else {}
                full = aggregation_weights(mask, mode=mode, **extra)
                for rule in ("verl", "openrlhf", "skyrl", "trl_dapo"):
                    eff = split_weights(mask, splits=splits, mode=mode, rule=rule, **extra)
                    np.testing.assert_allclose(eff, full, rtol=1e-15, atol=0.0)
            eff = split_weights(mask, splits=splits, mode="token_mean", rule="areal")
            full = aggregation_weights(mask, mode="token_mean")
            np.testing.assert_allclose(eff, full, rtol=1e-15, atol=0.0)


@claim(
    "AG6",
    r"A per-sequence mode with local sequence counts averaged over $K$ micro-batches and $R$ ranks "
    r"weights a sequence of micro-batch $k$ by $S/(KRS_k)$ times its full-batch weight: invariant "
    r"iff every micro-batch counts $S/(KR)$ sequences. `partition_gap` states these ratios.",
    method="exact",
    scope="every assignment of 5 rows (one empty) to 1 x 2 and 2 x 2 slots; both empty-row "
    "conventions; seq_mean_token_mean and seq_mean_token_sum",
)
def local_sequence_counts() -> None:
    mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=np.float64)
    lengths = mask.sum(axis=1)
    rule = ScalingRule("local", "mean", "mean", False)
    for ranks, steps in ((1, 2), (2, 2)):
        k = ranks * steps
        for slots in itertools.product(range(k), repeat=5):
            if len(set(slots)) < k:
                continue  # keep every micro-batch non-empty in rows
            splits: list[list[list[int]]] = [[[] for _ in range(steps)] for _ in range(ranks)]
            for row, slot in enumerate(slots):
                splits[slot // steps][slot % steps].append(row)
            for empty in ("excluded", "counted"):
                counted = [b for b in range(5) if lengths[b] > 0 or empty == "counted"]
                s = len(counted)
                per_slot = [sum(1 for b in counted if slots[b] == j) for j in range(k)]
                for mode in ("seq_mean_token_mean", "seq_mean_token_sum"):
                    gap = partition_gap(mask, splits=splits, mode=mode, rule=rule, empty_rows=empty)
                    for b in range(5):
                        if lengths[b] == 0:
                            continue
                        expected = Fraction(s, k * per_slot[slots[b]])
                        assert_close(
                            float(gap.sequence_ratio[b]), float(expected), label="AG6 ratio"
                        )
                    live = [c for c in per_slot if c]
                    assert gap.invariant == (len(set(per_slot)) == 1 and len(live) == k)
