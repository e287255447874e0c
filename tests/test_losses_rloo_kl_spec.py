"""The ``rloo_kl_advantages`` spec: refimpl's own advantages pass under every convention, and each
check fails a candidate wrong in the way it targets (the clip applied after the penalty, a
penalty that reads padding, the penalty kept out of the siblings' baselines, the penalty
averaged over the tokens)."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import pytest

from refimpl.losses import rloo_advantages, rloo_kl_advantages
from refimpl.testing import check_conformance, check_names, conventions, spec_names

SPEC_NAME = "rloo_kl_advantages"
EXAMPLES = 20


def test_the_spec_is_listed_with_its_checks_and_conventions() -> None:
    assert SPEC_NAME in spec_names(losses=True)
    assert check_names(SPEC_NAME) == (
        "values",
        "padding_ignored",
        "penalty_enters_the_baseline",
        "clip_before_penalty",
    )
    assert {c.key: c.default for c in conventions(SPEC_NAME)} == {
        "normalize": "none",
        "eps": 1e-4,
        "groups": "labelled",
    }


@pytest.mark.parametrize(
    ("normalize", "eps", "groups"),
    list(itertools.product(("none", "batch"), (1e-4, 0.0), ("labelled", "contiguous"))),
)
def test_refimpls_own_advantages_pass(normalize: str, eps: float, groups: str) -> None:
    candidate = functools.partial(rloo_kl_advantages, normalize=normalize == "batch", eps=eps)
    conv = {"normalize": normalize, "eps": eps, "groups": groups}
    report = check_conformance(candidate, spec=SPEC_NAME, conventions=conv, max_examples=EXAMPLES)
    report.raise_if_failed()


def _sum(logp: Any, ref: Any, mask: Any) -> Any:
    return (np.asarray(mask) * (np.asarray(logp) - ref)).sum(axis=1)


def clip_after(rewards: Any, logp: Any, ref: Any, *, group: Any, beta: float,
               reward_clip: Any, mask: Any) -> Any:  # fmt: skip
    """Wrong: the penalised reward is clipped (the penalty with it)."""
    r = np.asarray(rewards) - beta * _sum(logp, ref, mask)
    return rloo_advantages(r if reward_clip is None else np.clip(r, *reward_clip), group=group)


def reads_padding(rewards: Any, logp: Any, ref: Any, *, mask: Any, **kw: Any) -> Any:
    """Wrong: the log-ratio is summed over the padded width."""
    return rloo_kl_advantages(rewards, logp, ref, **kw)


def outside_baseline(rewards: Any, logp: Any, ref: Any, *, mask: Any, beta: float,
                     **kw: Any) -> Any:  # fmt: skip
    """Wrong: RLOO of the clipped outcome, then the sequence's own −β·KL."""
    plain = rloo_kl_advantages(rewards, ref, ref, mask=mask, beta=beta, **kw)
    return plain - beta * _sum(logp, ref, mask)


def token_mean(rewards: Any, logp: Any, ref: Any, *, mask: Any, **kw: Any) -> Any:
    """Wrong: the log-ratio averaged over the valid tokens instead of summed."""
    m = np.asarray(mask)
    scaled = ref + (np.asarray(logp) - ref) / m.sum(axis=1, keepdims=True)
    return rloo_kl_advantages(rewards, scaled, ref, mask=mask, **kw)


@pytest.mark.parametrize(
    ("candidate", "check"),
    [
        (clip_after, "clip_before_penalty"),
        (reads_padding, "padding_ignored"),
        (outside_baseline, "penalty_enters_the_baseline"),
        (token_mean, "penalty_enters_the_baseline"),
        (token_mean, "values"),
    ],
)
def test_each_check_fails_its_wrong_variant(candidate: Any, check: str) -> None:
    report = check_conformance(
        candidate, spec=SPEC_NAME, max_examples=50, checks=[check], shrink=False
    )
    assert report[check].status == "failed", report.summary()
