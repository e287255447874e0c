"""Conventions that say what a framework's loss does not do: token_logprobs under
truncation='none' (a trainer's full-softmax log-probability: verl, TRL, OpenRLHF, AReaL) and
temperature='none' (no temperature= keyword, checked at T = 1: SkyRL's JAX models), and ppo_clip under dual_clip=None (a clipped surrogate without a dual clip: TRL's async GRPO) pass with
the convention declared, and only then."""

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


def untempered(logits: Tensor, tokens: Tensor, *, mask: Tensor) -> Tensor:
    """A full softmax that takes no temperature= (its caller divides, or nothing does)."""
    return full_softmax(logits, tokens, temperature=1.0, mask=mask)


def ignores_the_temperature(
    logits: Tensor, tokens: Tensor, *, temperature: float, mask: Tensor
) -> Tensor:
    """The wrong variant under 'keyword': it takes temperature= and ignores it."""
    return untempered(logits, tokens, mask=mask)


def divides_anyway(logits: Tensor, tokens: Tensor, *, mask: Tensor) -> Tensor:
    """The wrong variant under 'none': it divides by a temperature of its own, 0.7."""
    return full_softmax(logits, tokens, temperature=0.7, mask=mask)


FULL = {"truncation": "none"}


def test_the_temperature_convention_is_the_entropys() -> None:
    (mine,) = [c for c in conventions("token_logprobs") if c.key == "temperature"]
    (entropy,) = [c for c in conventions("token_entropy") if c.key == "temperature"]
    assert (mine.default, mine.choices, mine.meaning) == (
        entropy.default, entropy.choices, entropy.meaning,
    )  # fmt: skip
    assert (mine.default, mine.choices) == ("keyword", ("keyword", "none"))
    assert "SkyRL 0.3.0" in mine.who


def test_a_log_softmax_without_temperature_passes_under_temperature_none() -> None:
    report = check_conformance(
        untempered, spec="token_logprobs", xp="torch", dtype="float32",
        conventions={**FULL, "temperature": "none"}, max_examples=10,
    )  # fmt: skip
    report.raise_if_failed()
    assert sum(r.status == "passed" for r in report.results) >= 4


def test_a_missing_temperature_keyword_is_named_by_the_failure() -> None:
    result = check_conformance(
        untempered, spec="token_logprobs", xp="torch", dtype="float32", conventions=FULL,
        max_examples=10, checks=["values"],
    )["values"]  # fmt: skip
    assert result.status == "raised", result.message
    assert "conventions={'temperature': 'none'}" in result.message


def test_ignoring_a_drawn_temperature_fails() -> None:
    report = check_conformance(
        ignores_the_temperature, spec="token_logprobs", xp="torch", dtype="float32",
        conventions=FULL, max_examples=10,
    )  # fmt: skip
    assert report["values"].status == "failed", report.summary()
    assert report["gradient"].status == "failed", report.summary()


def test_dividing_by_a_temperature_of_its_own_fails_under_temperature_none() -> None:
    report = check_conformance(
        divides_anyway, spec="token_logprobs", xp="torch", dtype="float32",
        conventions={**FULL, "temperature": "none"}, max_examples=10,
    )  # fmt: skip
    assert report["values"].status == "failed", report.summary()
    assert report["gradient"].status == "failed", report.summary()


def ppo_without_dual_clip(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float,
    eps_high: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    ratio = torch.exp(torch.clamp(logp - logp_old, -20.0, 20.0))
    high = eps_low if eps_high is None else eps_high
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + high)
    loss = torch.maximum(-advantages * ratio, -advantages * clipped)
    return torch.where(mask > 0, loss, torch.zeros_like(loss))


def ignores_a_drawn_dual_clip(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float,
    eps_high: float | None, dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    """The wrong variant: it takes dual_clip and ignores it."""
    return ppo_without_dual_clip(
        logp, logp_old, advantages, eps_low=eps_low, eps_high=eps_high, mask=mask
    )


def test_a_surrogate_without_dual_clip_passes_under_dual_clip_none() -> None:
    report = check_conformance(
        ppo_without_dual_clip, spec="ppo_clip", xp="torch", dtype="float32",
        conventions={"dual_clip": None, "log_ratio_clamp": 20.0}, max_examples=10,
    )  # fmt: skip
    report.raise_if_failed()


def test_ignoring_a_drawn_dual_clip_fails() -> None:
    report = check_conformance(
        ignores_a_drawn_dual_clip, spec="ppo_clip", xp="torch", dtype="float32",
        conventions={"log_ratio_clamp": 20.0}, max_examples=25, checks=["values"],
    )  # fmt: skip
    assert report["values"].status == "failed", report.summary()


def cispo_without_lower_bound(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_high: float, mask: Tensor
) -> Tensor:
    ratio = torch.exp(torch.clamp(logp - logp_old, -20.0, 20.0))
    weight = torch.clamp(ratio, max=1 + eps_high).detach()
    loss = -advantages * weight * logp
    return torch.where(mask > 0, loss, torch.zeros_like(loss))


def ignores_a_drawn_eps_low(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_high: float,
    eps_low: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    """The wrong variant: it takes eps_low and ignores it."""
    return cispo_without_lower_bound(logp, logp_old, advantages, eps_high=eps_high, mask=mask)


def test_a_cispo_without_lower_bound_passes_under_lower_bound_none() -> None:
    report = check_conformance(
        cispo_without_lower_bound, spec="cispo", xp="torch", dtype="float32",
        conventions={"lower_bound": None, "log_ratio_clamp": 20.0}, max_examples=10,
    )  # fmt: skip
    report.raise_if_failed()


def test_ignoring_a_drawn_eps_low_fails() -> None:
    report = check_conformance(
        ignores_a_drawn_eps_low, spec="cispo", xp="torch", dtype="float32",
        conventions={"log_ratio_clamp": 20.0}, max_examples=25, checks=["values"],
    )  # fmt: skip
    assert report["values"].status == "failed", report.summary()
