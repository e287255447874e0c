"""The conformance specs of aggregation and the outcome advantages.

Correct torch float32 candidates written here in the frameworks' style pass every check;
refimpl's own functions pass in numpy float64; each planted bug fails the check that targets it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import refimpl.losses.advantages as adv
import refimpl.losses.rejection as rj
from refimpl.losses.aggregation import aggregate_loss, aggregation_weights
from refimpl.testing import check_conformance, spec_names

EXAMPLES = 30
STATS = (
    "aggregation",
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_pp_advantages",
    "sequence_divergence",
    "any_token_veto",
    "is_batch_normalize",
    "off_policy_sequence_mask",
    "m2po_mask",
)

# ---------------------------------------------------------------------------------------------
# candidates in the frameworks' style (torch float32)
# ---------------------------------------------------------------------------------------------


def token_mean(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl agg_loss 'token-mean' with a guarded denominator."""
    return torch.where(mask > 0, loss, 0.0).sum() / mask.sum().clamp(min=1.0)


def seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl 'seq-mean-token-mean': empty rows excluded (seq_mask)."""
    per_row = torch.where(mask > 0, loss, 0.0).sum(-1) / mask.sum(-1).clamp(min=1.0)
    nonempty = (mask.sum(-1) > 0).to(loss.dtype)
    return (per_row * nonempty).sum() / nonempty.sum().clamp(min=1.0)


def seq_mean_counting_empty_rows(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """TRL 'grpo': mean over every row."""
    per_row = torch.where(mask > 0, loss, 0.0).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_row.mean()


def token_sum_norm(loss: torch.Tensor, mask: torch.Tensor, *, constant: float) -> torch.Tensor:
    """verl 'seq-mean-token-sum-norm' with loss_scale_factor = constant."""
    per_row = torch.where(mask > 0, loss, 0.0).sum(-1)
    nonempty = (mask.sum(-1) > 0).to(loss.dtype)
    return (per_row * nonempty).sum() / (nonempty.sum().clamp(min=1.0) * constant)


def grpo(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    """verl compute_grpo_outcome_advantage's arithmetic (sample std, ε added to it)."""
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        if r.numel() > 1:
            out[idx] = (r - r.mean()) / (r.std() + 1e-6)
    return out


def trl_batch_scaled(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    """TRL 1.16.0 with scale_rewards='batch': contiguous fixed-size groups, the batch's std."""
    size = int((group == group[0]).sum())
    mean = rewards.view(-1, size).mean(dim=1).repeat_interleave(size)
    return (rewards - mean) / (rewards.std() + 1e-4)


def rloo(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        n = r.numel()
        if n > 1:
            out[idx] = r - (r.sum() - r) / (n - 1)
    return out


def reinforce_pp(rewards: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """verl masked_whiten over tokens: sample variance, √(s² + 1e-8)."""
    w = mask.sum(-1)
    m = (w * rewards).sum() / w.sum()
    var = (w * (rewards - m) ** 2).sum() / (w.sum() - 1)
    return (rewards - m) / torch.sqrt(var + 1e-8)


def seq_sum_k1(lt: torch.Tensor, lb: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """verl seq_sum_k1 without its ±20 clamp."""
    return (-(lt - lb) * mask).sum(-1)


def seq_mean_k3(lt: torch.Tensor, lb: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """verl seq_mean_k3 with its ±20 clamp."""
    d = (lt - lb).clamp(-20.0, 20.0)
    k3 = torch.exp(d) - 1.0 - d
    return (k3 * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def veto(
    lt: torch.Tensor, lb: torch.Tensor, *, threshold: float, mask: torch.Tensor
) -> torch.Tensor:
    bad = ((lt - lb) < math.log(threshold)) & (mask > 0)
    return (~bad.any(-1)).to(lt.dtype)


def batch_normalize(w: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """verl rollout_is_batch_normalize, token level."""
    return torch.where(mask > 0, w, 0.0) / ((w * mask).sum() / mask.sum())


def opsm(
    lt: torch.Tensor, lb: torch.Tensor, a: torch.Tensor, *, delta: float, mask: torch.Tensor
) -> torch.Tensor:
    """TRL get_off_policy_mask."""
    kl = ((lb - lt) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return ((a >= 0) | (kl <= delta)).to(lt.dtype)


def _m2po(
    lt: torch.Tensor, lb: torch.Tensor, tau: float, mask: torch.Tensor, descending: bool
) -> torch.Tensor:
    """AReaL _get_m2po_loss_mask's selection (descending=False: the planted bug)."""
    v = ((lt - lb) ** 2)[mask > 0]
    keep = torch.zeros(mask.numel(), dtype=lt.dtype)
    n = v.numel()
    if n:
        s, order = torch.sort(v, descending=descending)
        k = n - 1
        for j in range(n):
            if s[j:].mean() < tau:
                k = j
                break
        kept = torch.ones(n, dtype=lt.dtype)
        kept[order[:k]] = 0.0
        keep[(mask > 0).flatten()] = kept
    return keep.reshape(mask.shape)


def m2po(lt: torch.Tensor, lb: torch.Tensor, *, tau: float, mask: torch.Tensor) -> torch.Tensor:
    return _m2po(lt, lb, tau, mask, descending=True)


CORRECT: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    ("aggregation", token_mean, {}),
    ("aggregation", seq_mean_token_mean, {"mode": "seq_mean_token_mean"}),
    (
        "aggregation",
        seq_mean_counting_empty_rows,
        {"mode": "seq_mean_token_mean", "empty_rows": "counted"},
    ),
    ("aggregation", token_sum_norm, {"mode": "token_sum_norm"}),
    ("grpo_advantages", grpo, {}),
    (
        "grpo_advantages",
        trl_batch_scaled,
        {"eps": 1e-4, "std_scope": "batch", "groups": "contiguous"},
    ),
    ("rloo_advantages", rloo, {}),
    ("reinforce_pp_advantages", reinforce_pp, {}),
    ("sequence_divergence", seq_sum_k1, {}),
    (
        "sequence_divergence",
        seq_mean_k3,
        {"estimator": "k3", "reduce": "mean", "log_ratio_clamp": 20.0},
    ),
    ("any_token_veto", veto, {}),
    ("is_batch_normalize", batch_normalize, {}),
    ("off_policy_sequence_mask", opsm, {}),
    ("m2po_mask", m2po, {}),
]


@pytest.mark.parametrize(("spec", "candidate", "conventions"), CORRECT)
def test_a_correct_torch_float32_candidate_passes_every_check(
    spec: str, candidate: Callable[..., Any], conventions: dict[str, Any]
) -> None:
    report = check_conformance(
        candidate,
        spec=spec,
        xp="torch",
        dtype="float32",
        conventions=conventions,
        max_examples=EXAMPLES,
    )
    report.raise_if_failed()
    ran = [r.status for r in report.results if r.status != "skipped"]
    assert ran == ["passed"] * len(ran)
    assert len(ran) >= 3


# ---------------------------------------------------------------------------------------------
# refimpl's own functions (numpy float64)
# ---------------------------------------------------------------------------------------------


def _aggregate_with_weights(loss: Any, mask: Any, **kwargs: Any) -> tuple[float, Any]:
    return aggregate_loss(loss, mask, **kwargs), aggregation_weights(mask, **kwargs)


OWN: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    *(
        (
            "aggregation",
            functools.partial(_aggregate_with_weights, mode=mode),
            {"mode": mode, "gradient": "returned"},
        )
        for mode in ("token_mean", "seq_mean_token_mean", "token_sum_norm", "group_mean")
    ),
    (
        "aggregation",
        functools.partial(aggregate_loss, mode="seq_mean_token_sum", empty_rows="counted"),
        {"mode": "seq_mean_token_sum", "empty_rows": "counted", "gradient": "none"},
    ),
    ("grpo_advantages", adv.grpo_advantages, {}),
    (
        "grpo_advantages",
        functools.partial(adv.grpo_advantages, eps=1e-4, std_scope="batch"),
        {"eps": 1e-4, "std_scope": "batch"},
    ),
    (
        "rloo_advantages",
        functools.partial(adv.rloo_advantages, singleton="raw"),
        {"singleton": "raw"},
    ),
    ("reinforce_pp_advantages", adv.reinforce_pp_advantages, {}),
    (
        "reinforce_pp_advantages",
        functools.partial(
            adv.reinforce_pp_advantages, std="population", eps_placement="floor", singleton="raw"
        ),
        {"std": "population", "eps_placement": "floor", "baseline": "group", "singleton": "raw"},
    ),
    ("sequence_divergence", rj.sequence_divergence, {}),
    (
        "sequence_divergence",
        functools.partial(rj.sequence_divergence, estimator="k2", reduce="max"),
        {"estimator": "k2", "reduce": "max"},
    ),
    ("any_token_veto", rj.any_token_veto, {"upper": "given"}),
    ("any_token_veto", rj.any_token_veto, {"upper": "only"}),
    (
        "is_batch_normalize",
        functools.partial(rj.is_batch_normalize, level="sequence"),
        {"level": "sequence"},
    ),
    ("off_policy_sequence_mask", rj.off_policy_sequence_mask, {}),
    ("m2po_mask", functools.partial(rj.m2po_mask, strict=False), {"strict": False}),
]


@pytest.mark.parametrize(("spec", "candidate", "conventions"), OWN)
def test_refimpls_own_functions_pass(
    spec: str, candidate: Callable[..., Any], conventions: dict[str, Any]
) -> None:
    report = check_conformance(candidate, spec=spec, conventions=conventions, max_examples=EXAMPLES)
    report.raise_if_failed()


def test_the_stats_specs_are_in_the_losses_group_only() -> None:
    assert set(STATS) <= set(spec_names(losses=True))
    assert not set(STATS) & set(spec_names())


# ---------------------------------------------------------------------------------------------
# planted bugs
# ---------------------------------------------------------------------------------------------


def grpo_population_std(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        if r.numel() > 1:
            out[idx] = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
    return out


def grpo_eps_inside_sqrt(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        if r.numel() > 1:
            out[idx] = (r - r.mean()) / torch.sqrt(r.var() + 1e-6)
    return out


def grpo_batch_mean(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        if r.numel() > 1:
            out[idx] = (r - rewards.mean()) / (r.std() + 1e-6)
    return out


def grpo_without_eps(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    """ε = 0 and a plain division: a constant group is 0/0 = NaN (refimpl: 0)."""
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        if r.numel() > 1:
            out[idx] = (r - r.mean()) / r.std()
    return out


def grpo_raw_singletons(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    """verl's singleton rule (mean 0, std 1) where singleton='zero' is declared."""
    out = grpo(rewards, group=group)
    for label in torch.unique(group):
        idx = group == label
        if int(idx.sum()) == 1:
            out[idx] = rewards[idx]
    return out


def grpo_uncentred(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        if r.numel() > 1:
            out[idx] = r / (r.std() + 1e-6)
    return out


def rloo_including_the_sample(rewards: torch.Tensor, *, group: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(rewards)
    for label in torch.unique(group):
        idx = group == label
        r = rewards[idx]
        if r.numel() > 1:
            out[idx] = r - r.mean()
    return out


def token_sum_norm_padded_width(
    loss: torch.Tensor, mask: torch.Tensor, *, constant: float
) -> torch.Tensor:
    """verl's fallback without loss_scale_factor: the padded width."""
    return token_sum_norm(loss, mask, constant=float(loss.shape[-1]))


def seq_mean_by_every_row(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return seq_mean_counting_empty_rows(loss, mask)


def token_mean_0_over_0(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask > 0, loss, 0.0).sum() / mask.sum()


def token_mean_unmasked_sum(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return loss.sum() / mask.sum().clamp(min=1.0)


def veto_by_the_mean(
    lt: torch.Tensor, lb: torch.Tensor, *, threshold: float, mask: torch.Tensor
) -> torch.Tensor:
    mean = ((lt - lb) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return (mean >= math.log(threshold)).to(lt.dtype)


def divergence_unmasked(lt: torch.Tensor, lb: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    return (-(lt - lb)).sum(-1)


def divergence_mean_for_sum(
    lt: torch.Tensor, lb: torch.Tensor, *, mask: torch.Tensor
) -> torch.Tensor:
    return seq_sum_k1(lt, lb, mask=mask) / mask.sum(-1).clamp(min=1.0)


def veto_drops_empty_rows(
    lt: torch.Tensor, lb: torch.Tensor, *, threshold: float, mask: torch.Tensor
) -> torch.Tensor:
    return veto(lt, lb, threshold=threshold, mask=mask) * (mask.sum(-1) > 0).to(lt.dtype)


def veto_with_a_floor_of_one(
    lt: torch.Tensor, lb: torch.Tensor, *, threshold: float | None, mask: torch.Tensor, upper: float
) -> torch.Tensor:
    """Wrong under upper='only': the missing floor read as 1 (ρ < 1 vetoes)."""
    d = lt - lb
    bad = ((d < 0.0) | (d > math.log(upper))) & (mask > 0)
    return (~bad.any(-1)).to(lt.dtype)


def opsm_strictly_positive(
    lt: torch.Tensor, lb: torch.Tensor, a: torch.Tensor, *, delta: float, mask: torch.Tensor
) -> torch.Tensor:
    kl = ((lb - lt) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return ((a > 0) | (kl <= delta)).to(lt.dtype)


def m2po_always_drops_one(
    lt: torch.Tensor, lb: torch.Tensor, *, tau: float, mask: torch.Tensor
) -> torch.Tensor:
    keep = m2po(lt, lb, tau=tau, mask=mask)
    if bool((keep == 0).logical_and(mask > 0).any()) or not bool((mask > 0).any()):
        return keep
    v = torch.where(keep > 0, (lt - lb) ** 2, -1.0).flatten()
    keep = keep.flatten().clone()
    keep[int(torch.argmax(v))] = 0.0
    return keep.reshape(mask.shape)


def m2po_smallest_first(
    lt: torch.Tensor, lb: torch.Tensor, *, tau: float, mask: torch.Tensor
) -> torch.Tensor:
    return _m2po(lt, lb, tau, mask, descending=False)


def normalize_by_padded_count(w: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask > 0, w, 0.0) / ((w * mask).sum() / mask.numel())


PLANTED: list[tuple[str, Callable[..., Any], dict[str, Any], str]] = [
    ("grpo_advantages", grpo_population_std, {}, "unit_std"),
    ("grpo_advantages", grpo_eps_inside_sqrt, {}, "values"),
    ("grpo_advantages", grpo_batch_mean, {}, "zero_group_mean"),
    ("rloo_advantages", rloo_including_the_sample, {}, "values"),
    ("grpo_advantages", grpo_without_eps, {"eps": 0.0}, "constant_group_is_zero"),
    ("grpo_advantages", grpo_raw_singletons, {}, "singleton_groups"),
    ("grpo_advantages", grpo_uncentred, {}, "shift_invariance"),
    (
        "aggregation",
        token_sum_norm_padded_width,
        {"mode": "token_sum_norm"},
        "token_sum_norm_uses_the_constant",
    ),
    ("aggregation", seq_mean_by_every_row, {"mode": "seq_mean_token_mean"}, "empty_rows"),
    ("aggregation", token_mean_0_over_0, {}, "no_valid_token_gives_zero"),
    ("any_token_veto", veto_by_the_mean, {}, "any_token_vetoes"),
    ("any_token_veto", veto_drops_empty_rows, {}, "empty_rows"),
    ("any_token_veto", veto_with_a_floor_of_one, {"upper": "only"}, "any_token_vetoes"),
    ("any_token_veto", veto_with_a_floor_of_one, {"upper": "only"}, "values"),
    ("sequence_divergence", divergence_unmasked, {}, "padding_ignored"),
    ("sequence_divergence", divergence_mean_for_sum, {}, "length_scaling"),
    ("off_policy_sequence_mask", opsm_strictly_positive, {}, "keeps_non_negative_advantages"),
    ("m2po_mask", m2po_always_drops_one, {}, "on_policy_is_kept"),
    ("m2po_mask", m2po_smallest_first, {}, "drops_the_fewest_largest_first"),
    ("is_batch_normalize", normalize_by_padded_count, {}, "valid_mean_is_one"),
    ("aggregation", token_mean_unmasked_sum, {}, "padding_contributes_nothing"),
]


@pytest.mark.parametrize(("spec", "candidate", "conventions", "check"), PLANTED)
def test_a_planted_bug_fails_the_check_that_targets_it(
    spec: str, candidate: Callable[..., Any], conventions: dict[str, Any], check: str
) -> None:
    report = check_conformance(
        candidate,
        spec=spec,
        xp="torch",
        dtype="float32",
        conventions=conventions,
        checks=[check],
        max_examples=EXAMPLES,
    )
    assert report[check].status == "failed", report.summary()


def test_the_how_to_pages_statistics_example_passes_as_shown() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "howto" / "check-your-loss.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    (source,) = [b for b in blocks if b.startswith("# tests/test_my_statistics.py\n")]
    namespace: dict[str, Any] = {"__name__": "howto_check_your_statistics"}
    exec(compile(source, "check-your-loss.md", "exec"), namespace)
    namespace["test_my_statistics_match_refimpl"]()


#: refimpl's value-only statistics under their specs' default conventions
VALUE_ONLY: dict[str, Callable[..., Any]] = {
    "grpo_advantages": adv.grpo_advantages,
    "rloo_advantages": adv.rloo_advantages,
    "reinforce_pp_advantages": adv.reinforce_pp_advantages,
    "sequence_divergence": rj.sequence_divergence,
    "any_token_veto": rj.any_token_veto,
    "is_batch_normalize": rj.is_batch_normalize,
    "off_policy_sequence_mask": rj.off_policy_sequence_mask,
    "m2po_mask": rj.m2po_mask,
}


def test_every_stats_spec_is_covered() -> None:
    assert set(VALUE_ONLY) | {"aggregation"} == set(STATS)


@pytest.mark.parametrize("spec", VALUE_ONLY)
def test_refimpl_off_by_a_little_fails_the_values_check(spec: str) -> None:
    """refimpl's own statistic, 1 % + 0.5 off, fails `values`: the check reads what it says."""
    reference = VALUE_ONLY[spec]

    def off(*args: Any, **kwargs: Any) -> Any:
        return np.asarray(reference(*args, **kwargs)) * 1.01 + 0.5

    report = check_conformance(off, spec=spec, max_examples=EXAMPLES, checks=["values"])
    assert report["values"].status == "failed", report.summary()


@pytest.mark.parametrize("wrong", ["value", "gradient"])
def test_aggregation_checks_read_the_half_they_name(wrong: str) -> None:
    """A wrong value fails every check (each compares the value); a wrong gradient fails every
    check but `values`, the only one that does not read the gradient."""

    def off(loss: Any, mask: Any) -> tuple[Any, Any]:
        value, weights = _aggregate_with_weights(loss, mask, mode="token_mean")
        if wrong == "value":
            return value * 1.01 + 0.5, weights
        return value, np.asarray(weights) * 1.01 + 0.5

    report = check_conformance(
        off, spec="aggregation", conventions={"gradient": "returned"}, max_examples=EXAMPLES
    )
    failed = {r.name for r in report.results if r.status == "failed"}
    ran = {r.name for r in report.results if r.status != "skipped"}
    if wrong == "value":
        assert failed == ran, report.summary()
    else:
        assert failed == ran - {"values"}, report.summary()


def test_an_explicit_example_of_one_call_runs_in_every_advantage_check() -> None:
    """A pinned single call is tried by every check, the pairwise shift check included."""
    call = ((np.array([1.0, 0.0, 3.0, 2.0]),), {"group": np.array([0, 0, 1, 1])})
    report = check_conformance(
        grpo, spec="grpo_advantages", xp="torch", dtype="float64", max_examples=5,
        examples=[[call]],
    )  # fmt: skip
    report.raise_if_failed()
