"""``pytest --refimpl-framework NAME``: the shipped adapters of a framework as pytest items, run on
its installed code as the conformance matrix runs them (in-process pytester: the frameworks stay
imported once per worker)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from refimpl.frameworks import (
    Adapter,
    Divergence,
    _trl,
    _trl_losses,
    _verl,
    _verl_losses,
    adapter,
    adapters,
)
from refimpl.frameworks._matrix import MATRIX_PATH, load_matrix
from refimpl.losses.partition import ScalingRule

pytest_plugins = ["pytester"]

_MATRIX = (
    Path(__file__).resolve().parents[1] / MATRIX_PATH
)  # pytester runs in a temporary directory


def _committed(framework: str, key_part: str = "") -> tuple[int, int]:
    """(passed, diverging) checks of ``framework``'s adapters in the committed matrix."""
    entries = [
        e
        for e in load_matrix(_MATRIX)["entries"]
        if e["framework"] == framework and key_part in e["key"]
    ]
    passed = sum(s == "passed" for e in entries for s in e["checks"].values())
    return passed, sum(len(e["divergences"]) for e in entries)


def test_the_option_runs_the_adapters_on_the_installed_framework(pytester: pytest.Pytester) -> None:
    # every TRL adapter and applicable check is collected, as many items as the matrix has checks
    result = pytester.runpytest(
        "--refimpl-framework=trl", "--refimpl-only", "-p", "no:cacheprovider", "--collect-only", "-q"
    )  # fmt: skip
    collected = [line for line in result.stdout.lines if line.startswith("refimpl::trl.")]
    entries = [e for e in load_matrix(_MATRIX)["entries"] if e["framework"] == "trl"]
    checks = sum(s != "skipped" for e in entries for s in e["checks"].values())
    partitions = sum(e.get("partition") is not None for e in entries)
    assert partitions > 0
    assert len(collected) == checks + partitions
    assert sum(line.endswith("::partition") for line in collected) == partitions
    # and one adapter's run is the matrix's (the stage runs the whole matrix once, in test_matrix)
    result = pytester.runpytest(
        "--refimpl-framework=trl", "--refimpl-only", "-p", "no:cacheprovider",
        "-k", "async_max_staleness",
    )  # fmt: skip
    passed, diverging = _committed("trl", "async_max_staleness")
    assert (passed, diverging) == (6, 0)
    result.assert_outcomes(passed=passed, deselected=len(collected) - passed)
    result.stdout.fnmatch_lines(["refimpl frameworks: trl 1.16.0"])


def test_a_recorded_divergence_is_an_expected_failure(pytester: pytest.Pytester) -> None:
    # verl's ESS metric: every check diverges (the 1e-8 in its normaliser), as the matrix records
    recorder = pytester.inline_run(
        "--refimpl-framework=verl", "--refimpl-only", "-k", "rollout_is_ess", "-p", "no:cacheprovider"
    )  # fmt: skip
    passed, diverging = _committed("verl", "rollout_is_ess")
    assert (passed, diverging) == (0, 4)
    calls = [r for r in recorder.getreports("pytest_runtest_logreport") if r.when == "call"]
    assert len(calls) == diverging
    for report in calls:
        assert report.skipped, report.nodeid  # xfail
        assert "numerical limit: verl normalises" in getattr(report, "wasxfail", ""), report.nodeid


def trl_mask_counting_one_more(s: Any, *, eta: int) -> Any:
    """A wrong adapter: it declares TRL's max_staleness one larger than refimpl's η."""
    from refimpl.frameworks._trl import trl_rollout_queue_mask

    return trl_rollout_queue_mask(s, eta=int(eta) + 1)


def test_a_wrong_adapter_and_a_stale_divergence_fail(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    staleness, overlong = adapters("trl")[:2]
    assert (staleness.spec, overlong.spec) == ("staleness_mask", "dapo_overlong")
    wrong = Adapter(
        key="trl.planted_off_by_one",
        framework="trl",
        function=staleness.function,
        settings={"max_staleness": "eta + 1"},
        spec="staleness_mask",
        conventions={},
        candidate=trl_mask_counting_one_more,
    )
    stale = Adapter(
        **{
            **{f: getattr(overlong, f) for f in Adapter.__dataclass_fields__},
            "key": "trl.planted_stale_divergence",
            "divergences": {"agrees_with_reference": Divergence("defect", "planted")},
        }
    )
    monkeypatch.setattr(_trl, "ADAPTERS", (wrong, stale))
    monkeypatch.setattr(_trl_losses, "ADAPTERS", ())
    result = pytester.runpytest(
        "--refimpl-framework=trl", "--refimpl-only", "-p", "no:cacheprovider", "-rf"
    )
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 3, result.stdout.str()[
        -3000:
    ]  # the two the bound fails, one stale
    result.stdout.fnmatch_lines(
        [
            "FAILED refimpl::trl.planted_off_by_one::agrees_with_reference*",
            "FAILED refimpl::trl.planted_off_by_one::drops_beyond_bound*",
            "FAILED refimpl::trl.planted_stale_divergence::agrees_with_reference*",
        ]
    )
    out = result.stdout.str()
    assert "reproduction:" in out
    assert "agrees_with_reference passes, but the adapter records it as a divergence" in out


def test_an_unknown_framework_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--refimpl-framework=nosuch", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--refimpl-framework must name a framework*verl, trl*"])


def test_a_wrong_scaling_rule_and_a_stale_partition_divergence_fail(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = adapter("verl.agg_loss_token_mean")
    committed = next(e for e in load_matrix(_MATRIX)["entries"] if e["key"] == base.key)
    assert committed["partition"]["verdict"] == "invariant"
    assert base.partition is not None
    fields = {f: getattr(base, f) for f in Adapter.__dataclass_fields__}
    wrong_rule = ScalingRule("local", "sum", "sum", False, "planted")
    wrong = Adapter(
        **{
            **fields,
            "key": "verl.planted_wrong_rule",
            "partition": dataclasses.replace(base.partition, rule=wrong_rule),
        }
    )
    stale = Adapter(
        **{
            **fields,
            "key": "verl.planted_stale_split",
            "partition": dataclasses.replace(
                base.partition, divergences={"gradient": Divergence("defect", "planted")}
            ),
        }
    )
    monkeypatch.setattr(_verl, "ADAPTERS", ())
    monkeypatch.setattr(_verl_losses, "ADAPTERS", (wrong, stale))
    result = pytester.runpytest(
        "--refimpl-framework=verl", "--refimpl-only", "-p", "no:cacheprovider", "-rf",
        "-k", "partition",
    )  # fmt: skip
    result.assert_outcomes(failed=2, deselected=result.parseoutcomes().get("deselected", 0))
    out = result.stdout.str()
    assert "refimpl partition invariance of" in out  # the wrong rule's report
    assert "pass, but the adapter records them as divergences" in out
