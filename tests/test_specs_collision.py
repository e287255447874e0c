"""The conformance spec ``token_sum_pi_squared``: Σπ² of the tempered softmax and its gradient.

Correct torch candidates (verl 0.9.1's log-sum-exp form without temperature or mask, and the
log-softmax form with both) pass every check in float64, float32 and bfloat16; each wrong variant
fails the check named for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from refimpl.testing import ConformanceReport, check_conformance, check_names, spec_names

Tensor = torch.Tensor
EXAMPLES = 25
SPEC_NAME = "token_sum_pi_squared"
NO_T = {"temperature": "none", "mask": "none", "padding": "ignored"}


def _masked(s: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask > 0, s, torch.zeros_like(s))


def verl_form(logits: Tensor) -> Tensor:
    """verl calculate_sum_pi_squared_from_logits: exp(lse(2z) − 2·lse(z)), no T, no mask."""
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


def log_softmax_form(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return _masked(torch.exp(2.0 * logp).sum(-1), mask)


CORRECT: list[tuple[str, Callable[..., Any], str, dict[str, Any]]] = [
    ("verl_form_f64", verl_form, "float64", NO_T),
    ("verl_form_f32", verl_form, "float32", NO_T),
    ("log_softmax_f32", log_softmax_form, "float32", {}),
    ("log_softmax_bf16", log_softmax_form, "bfloat16", {}),
]


@pytest.mark.parametrize(
    ("name", "candidate", "dtype", "conventions"), CORRECT, ids=[c[0] for c in CORRECT]
)
def test_a_correct_torch_candidate_passes_every_check(
    name: str, candidate: Callable[..., Any], dtype: str, conventions: dict[str, Any]
) -> None:
    report = check_conformance(
        candidate, spec=SPEC_NAME, xp="torch", dtype=dtype, conventions=conventions,
        max_examples=EXAMPLES,
    )  # fmt: skip
    report.raise_if_failed()
    assert [r.status for r in report.results] == ["passed"] * 4


def test_the_spec_is_listed_with_its_checks() -> None:
    assert SPEC_NAME in spec_names(losses=True)
    assert check_names(SPEC_NAME) == (
        "values",
        "gradient",
        "padding_contributes_nothing",
        "huge_logits_stay_finite",
    )


# wrong variants


def sum_of_pi(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """Σπ (always 1) instead of Σπ²."""
    return _masked(torch.softmax(logits / temperature, dim=-1).sum(-1), mask)


def ignores_temperature(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    return log_softmax_form(logits, temperature=1.0, mask=mask)


def unshifted(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """Σexp(2y) / (Σexp(y))² without subtracting the largest logit: inf/inf at large logits."""
    e = torch.exp(logits / temperature)
    return _masked((e * e).sum(-1) / e.sum(-1) ** 2, mask)


def detached(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    with torch.no_grad():
        s = log_softmax_form(logits, temperature=temperature, mask=mask)
    return s + 0.0 * logits.sum(-1)


def times_mask(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """Masking by multiplication after the unshifted form: NaN·0 at garbage padding."""
    return unshifted(logits, temperature=temperature, mask=mask) * mask


WRONG: list[tuple[Callable[..., Any], str, str]] = [
    (sum_of_pi, "values", "the losses differ"),
    (ignores_temperature, "values", "the losses differ"),
    (unshifted, "huge_logits_stay_finite", "non-finite"),
    (detached, "gradient", "the values agree"),
    (times_mask, "padding_contributes_nothing", "padding entries got"),
]


@pytest.fixture(scope="module")
def wrong_reports() -> dict[str, ConformanceReport]:
    return {
        f.__name__: check_conformance(
            f,
            spec=SPEC_NAME,
            xp="torch",
            dtype="float32",
            max_examples=EXAMPLES * 2,
            checks=[check],
            shrink=False,
        )
        for f, check, _ in WRONG
    }


@pytest.mark.parametrize(
    ("candidate", "check", "says"), WRONG, ids=[f.__name__ for f, _, _ in WRONG]
)
def test_a_wrong_variant_fails_the_check_named_for_it(
    candidate: Callable[..., Any],
    check: str,
    says: str,
    wrong_reports: dict[str, ConformanceReport],
) -> None:
    result = wrong_reports[candidate.__name__][check]
    assert result.status == "failed", result.render()
    assert says in result.message, result.message
