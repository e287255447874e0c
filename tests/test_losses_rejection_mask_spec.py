"""The ``divergence_rejection_mask`` spec: refimpl's own mask passes under every convention, and
each check fails a candidate wrong in the way it targets (a strict bound, a missing clamp, a
statistic that reads padding, a row without a valid token kept)."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import pytest

import refimpl.losses.rejection as R
from refimpl.testing import check_conformance, check_names, conventions, spec_names

SPEC_NAME = "divergence_rejection_mask"
EXAMPLES = 20


def test_the_spec_is_listed_with_its_checks_and_conventions() -> None:
    assert SPEC_NAME in spec_names(losses=True)
    assert check_names(SPEC_NAME) == ("values", "padding_ignored", "bound_inclusive", "empty_rows")
    assert {c.key: c.default for c in conventions(SPEC_NAME)} == {
        "estimator": "k1",
        "reduce": "token",
        "lower": "absent",
        "log_ratio_clamp": None,
        "empty_rows": "drawn",
    }


@pytest.mark.parametrize(
    ("estimator", "reduce", "lower", "clamp"),
    list(
        itertools.product(
            ("k1", "k2", "k3"), ("token", "sum", "mean", "max"), ("absent", "given"), (None, 20.0)
        )
    ),
)
def test_refimpls_own_mask_passes(
    estimator: str, reduce: str, lower: str, clamp: float | None
) -> None:
    options: dict[str, Any] = {"estimator": estimator, "reduce": reduce, "log_ratio_clamp": clamp}
    candidate = functools.partial(R.divergence_rejection_mask, **options)
    conv = {"estimator": estimator, "reduce": reduce, "lower": lower, "log_ratio_clamp": clamp}
    report = check_conformance(candidate, spec=SPEC_NAME, conventions=conv, max_examples=EXAMPLES)
    report.raise_if_failed()


def strict(lt: Any, lb: Any, *, upper: float, mask: Any) -> Any:
    """Wrong: keeps k2 sums < upper (the bound is inclusive)."""
    below = float(np.nextafter(upper, -np.inf))
    return R.divergence_rejection_mask(lt, lb, estimator="k2", reduce="sum", upper=below, mask=mask)


def unclamped(lt: Any, lb: Any, *, upper: float, mask: Any) -> Any:
    """Wrong under log_ratio_clamp=20: no clamp."""
    return R.divergence_rejection_mask(lt, lb, estimator="k2", reduce="max", upper=upper, mask=mask)


def reads_padding(lt: Any, lb: Any, *, upper: float, mask: Any) -> Any:
    """Wrong: the mean runs over the padded width, then the output is masked."""
    kept = R.divergence_rejection_mask(lt, lb, estimator="k3", reduce="mean", upper=upper)
    return kept * np.asarray(mask)


def keeps_empty_rows(lt: Any, lb: Any, *, upper: float, mask: Any) -> Any:
    """Wrong: a row without a valid token is all 1."""
    kept = R.divergence_rejection_mask(lt, lb, estimator="k1", reduce="max", upper=upper, mask=mask)
    empty = np.asarray(mask).sum(axis=1) == 0
    return np.where(empty[:, None], 1.0, kept)


@pytest.mark.parametrize(
    ("candidate", "conv", "check"),
    [
        (strict, {"estimator": "k2", "reduce": "sum"}, "bound_inclusive"),
        (unclamped, {"estimator": "k2", "reduce": "max", "log_ratio_clamp": 20.0}, "values"),
        (reads_padding, {"estimator": "k3", "reduce": "mean"}, "values"),
        (keeps_empty_rows, {"estimator": "k1", "reduce": "max"}, "empty_rows"),
    ],
)
def test_each_check_fails_its_wrong_variant(
    candidate: Any, conv: dict[str, Any], check: str
) -> None:
    report = check_conformance(candidate, spec=SPEC_NAME, conventions=conv, max_examples=50)
    assert report[check].status == "failed", report.summary()
