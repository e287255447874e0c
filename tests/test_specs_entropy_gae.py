"""The conformance specs ``token_entropy`` and ``gae_advantages``.

Correct torch candidates written in the frameworks' styles (with the conventions that describe
them) pass every check; refimpl's own functions pass; each wrong variant fails the check named for
it. The entropy spec's reference gradient is checked against torch autograd.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl.losses.logprobs as lp
from refimpl.losses.gae import gae_advantages
from refimpl.testing import ConformanceReport, check_conformance, check_names, spec_names
from refimpl.testing._specs_losses_entropy import token_entropy_vjp

Array = NDArray[np.float64]
Tensor = torch.Tensor
EXAMPLES = 25

# ---------------------------------------------------------------------------------------------
# entropy: the reference gradient against torch autograd
# ---------------------------------------------------------------------------------------------


@st.composite
def entropy_inputs(draw: st.DrawFn) -> tuple[Array, float, Array, Array]:
    batch, time, vocab = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    n = batch * time * vocab
    scale = draw(st.sampled_from([1.0, 10.0, 300.0]))
    z = np.asarray(draw(st.lists(st.floats(-1.0, 1.0), min_size=n, max_size=n))) * scale
    t = draw(st.sampled_from([0.3, 0.7, 1.0, 2.5]))
    cot = np.asarray(
        draw(st.lists(st.integers(0, 8), min_size=batch * time, max_size=batch * time))
    )
    lengths = np.asarray(draw(st.lists(st.integers(0, time), min_size=batch, max_size=batch)))
    mask = (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)
    return z.reshape(batch, time, vocab), t, cot.reshape(batch, time) / 4.0, mask


@given(inputs=entropy_inputs())
def test_the_entropy_vjp_is_torch_autograd_of_the_entropy(
    inputs: tuple[Array, float, Array, Array],
) -> None:
    z, t, cot, mask = inputs
    x = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(x / t, dim=-1)
    h = -(logp.exp() * logp).sum(-1)
    (grad,) = torch.autograd.grad((torch.as_tensor(cot * mask) * h).sum(), x)
    found = token_entropy_vjp(z, temperature=t, cotangent=cot, mask=mask)
    np.testing.assert_allclose(found, grad.numpy(), rtol=1e-9, atol=1e-12)
    value = lp.token_entropy(z, temperature=t, mask=mask)
    np.testing.assert_allclose(value, (h * torch.as_tensor(mask)).detach().numpy(), atol=1e-12)


def test_the_entropy_vjp_agrees_with_central_differences() -> None:
    rng = np.random.default_rng(5)
    z = rng.normal(0.0, 2.0, (2, 3, 5))
    cot, mask = rng.uniform(0.0, 2.0, (2, 3)), np.ones((2, 3))
    grad = token_entropy_vjp(z, temperature=0.7, cotangent=cot, mask=mask)
    h = 1e-6
    for idx in [(0, 0, 0), (1, 2, 4), (0, 1, 3)]:
        up, down = z.copy(), z.copy()
        up[idx] += h
        down[idx] -= h
        f_up = float(np.sum(cot * lp.token_entropy(up, temperature=0.7)))
        f_down = float(np.sum(cot * lp.token_entropy(down, temperature=0.7)))
        assert grad[idx] == pytest.approx((f_up - f_down) / (2 * h), rel=1e-6, abs=1e-8)


# ---------------------------------------------------------------------------------------------
# entropy candidates (torch)
# ---------------------------------------------------------------------------------------------


def _masked(h: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask > 0, h, torch.zeros_like(h))


def entropy_log_softmax(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """TRL / AReaL / SkyRL: −Σ p·log p from log_softmax of the tempered logits."""
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return _masked(-(logp.exp() * logp).sum(-1), mask)


def entropy_lse_form(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """verl / OpenRLHF: logsumexp(y) − Σ softmax(y)·y."""
    y = logits / temperature
    return _masked(torch.logsumexp(y, -1) - (torch.softmax(y, -1) * y).sum(-1), mask)


def verl_entropy_from_logits(logits: Tensor) -> Tensor:
    """verl entropy_from_logits: no temperature (the caller divides), no mask."""
    pd = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def verl_chunked(logits: Tensor) -> Tensor:
    """verl entropy_from_logits_with_chunking on flattened rows: float32 chunks, float32 output."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.zeros(flat.shape[0])
    for i in range(0, flat.shape[0], 2048):
        chunk = flat[i : i + 2048].float()
        pd = torch.softmax(chunk, dim=-1)
        out[i : i + 2048] = torch.logsumexp(chunk, -1) - (pd * chunk).sum(-1)
    return out.reshape(logits.shape[:-1])


def entropy_token_mean(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """verl compute_entropy_loss with agg_loss 'token-mean'."""
    h = entropy_log_softmax(logits, temperature=temperature, mask=mask)
    return h.sum() / mask.sum()


def entropy_without_temperature(logits: Tensor, *, mask: Tensor) -> Tensor:
    return entropy_log_softmax(logits, temperature=1.0, mask=mask)


NO_T = {"temperature": "none", "mask": "none", "padding": "ignored"}
CORRECT_ENTROPY: list[tuple[str, Callable[..., Any], str, dict[str, Any]]] = [
    ("log_softmax_f32", entropy_log_softmax, "float32", {}),
    ("log_softmax_bf16", entropy_log_softmax, "bfloat16", {}),
    ("lse_form_f32", entropy_lse_form, "float32", {}),
    ("verl_entropy_from_logits", verl_entropy_from_logits, "float32", NO_T),
    ("verl_chunked_from_f64", verl_chunked, "float64", {**NO_T, "compute_dtype": "float32"}),
    (
        "verl_entropy_loss_token_mean",
        entropy_token_mean,
        "float32",
        {"output": "scalar", "aggregation": "token_mean", "empty_batch": "excluded"},
    ),
]


@pytest.mark.parametrize(
    ("name", "candidate", "dtype", "conventions"),
    CORRECT_ENTROPY,
    ids=[c[0] for c in CORRECT_ENTROPY],
)
def test_a_correct_torch_entropy_passes_every_check(
    name: str, candidate: Callable[..., Any], dtype: str, conventions: dict[str, Any]
) -> None:
    report = check_conformance(
        candidate,
        spec="token_entropy",
        xp="torch",
        dtype=dtype,
        conventions=conventions,
        max_examples=EXAMPLES,
    )
    report.raise_if_failed()
    assert [r.status for r in report.results] == ["passed"] * 4


def _own_entropy(logits: Any, **kwargs: Any) -> tuple[Any, Any]:
    cotangent = kwargs.pop("cotangent")
    value = lp.token_entropy(logits, **kwargs)
    return value, token_entropy_vjp(np.asarray(logits), cotangent=cotangent, **kwargs)


def test_refimpls_own_entropy_passes_with_its_returned_gradient() -> None:
    report = check_conformance(
        _own_entropy, spec="token_entropy", conventions={"gradient": "returned"},
        max_examples=EXAMPLES,
    )  # fmt: skip
    report.raise_if_failed()


def test_the_entropy_spec_is_listed_with_its_checks() -> None:
    assert "token_entropy" in spec_names(losses=True)
    assert check_names("token_entropy") == (
        "values",
        "gradient",
        "padding_contributes_nothing",
        "huge_logits_stay_finite",
    )


def test_a_missing_temperature_keyword_is_named_by_the_failure() -> None:
    result = check_conformance(
        entropy_without_temperature, spec="token_entropy", xp="torch", dtype="float32",
        max_examples=EXAMPLES, checks=["values"],
    )["values"]  # fmt: skip
    assert result.status == "raised"
    assert "conventions={'temperature': 'none'}" in result.message


# wrong variants


def entropy_ignores_temperature(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    return entropy_log_softmax(logits, temperature=1.0, mask=mask)


def entropy_unshifted_softmax(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """exp(y)/Σexp(y) without subtracting the largest logit: inf/inf at large logits."""
    y = logits / temperature
    e = torch.exp(y)
    s = e.sum(-1, keepdim=True)
    return _masked(-((e / s) * (y - torch.log(s))).sum(-1), mask)


def entropy_wrong_sign(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    return -entropy_log_softmax(logits, temperature=temperature, mask=mask)


def entropy_in_bits(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    return entropy_log_softmax(logits, temperature=temperature, mask=mask) / math.log(2.0)


def entropy_detached(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """The value without its gradient (computed under no_grad, a leaf times zero)."""
    with torch.no_grad():
        h = entropy_log_softmax(logits, temperature=temperature, mask=mask)
    return h + 0.0 * logits.sum(-1)


def entropy_times_mask(logits: Tensor, *, temperature: float, mask: Tensor) -> Tensor:
    """Masking by multiplication after an unshifted softmax: NaN·0 at garbage padding."""
    return entropy_unshifted_softmax(logits, temperature=temperature, mask=mask) * mask


WRONG_ENTROPY: list[tuple[Callable[..., Any], str, str]] = [
    (entropy_ignores_temperature, "values", "the losses differ"),
    (entropy_unshifted_softmax, "huge_logits_stay_finite", "non-finite"),
    (entropy_wrong_sign, "values", "the losses differ"),
    (entropy_in_bits, "values", "the losses differ"),
    (entropy_detached, "gradient", "the values agree"),
    (entropy_times_mask, "padding_contributes_nothing", "padding entries got"),
]


@pytest.fixture(scope="module")
def entropy_reports() -> dict[str, ConformanceReport]:
    return {
        f.__name__: check_conformance(
            f,
            spec="token_entropy",
            xp="torch",
            dtype="float32",
            max_examples=EXAMPLES * 2,
            checks=[check],
            shrink=False,
        )
        for f, check, _ in WRONG_ENTROPY
    }


@pytest.mark.parametrize(
    ("candidate", "check", "says"), WRONG_ENTROPY, ids=[f.__name__ for f, _, _ in WRONG_ENTROPY]
)
def test_a_wrong_entropy_fails_the_check_named_for_it(
    candidate: Callable[..., Any],
    check: str,
    says: str,
    entropy_reports: dict[str, ConformanceReport],
) -> None:
    result = entropy_reports[candidate.__name__][check]
    assert result.status == "failed", result.render()
    assert says in result.message, result.message


def test_an_unshifted_softmax_passes_at_moderate_logits() -> None:
    """The huge-logits check is what rejects it: the values check alone does not."""
    report = check_conformance(
        entropy_unshifted_softmax, spec="token_entropy", xp="torch", dtype="float32",
        max_examples=EXAMPLES, checks=["values", "gradient"],
    )  # fmt: skip
    report.raise_if_failed()


# ---------------------------------------------------------------------------------------------
# GAE candidates (torch)
# ---------------------------------------------------------------------------------------------


def _recursion(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float, *,
    bootstrap: Tensor | float = 0.0,
) -> Tensor:  # fmt: skip
    """verl compute_gae_advantage_return / AReaL's loop: masked positions carry the state."""
    nextvalues: Tensor | float = bootstrap
    lastgaelam: Tensor | float = 0.0
    out = []
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        new = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
        lastgaelam = new * mask[:, t] + (1 - mask[:, t]) * lastgaelam
        out.append(lastgaelam)
    return torch.stack(out[::-1], dim=1)


def _whiten(adv: Tensor, mask: Tensor, *, ddof: int, eps: float, placement: str) -> Tensor:
    n = mask.sum()
    mean = torch.where(mask > 0, adv, 0.0).sum() / n
    var = (torch.where(mask > 0, adv - mean, 0.0) ** 2).sum() / (n - ddof)
    if placement == "variance":
        return (adv - mean) * torch.rsqrt(var + eps)
    if placement == "floor":
        return (adv - mean) * var.clamp(min=eps).rsqrt()
    return (adv - mean) / (var.sqrt() + eps)


def gae_raw(rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor) -> Tensor:
    return _recursion(rewards, values, mask, gamma, lam) * mask


def gae_verl(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """verl 0.9.1 compute_gae_advantage_return: returns from the raw advantages, masked_whiten."""
    adv = _recursion(rewards, values, mask, gamma, lam)
    ret = adv + values
    return _whiten(adv, mask, ddof=1, eps=1e-8, placement="variance"), ret


def gae_openrlhf(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """OpenRLHF 0.11.2: rewards and values times the mask, every position a step; then the
    experience maker's whitening (population variance, √max(var, 1e-8))."""
    values, rewards = mask * values, mask * rewards
    last: Tensor | float = 0.0
    out = []
    width = rewards.shape[1]
    for t in reversed(range(width)):
        nxt = values[:, t + 1] if t < width - 1 else 0.0
        last = rewards[:, t] + gamma * nxt - values[:, t] + gamma * lam * last
        out.append(last)
    adv = torch.stack(out[::-1], dim=1)
    ret = adv + values
    return _whiten(adv, mask, ddof=0, eps=1e-8, placement="floor"), ret


def gae_areal(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor, bootstrap: Tensor
) -> Tensor:
    """AReaL 1.0.4: a given bootstrap value, adv_norm (sample std, ε = 1e-5 added to it)."""
    adv = _recursion(rewards, values, mask, gamma, lam, bootstrap=bootstrap)
    return _whiten(adv, mask, ddof=1, eps=1e-5, placement="std")


def gae_skyrl(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """SkyRL 0.3.0 compute_gae_advantage_return: no mask in the recursion, masked_whiten."""
    last: Tensor | float = 0.0
    out = []
    width = rewards.shape[1]
    for t in reversed(range(width)):
        nxt = values[:, t + 1] if t < width - 1 else 0.0
        last = rewards[:, t] + gamma * nxt - values[:, t] + gamma * lam * last
        out.append(last)
    adv = torch.stack(out[::-1], dim=1)
    return _whiten(adv, mask, ddof=1, eps=1e-8, placement="variance"), adv + values


IGNORED = {"padding": "ignored"}
WHITE = {"whiten": "batch", "output": "both", **IGNORED}
CORRECT_GAE: list[tuple[str, Callable[..., Any], str, dict[str, Any]]] = [
    ("raw_f32", gae_raw, "float32", {}),
    ("raw_f64", gae_raw, "float64", {}),
    ("verl", gae_verl, "float32", WHITE),
    (
        "openrlhf",
        gae_openrlhf,
        "float32",
        {**WHITE, "gaps": "steps", "whiten_std": "population", "eps_placement": "floor"},
    ),
    (
        "areal",
        gae_areal,
        "float32",
        {
            "whiten": "batch",
            "bootstrap": "keyword",
            "whiten_eps": 1e-5,
            "eps_placement": "std",
            **IGNORED,
        },
    ),
    ("skyrl", gae_skyrl, "float32", {**WHITE, "gaps": "excluded", "padding_inputs": "zero"}),
]


@pytest.mark.parametrize(
    ("name", "candidate", "dtype", "conventions"), CORRECT_GAE, ids=[c[0] for c in CORRECT_GAE]
)
def test_a_framework_style_gae_passes_with_its_conventions(
    name: str, candidate: Callable[..., Any], dtype: str, conventions: dict[str, Any]
) -> None:
    report = check_conformance(
        candidate,
        spec="gae_advantages",
        xp="torch",
        dtype=dtype,
        conventions=conventions,
        max_examples=EXAMPLES,
    )
    report.raise_if_failed()
    assert {r.status for r in report.results} <= {"passed", "skipped"}


def test_refimpls_own_gae_passes() -> None:
    def own(rewards: Any, values: Any, **kwargs: Any) -> Any:
        return gae_advantages(rewards, values, **kwargs)

    report = check_conformance(
        own, spec="gae_advantages", conventions={"output": "both"}, max_examples=EXAMPLES
    )
    report.raise_if_failed()
    ran = [r.status for r in report.results if r.status != "skipped"]
    assert ran == ["passed"] * 5


def test_the_gae_spec_is_listed_with_its_checks() -> None:
    assert "gae_advantages" in spec_names(losses=True)
    assert check_names("gae_advantages") == (
        "values",
        "padding_contributes_nothing",
        "lambda_zero_is_td_error",
        "lambda_one_is_discounted_return",
        "gaps_in_the_mask",
        "whitened_mean_and_std",
    )


def test_skyrls_recursion_fails_on_garbage_padding_and_the_failure_names_the_convention() -> None:
    result = check_conformance(
        gae_skyrl, spec="gae_advantages", xp="torch", dtype="float32",
        conventions={**WHITE, "gaps": "excluded"}, max_examples=EXAMPLES,
        checks=["padding_contributes_nothing"],
    )["padding_contributes_nothing"]  # fmt: skip
    assert result.status == "failed"
    assert "padding_inputs" in result.message


# wrong variants


def gae_off_by_one(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> Tensor:
    """δ_t bootstraps from V_t instead of V_{t+1}."""
    last: Tensor | float = 0.0
    out = []
    for t in reversed(range(rewards.shape[1])):
        new = rewards[:, t] + gamma * values[:, t] - values[:, t] + gamma * lam * last
        last = new * mask[:, t] + (1 - mask[:, t]) * last
        out.append(last)
    return torch.stack(out[::-1], dim=1) * mask


def gae_swapped(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> Tensor:
    return gae_raw(rewards, values, gamma=lam, lam=gamma, mask=mask)


def gae_leaking(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> Tensor:
    adv, _ = gae_skyrl(rewards, values, gamma=gamma, lam=lam, mask=mask)
    return adv


def gae_sample_declared_population(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> Tensor:
    adv = _recursion(rewards, values, mask, gamma, lam)
    return _whiten(adv, mask, ddof=0, eps=1e-8, placement="variance")


def gae_gaps_as_steps(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float, mask: Tensor
) -> Tensor:
    adv, _ = gae_openrlhf(rewards, values, gamma=gamma, lam=lam, mask=mask)
    return adv


WRONG_GAE: list[tuple[Callable[..., Any], dict[str, Any], str, str]] = [
    (gae_off_by_one, {}, "lambda_zero_is_td_error", "at λ = 0"),
    (gae_swapped, {}, "lambda_one_is_discounted_return", "at λ = 1"),
    (gae_leaking, {"whiten": "batch", **IGNORED}, "padding_contributes_nothing", "garbage"),
    (gae_sample_declared_population, {"whiten": "batch", **IGNORED}, "whitened_mean_and_std",
     "standard deviation"),
    (gae_gaps_as_steps, {"whiten": "batch", "whiten_std": "population", "eps_placement": "floor",
                         **IGNORED}, "gaps_in_the_mask", "with gaps in the mask"),
]  # fmt: skip


@pytest.fixture(scope="module")
def gae_reports() -> dict[str, ConformanceReport]:
    return {
        f.__name__: check_conformance(
            f,
            spec="gae_advantages",
            xp="torch",
            dtype="float32",
            conventions=conv,
            max_examples=EXAMPLES * 2,
            checks=[check],
            shrink=False,
        )
        for f, conv, check, _ in WRONG_GAE
    }


@pytest.mark.parametrize(
    ("candidate", "conv", "check", "says"), WRONG_GAE, ids=[f.__name__ for f, _, _, _ in WRONG_GAE]
)
def test_a_wrong_gae_fails_the_check_named_for_it(
    candidate: Callable[..., Any],
    conv: dict[str, Any],
    check: str,
    says: str,
    gae_reports: dict[str, ConformanceReport],
) -> None:
    result = gae_reports[candidate.__name__][check]
    assert result.status == "failed", result.render()
    assert says in result.message, result.message
