"""``refimpl check --spec policy_loss``: a trainer's logged loss, recomputed step by step.

Good traces carry the loss the reference gives (refimpl.losses on the step's (B, T) arrays, not
through the spec's own regrouping), or, for ``--dtype float32``, the loss an independent torch
float32 implementation gives. Wrong traces carry a real bug: the padded width as the token-mean
denominator, the mean of micro-batch means logged as the step's loss, a KL term left out, the
padded width instead of Dr GRPO's constant. Malformed traces exit 2 with the row named.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from test_check_cli import where, write_trace

from refimpl.cli import main
from refimpl.losses.aggregation import aggregation_weights
from refimpl.losses.clipped import cispo_loss, ppo_clip_loss, sapo_loss
from refimpl.losses.kl import kl_penalty
from refimpl.losses.policy_gradient import importance_weighted_pg_loss
from refimpl.losses.sequence import gmpo_loss, gspo_loss, gspo_token_loss
from refimpl.testing._trace_losses import UnitChunk, policy_loss_units
from refimpl.testing._traces import Chunk
from refimpl.testing.check_cli import EXIT_MISMATCH, EXIT_OK, EXIT_UNUSABLE

FORMATS = ("csv", "jsonl", "parquet")
WIDTH = 8  # the trainer's padded width T
PPO = ["surrogate=ppo_clip", "aggregation=token_mean"]

Columns = dict[str, list[Any]]
Array = np.ndarray[Any, np.dtype[np.float64]]


@dataclass
class Step:
    """One loss computation: (B, T) arrays as the trainer holds them (padding included)."""

    logp: Array
    old: Array
    mask: Array
    adv: Array  # per sequence (B,), or per token (B, T)
    ref: Array

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])


def make_steps(seed: int = 0, n: int = 4, rows: tuple[int, int] = (3, 7)) -> list[Step]:
    """Steps of 3-6 sequences of 1..WIDTH tokens; padding holds arbitrary finite values."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = int(rng.integers(*rows))
        lengths = rng.integers(1, WIDTH + 1, b)
        lengths[0] = 2  # rows of different lengths: the denominators differ
        mask = (np.arange(WIDTH)[None, :] < lengths[:, None]).astype(np.float64)
        old = -rng.exponential(1.0, (b, WIDTH))
        logp = old + rng.normal(0.0, 0.4, (b, WIDTH))
        ref = old + rng.normal(0.0, 0.2, (b, WIDTH))
        out.append(Step(logp, old, mask, rng.normal(0.0, 1.0, b), ref))
    return out


def ppo_loss(s: Step, mode: str = "token_mean", **agg: Any) -> float:
    """The reference: refimpl.losses on the step's arrays (ppo_clip, eps 0.2)."""
    terms = ppo_clip_loss(s.logp, s.old, s.adv, mask=s.mask)
    return float((aggregation_weights(s.mask, mode=mode, **agg) * terms.loss).sum())


def padded_mean(s: Step) -> float:
    """The bug: the masked sum divided by the padded B*T instead of the valid tokens."""
    terms = ppo_clip_loss(s.logp, s.old, s.adv, mask=s.mask)
    return float((s.mask * terms.loss).sum() / s.mask.size)


def part(s: Step, rows: slice) -> Step:
    return Step(s.logp[rows], s.old[rows], s.mask[rows], s.adv[rows], s.ref[rows])


def columns(
    steps: list[Step],
    losses: list[float] | list[list[float]],
    *,
    mask: bool = True,
    micro: int | None = None,
    ref: bool = False,
) -> Columns:
    """One row per sequence. With ``micro``, each step is split into micro-batches of ``micro``
    rows and ``losses[k]`` lists each micro-batch's loss; without ``mask`` the lists hold the
    valid tokens only."""
    cols: Columns = {"step": [], "logp": [], "logp_old": [], "advantage": [], "loss": []}
    if mask:
        cols["mask"] = []
    if micro is not None:
        cols["micro_batch"] = []
    if ref:
        cols["logp_ref"] = []
    for k, s in enumerate(steps):
        for b in range(s.rows):
            n = WIDTH if mask else int(s.mask[b].sum())
            cols["step"].append(k)
            cols["logp"].append([float(x) for x in s.logp[b, :n]])
            cols["logp_old"].append([float(x) for x in s.old[b, :n]])
            a = s.adv[b]
            cols["advantage"].append(float(a) if a.ndim == 0 else [float(x) for x in a[:n]])
            if mask:
                cols["mask"].append([int(x) for x in s.mask[b]])
            if ref:
                cols["logp_ref"].append([float(x) for x in s.ref[b, :n]])
            if micro is not None:
                cols["micro_batch"].append(b // micro)
                cols["loss"].append(float(losses[k][b // micro]))  # type: ignore[index]
            else:
                cols["loss"].append(float(losses[k]))  # type: ignore[arg-type]
    return cols


def check(path: Path, *params: str, extra: tuple[str, ...] = ()) -> int:
    args = ["check", str(path), "--spec", "policy_loss", "--no-progress", *extra]
    for p in params:
        args += ["--param", p]
    return main(args)


def lines_of(steps: list[Step], k: int, fmt: str) -> str:
    """How the command names the rows of step ``k``."""
    first = sum(s.rows for s in steps[:k])
    a, b = where(fmt, first), where(fmt, first + steps[k].rows - 1)
    return f"{a.split()[0]}s {a.split()[1]}-{b.split()[1]}"


# ---------------------------------------------------------------------------------------------
# a correct trace passes; the wrong denominator fails and names the step
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_trace_logged_with_the_reference_loss_passes(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = make_steps()
    path = write_trace(tmp_path, fmt, columns(steps, [ppo_loss(s) for s in steps]))
    assert check(path, *PPO) == EXIT_OK
    assert "OK: all 4 logged losses agree with the reference." in capsys.readouterr().out


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_padded_width_as_denominator_fails_and_names_the_step(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = make_steps()
    losses = [ppo_loss(s) for s in steps]
    losses[2] = padded_mean(steps[2])
    path = write_trace(tmp_path, fmt, columns(steps, losses))
    assert check(path, *PPO) == EXIT_MISMATCH
    out = capsys.readouterr().out
    assert "MISMATCH: 1 of 4 logged losses" in out
    tokens, padded = int(steps[2].mask.sum()), steps[2].mask.size
    assert f"step 2 ({lines_of(steps, 2, fmt)}): step=2, sequences={steps[2].rows}, " in out
    assert f"tokens={tokens}, padded_tokens={padded}" in out


def test_lists_of_the_valid_tokens_only_imply_the_mask(tmp_path: Path) -> None:
    steps = make_steps()
    good = columns(steps, [ppo_loss(s) for s in steps], mask=False)
    assert check(write_trace(tmp_path, "jsonl", good), *PPO) == EXIT_OK
    bad = columns(steps, [padded_mean(s) for s in steps], mask=False)
    assert check(write_trace(tmp_path, "jsonl", bad, "bad"), *PPO) == EXIT_MISMATCH


@pytest.mark.parametrize("fmt", FORMATS)
def test_per_token_advantages_are_read_as_lists(fmt: str, tmp_path: Path) -> None:
    steps = make_steps()
    rng = np.random.default_rng(5)
    for s in steps:
        s.adv = rng.normal(0.0, 1.0, s.logp.shape)  # type: ignore[assignment]
    cols = columns(steps, [ppo_loss(s) for s in steps])
    assert check(write_trace(tmp_path, fmt, cols), *PPO) == EXIT_OK
    cols["loss"] = [x + 1e-3 for x in cols["loss"]]
    assert check(write_trace(tmp_path, fmt, cols, "bad"), *PPO) == EXIT_MISMATCH


# ---------------------------------------------------------------------------------------------
# steps split across chunks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_steps_split_across_chunks_give_the_same_verdict(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CSV blocks are >= 4 KiB, so the long trace's steps straddle block boundaries too."""
    steps = make_steps(n=40)
    losses = [ppo_loss(s) for s in steps]
    losses[17] = padded_mean(steps[17])
    losses[39] = padded_mean(steps[39])  # the last step, completed by the end of the trace
    path = write_trace(tmp_path, fmt, columns(steps, losses))
    shown = set()
    for rows in ("1", "2", "5", "1000000"):
        assert check(path, *PPO, extra=("--chunk-rows", rows)) == EXIT_MISMATCH
        shown.add(capsys.readouterr().out)
    assert len(shown) == 1
    out = shown.pop()
    assert "MISMATCH: 2 of 40 logged losses" in out
    assert f"step 17 ({lines_of(steps, 17, fmt)})" in out
    assert f"step 39 ({lines_of(steps, 39, fmt)})" in out
    good = write_trace(tmp_path, fmt, columns(steps, [ppo_loss(s) for s in steps]), "good")
    for rows in ("1", "3"):
        assert check(good, *PPO, extra=("--chunk-rows", rows)) == EXIT_OK


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_step_whose_rows_are_not_contiguous_is_unusable(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = make_steps(n=3)
    cols = columns(steps, [ppo_loss(s) for s in steps])
    last = len(cols["step"]) - 1
    for c in cols.values():  # the first row of step 0 moved to the end
        c.append(c.pop(0))
    path = write_trace(tmp_path, fmt, cols)
    assert check(path, *PPO, extra=("--chunk-rows", "2")) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"{where(fmt, last)}: step 0 appears again after other steps (its rows were at " in err
    assert "sort the trace by step" in err


# ---------------------------------------------------------------------------------------------
# micro-batches
# ---------------------------------------------------------------------------------------------


def test_micro_batch_losses_are_checked_under_their_declared_denominator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TRL's bnpo: each micro-batch's own token mean; verl 0.9.1's engine: each micro-batch's
    masked sum over the step's token count (the micro-batch losses sum to the step's)."""
    steps = make_steps(rows=(4, 7))
    local = [[ppo_loss(part(s, slice(i, i + 2))) for i in range(0, s.rows, 2)] for s in steps]
    step_wide = [
        [
            ppo_loss(part(s, slice(i, i + 2)), token_count=int(s.mask.sum()))
            for i in range(0, s.rows, 2)
        ]
        for s in steps
    ]
    assert np.allclose([sum(x) for x in step_wide], [ppo_loss(s) for s in steps])
    trl = write_trace(tmp_path, "jsonl", columns(steps, local, micro=2), "local")
    verl = write_trace(tmp_path, "jsonl", columns(steps, step_wide, micro=2), "step")
    assert check(trl, *PPO) == EXIT_OK
    assert check(trl, *PPO, "denominator=micro_batch") == EXIT_OK
    assert check(verl, *PPO, "denominator=step") == EXIT_OK
    capsys.readouterr()
    assert check(verl, *PPO) == EXIT_MISMATCH  # the step's counts, checked as local ones
    out = capsys.readouterr().out
    assert "step 0, micro_batch 0 (lines 1-2): step=0, micro_batch=0, sequences=2" in out
    assert check(trl, *PPO, "denominator=step", extra=("--chunk-rows", "1")) == EXIT_MISMATCH


def test_the_mean_of_micro_batch_means_logged_as_the_step_loss_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = make_steps(rows=(4, 7))
    averaged = [
        float(np.mean([ppo_loss(part(s, slice(i, i + 2))) for i in range(0, s.rows, 2)]))
        for s in steps
    ]
    path = write_trace(tmp_path, "csv", columns(steps, averaged))
    assert check(path, *PPO) == EXIT_MISMATCH
    out = capsys.readouterr().out
    assert "MISMATCH: 4 of 4 logged losses" in out
    assert f"step 0 ({lines_of(steps, 0, 'csv')})" in out


# ---------------------------------------------------------------------------------------------
# surrogates, aggregations, the KL term
# ---------------------------------------------------------------------------------------------


def test_other_surrogates_and_aggregations_pass_and_a_wrong_mode_fails(tmp_path: Path) -> None:
    steps = make_steps()
    cases: list[tuple[list[str], list[float]]] = []
    for s in steps:
        s.adv = np.abs(s.adv)  # GSPO's sequence-level ratio; any sign works, kept simple
    cispo = [
        float(
            (
                aggregation_weights(s.mask, mode="seq_mean_token_mean")
                * cispo_loss(s.logp, s.old, s.adv, eps_high=0.3, mask=s.mask).loss
            ).sum()
        )
        for s in steps
    ]
    cases.append((["surrogate=cispo", "aggregation=seq_mean_token_mean", "eps_high=0.3"], cispo))
    gspo = [
        float(
            (
                aggregation_weights(s.mask, mode="seq_mean_token_mean")
                * gspo_loss(s.logp, s.old, s.adv, eps_low=3e-4, eps_high=4e-4, mask=s.mask).loss
            ).sum()
        )
        for s in steps
    ]
    params = ["surrogate=gspo", "aggregation=seq_mean_token_mean", "eps_low=3e-4", "eps_high=4e-4"]
    cases.append((params, gspo))
    for k, (params, losses) in enumerate(cases):
        path = write_trace(tmp_path, "jsonl", columns(steps, losses), f"case{k}")
        assert check(path, *params) == EXIT_OK, params
        wrong = [p.replace("seq_mean_token_mean", "token_mean") for p in params]
        assert check(path, *wrong) == EXIT_MISMATCH, params


SURROGATE_CASES: dict[str, tuple[Callable[..., Any], dict[str, float]]] = {
    "ppo_clip": (ppo_clip_loss, {"eps_low": 0.2, "dual_clip": 3.0}),
    "cispo": (cispo_loss, {"eps_high": 0.3}),
    "sapo": (sapo_loss, {"tau_pos": 1.0, "tau_neg": 1.05}),
    "importance_pg": (importance_weighted_pg_loss, {"cap": 2.0}),
    "gspo": (gspo_loss, {"eps_low": 3e-4, "eps_high": 4e-4}),
    "gspo_token": (gspo_token_loss, {"eps_low": 3e-4}),
    "gmpo": (gmpo_loss, {"eps_low": 0.4}),
}


@pytest.mark.parametrize("surrogate", sorted(SURROGATE_CASES))
def test_every_surrogate_passes_its_own_loss_and_fails_a_small_bias(
    surrogate: str, tmp_path: Path
) -> None:
    fn, kw = SURROGATE_CASES[surrogate]
    steps = make_steps(seed=11)
    losses = [
        float(
            (
                aggregation_weights(s.mask, mode="seq_mean_token_mean")
                * fn(s.logp, s.old, s.adv, mask=s.mask, **kw).loss
            ).sum()
        )
        for s in steps
    ]
    params = [f"surrogate={surrogate}", "aggregation=seq_mean_token_mean"]
    params += [f"{k}={v!r}" for k, v in kw.items()]
    assert check(write_trace(tmp_path, "jsonl", columns(steps, losses)), *params) == EXIT_OK
    biased = [x + 1e-4 * (1 + abs(x)) for x in losses]
    bad = write_trace(tmp_path, "jsonl", columns(steps, biased), "bad")
    assert check(bad, *params) == EXIT_MISMATCH


def test_dr_grpo_divides_by_its_constant_not_by_the_padded_width(tmp_path: Path) -> None:
    steps = make_steps()
    params = [*PPO[:1], "aggregation=token_sum_norm", "constant=16"]
    good = [ppo_loss(s, "token_sum_norm", constant=16) for s in steps]
    assert check(write_trace(tmp_path, "csv", columns(steps, good)), *params) == EXIT_OK
    by_width = [ppo_loss(s, "token_sum_norm", constant=WIDTH) for s in steps]
    bad = write_trace(tmp_path, "csv", columns(steps, by_width), "bad")
    assert check(bad, *params) == EXIT_MISMATCH


def test_a_kl_term_is_checked_with_the_reference_log_probabilities(tmp_path: Path) -> None:
    steps = make_steps()
    beta = 0.05
    with_kl = []
    for s in steps:
        kl = kl_penalty(s.logp, s.ref, estimator="k3", mask=s.mask).loss
        w = aggregation_weights(s.mask, mode="token_mean")
        with_kl.append(ppo_loss(s) + beta * float((w * kl).sum()))
    params = [*PPO, f"kl_coef={beta}", "kl_estimator=k3"]
    good = write_trace(tmp_path, "parquet", columns(steps, with_kl, ref=True))
    assert check(good, *params) == EXIT_OK
    without = [ppo_loss(s) for s in steps]  # the KL term left out of the logged loss
    bad = write_trace(tmp_path, "parquet", columns(steps, without, ref=True), "bad")
    assert check(bad, *params) == EXIT_MISMATCH


# ---------------------------------------------------------------------------------------------
# the tolerance derived from the trainer's dtype
# ---------------------------------------------------------------------------------------------


def torch_ppo_token_mean_float32(s: Step) -> tuple[float, Step]:
    """An independent float32 implementation (torch), and the float32 inputs it saw."""
    import torch

    f32 = Step(*(np.asarray(a, dtype=np.float32).astype(np.float64) for a in (
        s.logp, s.old, s.mask, s.adv, s.ref)))  # fmt: skip
    lp, old, m = (torch.tensor(a, dtype=torch.float32) for a in (f32.logp, f32.old, f32.mask))
    adv = torch.tensor(f32.adv, dtype=torch.float32)[:, None]
    ratio = torch.exp(lp - old)
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
    return float((per_token * m).sum() / m.sum()), f32


def test_a_float32_loss_passes_with_dtype_float32_and_a_small_bias_does_not(
    tmp_path: Path,
) -> None:
    pairs = [torch_ppo_token_mean_float32(s) for s in make_steps(n=6, rows=(30, 40))]
    steps, losses = [s for _, s in pairs], [x for x, _ in pairs]
    good = write_trace(tmp_path, "jsonl", columns(steps, losses))
    assert check(good, *PPO, extra=("--dtype", "float32")) == EXIT_OK
    biased = [x * (1 + 1e-3) for x in losses]
    bad = write_trace(tmp_path, "jsonl", columns(steps, biased), "bad")
    assert check(bad, *PPO, extra=("--dtype", "float32")) == EXIT_MISMATCH


def test_the_report_names_the_step_and_hides_the_reference_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = make_steps()
    losses = [ppo_loss(s) for s in steps]
    losses[1] = padded_mean(steps[1])
    path = write_trace(tmp_path, "jsonl", columns(steps, losses))
    report = tmp_path / "report.json"
    assert check(path, *PPO, extra=("--report", str(report))) == EXIT_MISMATCH
    data = json.loads(report.read_text())
    assert data["status"] == "mismatch"
    assert data["rows"] == 4
    assert data["mismatches"] == 1
    (row,) = data["first_mismatches"]
    assert row["where"] == f"step 1 ({lines_of(steps, 1, 'jsonl')})"
    assert row["line"] == steps[0].rows + 1
    assert set(row["inputs"]) == {"step", "sequences", "tokens", "padded_tokens", "token_sum"}
    assert row["expected"] == pytest.approx(ppo_loss(steps[1]), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# malformed traces and parameters: exit 2 with the row and the fix
# ---------------------------------------------------------------------------------------------


def _good(n: int = 2) -> tuple[list[Step], Columns]:
    steps = make_steps(n=n)
    return steps, columns(steps, [ppo_loss(s) for s in steps])


@pytest.mark.parametrize("fmt", FORMATS)
def test_token_lists_of_unequal_length_are_unusable(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cols = _good()
    cols["logp_old"][3] = cols["logp_old"][3][:-1]
    assert check(write_trace(tmp_path, fmt, cols), *PPO) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"{where(fmt, 3)}: the token lists differ in length (logp 8, logp_old 7, mask 8 " in err


def test_a_per_token_advantage_of_the_wrong_length_is_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cols = _good()
    cols["advantage"] = [[a, a] for a in cols["advantage"]]
    assert check(write_trace(tmp_path, "jsonl", cols), *PPO) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert (
        "line 1: the token lists differ in length (logp 8, logp_old 8, mask 8, advantage 2" in err
    )
    assert "an advantage per sequence is one number" in err


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_mask_that_is_not_0_or_1_is_unusable(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cols = _good()
    cols["mask"] = [[float(x) for x in m] for m in cols["mask"]]
    cols["mask"][2][1] = 0.5
    assert check(write_trace(tmp_path, fmt, cols), *PPO) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"{where(fmt, 2)}: mask holds 0.5 at token 1, not 0 or 1." in err


def test_padding_may_hold_anything_but_a_counted_token_must_be_finite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _steps, cols = _good()
    row = 0  # its length is 2: tokens 2.. are padding
    cols["logp"][row][5] = float("nan")
    assert check(write_trace(tmp_path, "jsonl", cols), *PPO) == EXIT_OK
    cols["logp"][row][1] = float("nan")
    assert check(write_trace(tmp_path, "jsonl", cols, "bad"), *PPO) == EXIT_UNUSABLE
    assert "line 1: logp holds nan at token 1, which the loss counts" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean"])
def test_a_step_with_no_valid_token_is_unusable_under_a_mean(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps, cols = _good()
    first = steps[0].rows
    for b in range(first, first + steps[1].rows):
        cols["mask"][b] = [0] * WIDTH
    path = write_trace(tmp_path, "csv", cols)
    assert check(path, "surrogate=ppo_clip", f"aggregation={mode}") == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"step 1 ({lines_of(steps, 1, 'csv')}): step 1 has no valid token" in err
    assert f"aggregation={mode} is 0/0" in err


def test_a_loss_that_differs_within_a_step_is_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cols = _good()
    cols["loss"][1] += 0.25
    assert check(write_trace(tmp_path, "jsonl", cols), *PPO) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert "line 2: loss is" in err
    assert "but line 1 of the same step 0 logged" in err
    assert "add a micro_batch column" in err


def test_a_step_that_is_not_a_whole_number_is_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cols = _good()
    cols["step"] = [float(s) + 0.5 * (i == 4) for i, s in enumerate(cols["step"])]
    assert check(write_trace(tmp_path, "jsonl", cols), *PPO) == EXIT_UNUSABLE
    assert "line 5: step is 0.5, not a whole number" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            ["surrogate=ppo", "aggregation=token_mean"],
            "--param surrogate must be one of ppo_clip, cispo, sapo, importance_pg, gspo, ",
        ),
        (
            ["surrogate=ppo_clip", "aggregation=mean"],
            "--param aggregation must be one of token_mean, seq_mean_token_mean,",
        ),
        (
            ["surrogate=cispo", "aggregation=token_mean"],
            "surrogate=cispo needs --param eps_high (refimpl.losses.cispo_loss has no default",
        ),
        (
            [*PPO, "tau_pos=1"],
            "--param tau_pos must be a parameter of surrogate=ppo_clip (refimpl.losses."
            "ppo_clip_loss takes eps_low, eps_high, dual_clip, log_ratio_clamp)",
        ),
        ([*PPO, "eps_low=-0.1"], "eps_low"),
        (["surrogate=ppo_clip", "aggregation=token_sum_norm"], "constant must be given"),
        ([*PPO, "constant=16"], "constant must be None unless mode='token_sum_norm'"),
        ([*PPO, "kl_coef=0.1"], "--param kl_coef needs --param kl_estimator"),
        ([*PPO, "kl_estimator=k3"], "needs --param kl_coef"),
        ([*PPO, "kl_coef=0.1", "kl_estimator=k9"], "estimator must be one of"),
        ([*PPO, "denominator=global"], "--param denominator must be one of micro_batch, step"),
        (["surrogate=ppo_clip"], "needs parameter(s) aggregation"),
    ],
)
def test_bad_parameters_are_unusable_with_the_fix(
    params: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cols = _good()
    assert check(write_trace(tmp_path, "jsonl", cols), *params) == EXIT_UNUSABLE
    assert message in capsys.readouterr().err


def test_parameters_that_need_a_column_the_trace_lacks_are_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cols = _good()
    path = write_trace(tmp_path, "jsonl", cols)
    assert check(path, *PPO, "kl_coef=0.1", "kl_estimator=k3") == EXIT_UNUSABLE
    assert "needs the reference policy's log-probabilities" in capsys.readouterr().err
    assert check(path, *PPO, "denominator=step") == EXIT_UNUSABLE
    assert "applies to a trace with a 'micro_batch' column" in capsys.readouterr().err


def test_framework_column_names_are_mapped(tmp_path: Path) -> None:
    steps = make_steps()
    cols = columns(steps, [ppo_loss(s) for s in steps])
    names = {"logp": "log_prob", "logp_old": "old_log_probs", "mask": "response_mask",
             "advantage": "advantages", "loss": "actor/pg_loss", "step": "global_step"}  # fmt: skip
    renamed = {names.get(k, k): v for k, v in cols.items()}
    path = write_trace(tmp_path, "parquet", renamed)
    mapping = [a for k, v in names.items() for a in ("--column", f"{k}={v}")]
    assert check(path, *PPO, extra=tuple(mapping)) == EXIT_OK


# ---------------------------------------------------------------------------------------------
# the how-to page's worked example, and the command in a real process
# ---------------------------------------------------------------------------------------------

PAGE = Path(__file__).resolve().parent.parent / "docs" / "howto" / "gate-ci-on-traces.md"


def _page_logger() -> str:
    text = PAGE.read_text()
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if block.startswith("# mytrainer/loss_log.py\n"):
            return str(block)
    raise AssertionError("no mytrainer/loss_log.py block on the page")


def _log_page_run(source: str, path: Path) -> None:
    """The run the page describes: three steps of 8 sequences padded to 32 tokens."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "mytrainer/loss_log.py", "exec"), namespace)
    rng = np.random.default_rng(0)
    for step in range(3):
        lengths = rng.integers(4, 33, 8)
        mask = (np.arange(32)[None, :] < lengths[:, None]).astype(float)
        logp_old = -rng.exponential(1.0, (8, 32))
        logp = logp_old + rng.normal(0.0, 0.3, (8, 32))
        adv = rng.normal(0.0, 1.0, 8)
        loss = namespace["ppo_token_mean"](logp, logp_old, adv, mask)
        namespace["log_step"](str(path), step, logp, logp_old, adv, mask, loss)


def test_the_howto_example_prints_what_the_page_shows_and_its_fix_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    source = _page_logger()
    _log_page_run(source, tmp_path / "steps.jsonl")
    assert check(Path("steps.jsonl"), *PPO) == EXIT_MISMATCH
    page = PAGE.read_text()
    for line in capsys.readouterr().out.splitlines():
        assert line in page, line
    fixed = source.replace("/ mask.size", "/ mask.sum()")
    assert fixed != source
    _log_page_run(fixed, tmp_path / "fixed.jsonl")
    assert check(Path("fixed.jsonl"), *PPO) == EXIT_OK
    out = capsys.readouterr().out
    assert "OK: all 3 logged losses agree with the reference." in out
    assert "OK: all 3 logged losses agree with the reference." in page


def test_the_spec_runs_in_a_fresh_process(tmp_path: Path) -> None:
    """Nothing imported by the test process may be what makes the reference available."""
    steps = make_steps()
    path = write_trace(tmp_path, "csv", columns(steps, [ppo_loss(s) for s in steps]))
    command = [sys.executable, "-m", "refimpl", "check", str(path), "--spec", "policy_loss"]
    command += ["--param", "surrogate=ppo_clip", "--param", "aggregation=token_mean"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == EXIT_OK, done.stderr
    assert "OK: all 4 logged losses agree" in done.stdout


# ---------------------------------------------------------------------------------------------
# the regrouping itself: any chunking of the rows gives the same steps and values
# ---------------------------------------------------------------------------------------------

GROUPED = make_steps(seed=3, n=5)
GROUPED_COLUMNS = columns(GROUPED, [ppo_loss(s) for s in GROUPED])
GROUPED_ROWS = len(GROUPED_COLUMNS["step"])
GROUPED_PLACES = [f"step {k} ({lines_of(GROUPED, k, 'jsonl')})" for k in range(len(GROUPED))]
PPO_PARAMS = {"surrogate": "ppo_clip", "aggregation": "token_mean"}

Regroup = Callable[[list[Chunk]], list[Chunk]]


def chunked(cuts: list[int]) -> list[Chunk]:
    """The rows of GROUPED_COLUMNS as read in chunks that end at ``cuts`` (JSONL lines)."""
    out = []
    for a, b in itertools.pairwise([0, *cuts, GROUPED_ROWS]):
        cols: dict[str, Any] = {
            k: (
                [np.asarray(x, dtype=np.float64) for x in v[a:b]]
                if k in ("logp", "logp_old", "mask")
                else np.asarray(v[a:b], dtype=np.float64)
            )
            for k, v in GROUPED_COLUMNS.items()
        }
        out.append(Chunk(cols, a, np.arange(a, b, dtype=np.int64) + 1))
    return out


def regrouped(chunks: list[Chunk]) -> list[Chunk]:
    return list(policy_loss_units(iter(chunks), None, PPO_PARAMS))


def each_chunk_alone(chunks: list[Chunk]) -> list[Chunk]:
    """Wrong: each chunk regrouped on its own, so a step cut by a boundary becomes two."""
    return [u for c in chunks for u in policy_loss_units(iter([c]), None, PPO_PARAMS)]


def regrouping_is_invariant_to_chunking(regroup: Regroup) -> Callable[[], None]:
    @given(st.lists(st.integers(1, GROUPED_ROWS - 1), unique=True).map(sorted))
    def prop(cuts: list[int]) -> None:
        units = regroup(chunked(cuts))
        places = [p for u in units if isinstance(u, UnitChunk) for p in u.places]
        assert places == GROUPED_PLACES
        values = np.concatenate([u.columns["_expected"] for u in units])
        want = [ppo_loss(s) for s in GROUPED]
        np.testing.assert_allclose(values, want, rtol=1e-12, atol=0)

    return prop


def test_any_chunking_of_the_rows_gives_the_same_steps_and_values() -> None:
    run_property(regrouping_is_invariant_to_chunking(regrouped))


def test_the_chunking_property_rejects_steps_cut_at_chunk_boundaries() -> None:
    rejects(regrouping_is_invariant_to_chunking(each_chunk_alone))
