"""token_logprobs under truncation='none': a trainer's full-softmax log-probability (what verl,
TRL, OpenRLHF and AReaL compute) passes with the convention declared, and only then."""

from __future__ import annotations

import torch

from refimpl.testing import check_conformance, conventions

Tensor = torch.Tensor


def full_softmax(logits: Tensor, tokens: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    logp = torch.log_softmax(logits / temperature, dim=-1)
    picked = logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return torch.where(mask > 0, picked, torch.zeros_like(picked))


def ignores_the_sampler(
    logits: Tensor, tokens: Tensor, *, temperature: float, top_k: int | None,
    top_p: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    """The wrong variant: it takes top_k and top_p and ignores them."""
    return full_softmax(logits, tokens, temperature=temperature, mask=mask)


def test_the_convention_is_listed_with_who_follows_it() -> None:
    (truncation,) = [c for c in conventions("token_logprobs") if c.key == "truncation"]
    assert (truncation.default, truncation.choices) == ("drawn", ("drawn", "none"))
    assert "verl 0.9.1" in truncation.who


def test_a_full_softmax_passes_without_truncation() -> None:
    report = check_conformance(
        full_softmax, spec="token_logprobs", xp="torch", dtype="float32",
        conventions={"truncation": "none"}, max_examples=10,
    )  # fmt: skip
    report.raise_if_failed()
    assert sum(r.status == "passed" for r in report.results) >= 4


def test_ignoring_a_drawn_top_k_or_top_p_fails() -> None:
    report = check_conformance(
        ignores_the_sampler, spec="token_logprobs", xp="torch", dtype="float32", max_examples=10
    )
    assert report["values"].status == "failed", report.summary()
    assert report["gradient"].status == "failed", report.summary()
