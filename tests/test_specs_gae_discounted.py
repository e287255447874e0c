"""The ``gae_advantages`` spec without a critic (``critic='none'``): the discounted return per
token of a REINFORCE estimator, whitened over the batch or not, as OpenRLHF 0.11.2's
``reinforce`` estimator computes it at ``gamma < 1``.

The reference is GAE at V = 0 and λ = 1 (claim GAE2). Exact Fraction values at γ = 1/2 pin it by
hand; correct torch candidates pass every check; each wrong variant (undiscounted, discounted
from the wrong end, padding counted) fails the check named for it.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
import torch

from refimpl.losses.gae import Gaps, gae_advantages
from refimpl.testing import ConformanceReport, check_conformance

Tensor = torch.Tensor
EXAMPLES = 25
SPEC_NAME = "gae_advantages"
F = Fraction
HALF = Fraction(1, 2)

# ---------------------------------------------------------------------------------------------
# the reference at V = 0, λ = 1, γ = 1/2, by hand
# ---------------------------------------------------------------------------------------------


def _returns(
    rewards: list[list[Fraction]], mask: list[list[int]], gaps: Gaps
) -> list[list[Fraction]]:
    zeros: list[list[Fraction | int]] = [[0] * len(row) for row in rewards]
    exact: list[list[Fraction | int]] = [list(row) for row in rewards]
    return gae_advantages(exact, zeros, gamma=HALF, lam=1, mask=mask, gaps=gaps).advantages


def test_an_outcome_reward_is_discounted_back_from_the_last_valid_token() -> None:
    # the reward 1 on the last valid token (index 2); index 3 is padding and holds garbage
    found = _returns([[F(0), F(0), F(1), F(99)]], [[1, 1, 1, 0]], "steps")
    assert found == [[F(1, 4), F(1, 2), F(1), F(0)]]


def test_per_token_rewards_sum_with_their_discounts() -> None:
    # R_t = r_t + γ R_{t+1}: 1 + (1/2)(−2 + (1/2)·4) = 1, −2 + 2 = 0, 4
    found = _returns([[F(1), F(-2), F(4)], [F(3), F(7), F(0)]], [[1, 1, 1], [1, 0, 0]], "steps")
    assert found == [[F(1), F(0), F(4)], [F(3), F(0), F(0)]]


def test_a_gap_is_a_discount_step_in_openrlhfs_convention_and_not_in_verls() -> None:
    # the gap at index 1 carries reward 0 under 'steps' (R_0 = 1/4) and is skipped under 'skip'
    rewards, mask = [[F(0), F(5), F(1)]], [[1, 0, 1]]
    assert _returns(rewards, mask, "steps") == [[F(1, 4), F(0), F(1)]]
    assert _returns(rewards, mask, "skip") == [[F(1, 2), F(0), F(1)]]


# ---------------------------------------------------------------------------------------------
# torch candidates without a critic
# ---------------------------------------------------------------------------------------------


def _cumulative(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """OpenRLHF get_cumulative_returns: rewards times the mask, summed backwards with γ."""
    r = rewards * mask
    out = torch.zeros_like(r)
    running = torch.zeros(r.shape[0], dtype=r.dtype)
    for t in reversed(range(r.shape[1])):
        running = r[:, t] + gamma * running
        out[:, t] = running
    return out


def _whiten(adv: Tensor, mask: Tensor, *, scale: bool = True) -> Tensor:
    """OpenRLHF: population statistics over the valid tokens in float32, rsqrt(max(var, 1e-8))."""
    a = adv.float()
    n = mask.sum()
    mean = (a * mask).sum() / n
    if not scale:
        return a - mean
    var = ((a - mean).pow(2) * mask).sum() / n
    return (a - mean) * var.clamp(min=1e-8).rsqrt()


def reinforce_raw(rewards: Tensor, *, gamma: float, mask: Tensor) -> Tensor:
    return _cumulative(rewards, mask, gamma) * mask


def reinforce_whitened(rewards: Tensor, *, gamma: float, mask: Tensor) -> tuple[Tensor, Tensor]:
    ret = _cumulative(rewards, mask, gamma)
    return _whiten(ret, mask), ret


def reinforce_centred(rewards: Tensor, *, gamma: float, mask: Tensor) -> tuple[Tensor, Tensor]:
    ret = _cumulative(rewards, mask, gamma)
    return _whiten(ret, mask, scale=False), ret


RAW = {"critic": "none", "gaps": "steps"}
WHITENED = {
    **RAW,
    "output": "both",
    "padding": "ignored",
    "whiten": "batch",
    "whiten_std": "population",
    "eps_placement": "floor",
    "compute_dtype": "float32",
}
CENTRED = {**WHITENED, "whiten_std": "none"}
CORRECT: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    ("raw", reinforce_raw, RAW),
    ("whitened", reinforce_whitened, WHITENED),
    ("centred", reinforce_centred, CENTRED),
]


@pytest.mark.parametrize(("name", "candidate", "conventions"), CORRECT, ids=[c[0] for c in CORRECT])
def test_a_correct_discounted_return_passes_every_check(
    name: str, candidate: Callable[..., Any], conventions: dict[str, Any]
) -> None:
    report = check_conformance(
        candidate, spec=SPEC_NAME, xp="torch", dtype="float64", conventions=conventions,
        max_examples=EXAMPLES,
    )  # fmt: skip
    report.raise_if_failed()
    statuses = {r.name: r.status for r in report.results}
    assert statuses["lambda_zero_is_td_error"] == "skipped"
    assert statuses["values"] == statuses["lambda_one_is_discounted_return"] == "passed"


# wrong variants


def undiscounted(rewards: Tensor, *, gamma: float, mask: Tensor) -> Tensor:
    return reinforce_raw(rewards, gamma=1.0, mask=mask)


def discounted_from_the_row_end(rewards: Tensor, *, gamma: float, mask: Tensor) -> Tensor:
    """Σ_{s>=t} γ^(L−1−s)·r_s: the exponent counted from the row's end, not from t."""
    length = mask.sum(dim=1, keepdim=True)
    t = torch.arange(rewards.shape[1], dtype=rewards.dtype)[None, :]
    weight = torch.where(mask > 0, gamma ** (length - 1 - t).clamp(min=0), 0.0)
    return reinforce_raw(rewards * weight, gamma=1.0, mask=mask)


def reads_padded_rewards(rewards: Tensor, *, gamma: float, mask: Tensor) -> Tensor:
    """The recursion over every column, padded rewards included."""
    return _cumulative(rewards, torch.ones_like(mask), gamma) * mask


def whitened_over_the_padded_width(
    rewards: Tensor, *, gamma: float, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """The batch statistics over every position (padding counted as zeros)."""
    ret = _cumulative(rewards, mask, gamma)
    return _whiten(ret * mask, torch.ones_like(mask)), ret


WRONG: list[tuple[Callable[..., Any], dict[str, Any], str, str]] = [
    (undiscounted, RAW, "values", "the advantages differ"),
    (undiscounted, RAW, "lambda_one_is_discounted_return", "discounted return"),
    (discounted_from_the_row_end, RAW, "values", "the advantages differ"),
    (reads_padded_rewards, RAW, "padding_contributes_nothing", "padded reward"),
    (whitened_over_the_padded_width, WHITENED, "whitened_mean_and_std", "mean"),
]


@pytest.fixture(scope="module")
def wrong_reports() -> dict[str, ConformanceReport]:
    return {
        f"{f.__name__}:{check}": check_conformance(
            f,
            spec=SPEC_NAME,
            xp="torch",
            dtype="float64",
            conventions=conv,
            max_examples=EXAMPLES * 2,
            checks=[check],
            shrink=False,
        )
        for f, conv, check, _ in WRONG
    }


@pytest.mark.parametrize(
    ("candidate", "conventions", "check", "says"),
    WRONG,
    ids=[f"{f.__name__}-{c}" for f, _, c, _ in WRONG],
)
def test_a_wrong_variant_fails_the_check_named_for_it(
    candidate: Callable[..., Any],
    conventions: dict[str, Any],
    check: str,
    says: str,
    wrong_reports: dict[str, ConformanceReport],
) -> None:
    result = wrong_reports[f"{candidate.__name__}:{check}"][check]
    assert result.status == "failed", result.message
    assert says in result.message, result.message
