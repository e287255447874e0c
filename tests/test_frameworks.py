"""refimpl.frameworks without the frameworks: the statements' arithmetic, the matrix tooling and the
committed docs/conformance-matrix.json. The checks against the installed frameworks themselves are
in tests_frameworks/ (the framework stage of CI)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from refimpl.cli import main
from refimpl.frameworks import (
    STUBS,
    TESTED_VERSIONS,
    adapter,
    adapters,
    framework_staleness_bound,
    load_function,
    rejection_sampling_to_refimpl,
    verl_off_policy_bound,
)
from refimpl.frameworks._matrix import (
    CHECK_EXAMPLES,
    MATRIX_EXAMPLES,
    MATRIX_PATH,
    SCHEMA,
    adapter_lines,
    changes,
    level_of,
    load_matrix,
    render_markdown,
    verdict_of,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    return load_matrix(ROOT / MATRIX_PATH)


def test_verl_max_off_policy_threshold_is_one_more_than_eta() -> None:
    for threshold in range(1, 10):
        assert verl_off_policy_bound(max_off_policy_threshold=threshold).eta == threshold - 1
    via = framework_staleness_bound(framework="verl", value=3, setting="max_off_policy_threshold")
    assert via == verl_off_policy_bound(max_off_policy_threshold=3)
    assert framework_staleness_bound(framework="verl", value=0.5).setting == "staleness_threshold"


def test_an_unknown_setting_is_refused_with_the_settings_named() -> None:
    with pytest.raises(ValueError, match="max_off_policy_threshold"):
        framework_staleness_bound(framework="verl", value=1, setting="max_staleness")
    with pytest.raises(ValueError, match="max_head_offpolicyness"):
        framework_staleness_bound(framework="areal", value=1, setting="max_staleness")


def test_areal_kl_metrics_have_no_refimpl_spec() -> None:
    with pytest.raises(ValueError, match="metric='ratio'"):
        rejection_sampling_to_refimpl(metric="kl_k3")
    assert rejection_sampling_to_refimpl(action="clamp", lower=0.5)[2]["lower"] == 0.5


def test_adapter_keys_are_unique_and_name_their_framework() -> None:
    keys = [a.key for a in adapters()]
    assert len(keys) == len(set(keys))
    for a in adapters():
        assert a.framework in TESTED_VERSIONS
        assert a.key.startswith(f"{a.framework}.")
        assert a.function.split(".")[0] == TESTED_VERSIONS[a.framework][0].replace("-", "_")
    with pytest.raises(ValueError, match="shipped adapter"):
        adapter("verl.nope")


def test_a_reproduction_setup_defines_the_candidate() -> None:
    setup = adapter("verl.rollout_is_token_tis").setup
    namespace: dict[str, Any] = {}
    exec(
        compile(setup, "<setup>", "exec"), namespace
    )  # defines it; the framework is imported on call
    assert namespace["candidate"].__name__ == "verl_token_tis"
    assert "install_stubs()" in adapter("skyrl.tis_token").setup
    assert "install_stubs()" in adapter("openrlhf.kl_k3").setup
    assert "install_stubs()" not in adapter("verl.rollout_is_token_tis").setup
    assert {s.framework for s in STUBS} == {"skyrl", "areal", "openrlhf"}


# --- the committed matrix ----------------------------------------------------------------------


def test_the_matrix_covers_every_adapter_at_the_tested_versions(committed: dict[str, Any]) -> None:
    assert sorted(e["key"] for e in committed["entries"]) == sorted(a.key for a in adapters())
    assert committed["versions"] == {k: v for k, (_, v) in TESTED_VERSIONS.items()}
    for e in committed["entries"]:
        a = adapter(e["key"])
        assert (e["function"], e["spec"], e["conventions"]) == (
            a.function,
            a.spec,
            json.loads(json.dumps(a.conventions)),
        )


def test_the_matrix_covers_five_frameworks_and_ninety_entries(committed: dict[str, Any]) -> None:
    assert committed["schema"] == SCHEMA
    entries = committed["entries"]
    assert len(entries) >= 90
    assert len({e["framework"] for e in entries}) >= 5
    assert len({e["function"] for e in entries}) >= 40
    loss = [e for e in entries if e["level"] == "loss"]
    assert {e["framework"] for e in loss} == set(TESTED_VERSIONS)
    for e in entries:
        assert e["level"] == level_of(e["spec"])
        assert e["adapter_lines"] == adapter_lines(adapter(e["key"]).candidate), e["key"]


#: Aggregation adapters without a partition, and why: each is a variant whose scaling path is
#: checked through another adapter of the same function.
NO_SCALING_PATH = {
    # H is the micro-batch's padded width, which the partition driver does not vary; the same
    # agg_loss with loss_scale_factor = H has its partition (verl.agg_loss_seq_mean_token_sum_norm)
    "verl.agg_loss_seq_mean_token_sum_norm_default",
    # aggregate_loss without counts, the fallback the trainer never takes; its trainer path is
    # openrlhf.aggregate_loss_token_level's partition
    "openrlhf.masked_mean",
    # verl's torch_functional.masked_mean reduces metrics and correction statistics; the actor's loss
    # is reduced by agg_loss, whose modes have their partitions
    "verl.masked_mean",
}


def test_every_aggregation_has_a_partition_verdict_on_its_scaling_path(
    committed: dict[str, Any],
) -> None:
    for e in committed["entries"]:
        a = adapter(e["key"])
        if e["spec"] == "aggregation" and e["key"] not in NO_SCALING_PATH:
            assert a.partition is not None, f"{e['key']}: an aggregation without its scaling path"
        p = e["partition"]
        if a.partition is None:
            assert p is None
            assert e["verdicts"]["partition"] == "not applicable"
            continue
        assert (p["mode"], p["trainer"]) == (a.partition.mode, a.partition.trainer), e["key"]
        assert {d["check"] for d in p["divergences"]} == {
            f"partition.{name}" for name in a.partition.divergences
        }, e["key"]
        if p["divergences"]:
            assert p["verdict"].startswith("divergence"), e["key"]
        elif p["intent"] == "split" and p["workload_gap"]:
            assert p["verdict"].startswith("depends on the split"), e["key"]
        else:  # a split rule can be invariant on the stated workload (SkyRL's even ranks)
            assert (p["verdict"], p["workload_gap"] < 1e-6) == ("invariant", True), e["key"]
        assert e["verdicts"]["partition"] == p["verdict"]


def test_the_value_and_gradient_verdicts_are_read_from_the_checks(
    committed: dict[str, Any],
) -> None:
    for e in committed["entries"]:
        for part, picks in (("value", False), ("gradient", True)):
            names = [c for c in e["checks"] if ("gradient" in c) == picks]
            kinds = sorted(
                {
                    d["classification"]
                    for d in e["divergences"]
                    if ("gradient" in d["check"]) == picks
                }
            )
            want = (
                "no check"
                if not names
                else (f"divergence ({', '.join(kinds)})" if kinds else "pass")
            )
            assert e["verdicts"][part] == want, (e["key"], part)
        if e["level"] == "loss" and "gradient" in e["checks"]:
            assert e["verdicts"]["gradient"] != "no check"


def test_every_defect_carries_a_draft_report_for_upstream(committed: dict[str, Any]) -> None:
    page = render_markdown(committed)
    for e in committed["entries"]:
        for d in [*e["divergences"], *((e["partition"] or {}).get("divergences", []))]:
            if d["classification"] == "defect":
                assert len(d["draft_report"]) > 80, (e["key"], d["check"])
                assert d["draft_report"].strip() in page


def test_one_draft_report_per_defect_links_every_adapter_that_meets_it(
    committed: dict[str, Any],
) -> None:
    """A defect that many settings of one loss run into (AReaL's padding line, 14 adapters) is one
    report with 14 links, not 14 reports under one heading; every heading is distinct."""
    section = render_markdown(committed).split("## Draft reports for upstream")[1]
    section = section.split("\n## ")[0]
    reports = section.split("\n### ")[1:]
    headings = [r.splitlines()[0] for r in reports]
    assert len(headings) == len(set(headings))
    met: dict[str, set[str]] = {}
    for e in committed["entries"]:
        for d in [*e["divergences"], *((e["partition"] or {}).get("divergences", []))]:
            if d["classification"] == "defect":
                met.setdefault(d["draft_report"].strip(), set()).add(e["key"])
    assert len(reports) == len(met)
    for report in reports:
        body = report.split("\n\n", 1)[1]
        text = next(t for t in met if body.startswith(t))
        links = body.rsplit("\n\nReproduction", 1)[1]
        assert {k for k in met[text] if f"[{k}](#" in links} == met[text]
    assert max(len(keys) for keys in met.values()) > 1  # the grouping is exercised


def test_every_divergence_is_classified_and_every_declared_one_occurs(
    committed: dict[str, Any],
) -> None:
    for e in committed["entries"]:
        seen = {d["check"] for d in e["divergences"]}
        assert seen == set(adapter(e["key"]).divergences), e["key"]
        for d in e["divergences"]:
            assert d["classification"] in ("convention", "numerical limit", "defect"), d
            assert d["explanation"], d
            assert d["counterexample"], d
            assert d["reproduction"], d
        every = [*e["divergences"], *((e["partition"] or {}).get("divergences", []))]
        assert e["verdict"] == verdict_of(e["spec"], e["conventions"], every)


def test_changes_finds_each_kind_of_difference(committed: dict[str, Any]) -> None:
    assert changes(committed, committed) == []
    fresh = copy.deepcopy(committed)
    entry = fresh["entries"][0]
    entry["verdict"] = "something else"
    first_check = next(iter(entry["checks"]))
    entry["checks"][first_check] = "failed"
    fresh["versions"][entry["framework"]] = "99"
    gone = fresh["entries"].pop()
    found = changes(fresh, committed)
    assert f"{entry['framework']}: version" in found[0]
    assert any("verdict" in line and entry["key"] in line for line in found)
    assert any(f"'{first_check}'" in line for line in found)
    assert any(gone["key"] in line and "not in the fresh run" in line for line in found)
    diverging = copy.deepcopy(committed)
    target = next(e for e in diverging["entries"] if e["divergences"])
    target["divergences"][0]["counterexample"] += "# changed"
    assert changes(diverging, committed) == [
        f"{target['key']}: divergence {target['divergences'][0]['check']}: counterexample changed"
    ]


def test_changes_compares_only_the_frameworks_rerun(committed: dict[str, Any]) -> None:
    fresh = copy.deepcopy(committed)
    fresh["versions"] = {"trl": committed["versions"]["trl"]}
    fresh["entries"] = [e for e in committed["entries"] if e["framework"] == "trl"]
    assert changes(fresh, committed) == []


def test_the_page_shows_every_entry_and_every_reproduction(committed: dict[str, Any]) -> None:
    page = render_markdown(committed)
    for e in committed["entries"]:
        assert f"`{e['key']}`" in page
        for d in [*e["divergences"], *((e["partition"] or {}).get("divergences", []))]:
            assert d["reproduction"].rstrip() in page
            assert f"classified **{d['classification']}**" in page
    sizes = [adapter_lines(a.candidate) for a in adapters()]
    sizes += [adapter_lines(a.partition.candidate) for a in adapters() if a.partition]
    assert f"An adapter is **{sum(sizes) / len(sizes):.1f} lines** of code on average" in page
    assert f"over {len(sizes)} candidates; the longest has {max(sizes)})" in page


def test_changes_finds_a_partition_verdict_that_moved(committed: dict[str, Any]) -> None:
    fresh = copy.deepcopy(committed)
    target = next(e for e in fresh["entries"] if e["partition"])
    target["partition"]["verdict"] = "something else"
    assert changes(fresh, committed) == [
        f"{target['key']}: partition verdict {committed_verdict(committed, target['key'])!r} "
        "-> 'something else'"
    ]


def committed_verdict(committed: dict[str, Any], key: str) -> str:
    entry = next(e for e in committed["entries"] if e["key"] == key)
    verdict: str = entry["partition"]["verdict"]
    return verdict


def test_conformance_refuses_a_bad_example_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--max-examples", "0"]) == 2  # a bad option: a usage error
    assert "--max-examples must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], MATRIX_EXAMPLES),
        (["--write"], MATRIX_EXAMPLES),
        (["--check", "--write"], MATRIX_EXAMPLES),  # a written matrix is always searched in full
        (["--check"], CHECK_EXAMPLES),  # CI's rerun: every committed divergence is replayed first
        (["--check", "--max-examples", "7"], 7),
    ],
)
def test_the_examples_per_check_default_to_fewer_only_for_cis_rerun(
    flags: list[str], expected: int
) -> None:
    import argparse

    from refimpl.frameworks.cli import _default_examples, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(flags)
    got = _default_examples(args) if args.max_examples is None else args.max_examples
    assert got == expected
    assert CHECK_EXAMPLES < MATRIX_EXAMPLES


def test_conformance_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    import refimpl.frameworks._registry as registry

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "torch" else real(name, *a),
    )
    monkeypatch.setattr(registry, "installed_version", lambda name: None)
    assert main(["conformance", "--framework", "verl"]) == 1
    assert "pip install verl==0.9.1" in capsys.readouterr().err
    assert main(["conformance"]) == 1
    assert "none of the frameworks is installed" in capsys.readouterr().err


def test_the_verl_adapters_name_every_check_of_their_specs() -> None:
    from refimpl.frameworks import _verl
    from refimpl.testing import check_names

    for spec, names in _verl.SPEC_CHECKS.items():
        assert names == check_names(spec), spec


def test_a_framework_s_import_time_warnings_do_not_stop_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verl imports ray, which warns of a deprecation while it loads; a test session that turns
    # warnings into errors (this suite does) must still get verl's function.
    (tmp_path / "noisy_framework.py").write_text(
        "import warnings\n"
        "warnings.warn('an import-time deprecation of a dependency', DeprecationWarning)\n"
        "def weight(x):\n"
        "    return 2 * x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "noisy_framework", raising=False)
    assert load_function("noisy_framework:weight")(3) == 6
