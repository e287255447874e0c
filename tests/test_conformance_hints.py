"""Every convention key of every spec: a candidate that follows the other value fails, and the
failure names the convention that explains it, ``conventions={key: value}``.

The candidates are the reference itself computing the other variant (``_variant``), with the
signature that variant implies (one log-ratio array, packed tokens), or written by hand where the
variant is a way of computing rather than a value (a coarser compute dtype, raising on an
all-padding row, garbage at ignored padding). Some values cannot be failed under the default
conventions and are listed in ``INDISTINGUISHABLE`` with the reason; the test checks that list too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from refimpl.testing import ConformanceError, check_conformance, conventions, reproduce, spec_names
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._conformance import _SPECS, _Runner

EXAMPLES = 10


def _variant(spec: str, declared: dict[str, Any]) -> Callable[..., Any]:
    """The reference under ``declared``, called the way that variant's framework calls it."""
    the_spec = _SPECS[spec]
    conv = the_spec.resolve(declared)

    def candidate(*args: Any, **kwargs: Any) -> Any:
        if conv.get("layout") == "packed" and "cu_seqlens" not in kwargs:
            raise TypeError("candidate() missing keyword argument 'cu_seqlens'")
        if conv.get("inputs") == "log_ratio" and len(args) != 1:
            raise TypeError(f"candidate() takes 1 positional argument but {len(args)} were given")
        out = the_spec.expected((args, kwargs), conv)
        if spec == "masking_diagnostics":
            return dict(zip(("kept_fraction", "on_policy_dropped_fraction",
                             "effective_sample_size"), out, strict=True))  # fmt: skip
        return out

    return candidate


def _computes_in(spec: str, dtype: str) -> Callable[..., Any]:
    """The reference evaluated on inputs rounded to ``dtype``, its result rounded too."""
    exact = _variant(spec, {})

    def rounded(x: Any) -> Any:
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            t = torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, dtype))
            return t.to(torch.float64).numpy()
        return x

    def candidate(*args: Any, **kwargs: Any) -> Any:
        args = tuple(rounded(a) for a in args)
        kwargs = {k: rounded(v) for k, v in kwargs.items()}
        return rounded(np.asarray(exact(*args, **kwargs), dtype=np.float64))

    return candidate


def _raises_on_empty(spec: str, what: str) -> Callable[..., Any]:
    exact = _variant(spec, {})

    def candidate(*args: Any, **kwargs: Any) -> Any:
        rows = np.asarray(kwargs["mask"]).sum(axis=1)
        if (rows.sum() == 0) if what == "batch" else (rows == 0).any():
            raise ValueError("response_mask must contain at least one valid token")
        return exact(*args, **kwargs)

    return candidate


def _garbage_at_padding(spec: str) -> Callable[..., Any]:
    exact = _variant(spec, {})

    def candidate(*args: Any, **kwargs: Any) -> Any:
        w = np.asarray(exact(*args, **kwargs), dtype=np.float64)
        mask = np.asarray(kwargs["mask"])
        if w.shape == mask.shape:
            return np.where(mask > 0, w, 0.5)
        # a sequence weight: the padding is the weight of an all-padding row
        empty = mask.sum(axis=1) == 0
        return np.where(empty.reshape(w.shape), 0.5, w)

    return candidate


def _ppo_clip(logp_prox: Any, logp_behavior: Any, *, cap: Any, mask: Any) -> Any:
    w = np.exp(np.minimum(logp_prox - logp_behavior, 700.0))
    w = w if cap is None else np.minimum(w, cap)
    return np.where(mask > 0, w, 0.0)


# (spec, key, value): the candidate, the conventions declared besides (baseline)
SPECIAL: dict[tuple[str, str, Any], tuple[Callable[[str], Callable[..., Any]], dict[str, Any]]] = {}
WEIGHTS = [s for s in spec_names() if any(c.key == "padding" for c in conventions(s))]
for _s in WEIGHTS:
    SPECIAL[(_s, "compute_dtype", "float32")] = (lambda s: _computes_in(s, "float32"), {})
    SPECIAL[(_s, "empty_rows", "excluded")] = (lambda s: _raises_on_empty(s, "rows"), {})
    SPECIAL[(_s, "empty_batch", "excluded")] = (lambda s: _raises_on_empty(s, "batch"), {})
    SPECIAL[(_s, "padding", "ignored")] = (_garbage_at_padding, {})
    if any(c.key == "clamp_at" for c in conventions(_s)):
        SPECIAL[(_s, "clamp_at", "token")] = (
            lambda s: _variant(s, {"log_ratio_clamp": 5.0, "clamp_at": "token"}),
            {"log_ratio_clamp": 5.0},
        )
SPECIAL[("decoupled_ppo", "above_cap", "clip")] = (lambda s: _ppo_clip, {})

# left out of the audit: values that no drawn input tells from the default (nothing to explain),
# and compute dtypes two steps coarser, which are not hinted by design (a failure carries no hint)
INDISTINGUISHABLE = {
    "nonfinite": "'error' draws no non-finite log-ratio, so a candidate mapping them to 1 passes",
    "compute_dtype:float16": "not hinted: only one step coarser than the candidate's dtype is",
    "compute_dtype:bfloat16": "not hinted: only one step coarser than the candidate's dtype is",
    "masked_is:weight:token": "at token level the token ratio is the filtered ratio",
}

NUMBERS = {"log_ratio_clamp": [20.0, 5.0], "lower": [0.5]}


def _cases() -> list[tuple[str, str, Any]]:
    out = []
    for spec in spec_names():
        for c in conventions(spec):
            values = [v for v in c.choices if v != c.default] + NUMBERS.get(c.key, [])
            out += [(spec, c.key, v) for v in values]
    return out


def _skipped(spec: str, key: str, value: Any) -> bool:
    return any(k in INDISTINGUISHABLE for k in (key, f"{key}:{value}", f"{spec}:{key}:{value}"))


# One case per mechanism of the hint (a choice, a guessed number, a recast signature, a coarser
# compute dtype, a raising candidate, a raise refimpl refuses too, a shape), on the cheapest spec
# that has it, and every key of the other specs: the full audit over every spec, key and value
# (``AUDIT``, 102 cases, all passing on 2026-12-01) takes ~10 minutes:
#   python -c 'import test_conformance_hints as T; print([c for c in T.AUDIT if T.audit(*c)])'
AUDIT = [c for c in _cases() if not _skipped(*c)]
CASES = [
    ("tis", "padding", "one"),
    ("tis", "padding", "ignored"),
    ("tis", "log_ratio_clamp", 5.0),
    ("tis", "lower", 0.5),
    ("tis", "inputs", "log_ratio"),
    ("tis", "layout", "packed"),
    ("tis", "compute_dtype", "float32"),
    ("tis", "empty_rows", "excluded"),  # its message names empty_batch too
    ("masked_is", "weight", "indicator"),
    ("tis_sequence", "output", "BT"),  # at T = 1 its message names B1 too
    ("tis_sequence", "padding", "ignored"),
    ("masked_is_geometric", "band_on", "reciprocal"),
    ("staleness", "staleness_count", "versions_spanned"),
    ("staleness_mask", "staleness_count", "versions_spanned"),
    ("effective_sample_size", "ess", "fraction"),
    ("masking_diagnostics", "ess", "fraction"),
    ("dapo_overlong", "floor", False),
    ("kimi_length_reward", "scope", "batch"),
]


def _named(report: Any, key: str, value: Any) -> list[str]:
    """The failed checks whose message names ``conventions={key: value}`` (for a numeric key,
    any number: one counterexample bounds a framework's constant, it cannot pin it)."""
    failed = [r for r in report.results if r.status in ("failed", "raised")]
    if isinstance(value, float):
        want = re.compile(rf"conventions=\{{{key!r}: [0-9.e+-]+\}}")
        return [r.name for r in failed if want.search(r.message)]
    return [r.name for r in failed if f"conventions={{{key!r}: {value!r}}}" in r.message]


def audit(spec: str, key: str, value: Any) -> str | None:
    """What is wrong with the hint for a candidate following ``{key: value}`` (None: nothing).

    The candidate must fail the defaults (searched with ``EXAMPLES``, then with Hypothesis's
    default 100 when that finds nothing: some variants differ only on inputs that ten draws
    rarely reach), a failure must name the convention, and declaring it must pass.
    """
    make, baseline = SPECIAL.get((spec, key, value), (lambda s: _variant(s, {key: value}), {}))
    candidate = make(spec)
    report = check_conformance(candidate, spec=spec, conventions=baseline, max_examples=EXAMPLES)
    if report.ok:
        report = check_conformance(candidate, spec=spec, conventions=baseline, max_examples=100)
    if report.ok:
        return f"a candidate with {key}={value!r} passed the defaults"
    if not _named(report, key, value):
        return f"no failure names conventions={{{key!r}: {value!r}}}:\n{report.summary()}"
    declared = check_conformance(
        candidate, spec=spec, conventions={**baseline, key: value}, max_examples=EXAMPLES
    )
    return None if declared.ok else f"declared, it still fails:\n{declared.summary()}"


@pytest.mark.parametrize(("spec", "key", "value"), CASES, ids=[f"{s}-{k}-{v}" for s, k, v in CASES])
def test_a_failure_names_the_convention_that_explains_it(spec: str, key: str, value: Any) -> None:
    problem = audit(spec, key, value)
    assert problem is None, problem


def test_the_indistinguishable_values_are_real_conventions() -> None:
    every = {(s, c.key, v) for s in spec_names() for c in conventions(s) for v in c.choices}
    assert all(any(key == k or key.startswith(f"{k}:") for _, k, _ in every)
               or key.count(":") == 2 for key in INDISTINGUISHABLE)  # fmt: skip


def test_the_cases_are_in_the_audit() -> None:
    assert set(CASES) <= set(AUDIT)


def _explain(spec: str, check: str, candidate: Callable[..., Any], calls: list[Any]) -> str:
    """The hint for a fixed counterexample (no search: the message does not depend on draws)."""
    the_spec = _SPECS[spec]
    runner = _Runner(
        candidate, the_spec, the_spec.check(check), ArrayBridge(None, None), the_spec.resolve({}),
        None,
    )  # fmt: skip
    assert runner.evaluate(calls) is not None, "the fixed counterexample does not fail"
    return runner.explain(calls)


def test_a_counterexample_that_two_conventions_explain_names_both() -> None:
    # one token at log-ratio 30 (band [0, 2]): a band on the reciprocal keeps it (μ/π = e^-30),
    # and so does a log-ratio clamp at 30, the constant read off the weight e^30
    candidate = _variant("masked_is_geometric", {"band_on": "reciprocal"})
    calls = [((np.array([[30.0]]), np.array([[0.0]])), {"low": 0.0, "high": 2.0,
                                                        "mask": np.array([[1.0]])})]  # fmt: skip
    hint = _explain("masked_is_geometric", "zero_outside_band", candidate, calls)
    assert hint == (
        "this counterexample passes under conventions={'log_ratio_clamp': 30.0} or "
        "conventions={'band_on': 'reciprocal'}: pass the one that your implementation intends"
    )


def test_a_candidate_raising_everywhere_is_not_told_it_follows_a_convention() -> None:
    # versions spanned refuses eta = 0, the smallest draw; a candidate that raises on every input
    # raises there too, but it also raises on what that convention draws: no hint
    def raises(s: Any, *, eta: Any) -> Any:
        raise RuntimeError("not implemented")

    report = check_conformance(raises, spec="staleness_mask", max_examples=EXAMPLES)
    assert [r.status for r in report.results] == ["raised"] * len(report.results)
    assert not any("conventions=" in r.message for r in report.results), report.summary()
    # the same raise from a candidate that counts versions spanned is explained
    spanned = _variant("staleness_mask", {"staleness_count": "versions_spanned"})
    calls = [((np.array([0, 1]),), {"eta": 0})]
    the_spec = _SPECS["staleness_mask"]
    runner = _Runner(spanned, the_spec, the_spec.checks[0], ArrayBridge(None, None),
                     the_spec.resolve({}), None)  # fmt: skip
    assert runner.explain(calls, raised=True) == (
        "refimpl refuses this input too under conventions={'staleness_count': "
        "'versions_spanned'}: pass it if that is what your implementation intends"
    )


@pytest.mark.parametrize("spec", ["tis", "tis_sequence", "masked_is_geometric"])
def test_padding_one_is_compared_at_padding(spec: str) -> None:
    # declared padding='one', a weight of 0.5 at padding (an all-padding row) must disagree; the
    # real tokens have ratio e^0.4, so only padding has weight 1
    exact = _variant(spec, {"padding": "one"})

    def half_at_padding(*args: Any, **kwargs: Any) -> Any:
        w = np.asarray(exact(*args, **kwargs), dtype=np.float64)
        return np.where(w == 1.0, 0.5, w)

    band = {"cap": 2.0} if spec.startswith("tis") else {"low": 0.5, "high": 2.0}
    calls = [((np.full((2, 2), 0.4), np.zeros((2, 2))),
              {**band, "mask": np.array([[1.0, 0.0], [0.0, 0.0]])})]  # fmt: skip
    with pytest.raises(ConformanceError, match="differ from the reference"):
        reproduce(half_at_padding, spec=spec, check="agrees_with_reference", calls=calls,
                  conventions={"padding": "one"})  # fmt: skip
