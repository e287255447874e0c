"""``refimpl lab --quick``: the files it writes, and its closed forms against its simulations.

One quick run (module-scoped) is shared by the tests; each test reads what that run wrote.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from refimpl.cli import main
from refimpl.lab.registry import SECTIONS, missing_names
from refimpl.lab.report import Check


class QuickRun:
    def __init__(self, out: Path, code: int) -> None:
        self.out = out
        self.code = code
        self.metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text())
        self.html = (out / "index.html").read_text()
        self.markdown = (out / "report.md").read_text()


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    out = tmp_path_factory.mktemp("lab") / "report"
    code = main(["lab", "--quick", "--seed", "0", "--out", str(out)])
    return QuickRun(out, code)


def test_quick_run_writes_every_file(quick: QuickRun) -> None:
    for name in ("index.html", "report.md", "metrics.json"):
        assert (quick.out / name).is_file(), name
    figures = [f for s in quick.metrics["sections"].values() for f in s["figures"]]
    assert len(figures) == len(set(figures))
    for f in figures:
        assert (quick.out / "figures" / f).stat().st_size > 1000, f
    assert sorted(p.name for p in (quick.out / "figures").glob("*.png")) == sorted(figures)


def test_index_html_references_only_files_that_exist(quick: QuickRun) -> None:
    refs = re.findall(r'(?:src|href)="([^"]+)"', quick.html)
    assert not [r for r in refs if re.match(r"[a-z]+://|//", r)], "no remote resource (no CDN)"
    local = [r for r in refs if not r.startswith("#")]
    for r in local:
        assert (quick.out / r).is_file(), r
    figures = {f for s in quick.metrics["sections"].values() for f in s["figures"]}
    assert {r.removeprefix("figures/") for r in local} == figures
    anchors = set(re.findall(r'id="([^"]+)"', quick.html))
    assert {r[1:] for r in refs if r.startswith("#")} <= anchors


def test_index_html_is_well_formed(quick: QuickRun) -> None:
    from html.parser import HTMLParser

    class Balance(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.open: list[str] = []
            self.errors: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag not in {"meta", "img", "br", "hr", "link"}:
                self.open.append(tag)

        def handle_endtag(self, tag: str) -> None:
            if self.open and self.open[-1] == tag:
                self.open.pop()
            else:
                self.errors.append(f"</{tag}> closes {self.open[-3:]}")

    parser = Balance()
    parser.feed(quick.html)
    assert parser.errors == []
    assert parser.open == []
    assert "<style>" in quick.html  # self-contained: the CSS is inline, nothing is fetched


def test_report_md_links_every_figure(quick: QuickRun) -> None:
    linked = set(re.findall(r"\]\(figures/([^)]+)\)", quick.markdown))
    figures = {f for s in quick.metrics["sections"].values() for f in s["figures"]}
    assert linked == figures


def test_every_section_is_present_and_available_iff_the_library_provides_it(
    quick: QuickRun,
) -> None:
    sections = quick.metrics["sections"]
    assert list(sections) == [s.key for s in SECTIONS]
    for spec in SECTIONS:
        s = sections[spec.key]
        missing = missing_names(spec.requires)
        assert s["available"] == (not missing), spec.key
        assert s["missing"] == missing
        if missing:
            assert not s["checks"]
            assert not s["metrics"]
            assert "Not available in this build" in quick.markdown


def test_closed_forms_agree_with_simulations(quick: QuickRun) -> None:
    checks = [c for s in quick.metrics["sections"].values() for c in s["checks"]]
    for c in checks:
        assert c["tolerance"] > 0, c
        assert abs(c["closed_form"] - c["simulation"]) <= c["tolerance"], c
        assert c["passed"] is True
    assert quick.metrics["meta"]["checks_agree"] == quick.metrics["meta"]["checks_total"]
    assert quick.code == 0


def test_check_rejects_a_closed_form_outside_its_tolerance() -> None:
    # The agreement rule itself can fail: a pair one tolerance and a bit apart disagrees.
    assert Check("x", "x", closed_form=1.0, simulation=1.05, tolerance=0.1, rule="r").passed
    assert not Check("x", "x", closed_form=1.0, simulation=1.11, tolerance=0.1, rule="r").passed


def test_metrics_json_is_strict_json(quick: QuickRun) -> None:
    text = (quick.out / "metrics.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


def _run_sections(out: Path, *keys: str, seed: int = 0) -> dict[str, Any]:
    args = ["lab", "--quick", "--seed", str(seed), "--out", str(out)]
    for k in keys:
        args += ["--only", k]
    main(args)
    metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    return metrics


def test_same_seed_gives_the_same_numbers(quick: QuickRun, tmp_path: Path) -> None:
    again = _run_sections(tmp_path, "effort")
    first = quick.metrics["sections"]["effort"]
    second = again["sections"]["effort"]
    assert second["metrics"] == first["metrics"]
    assert second["checks"] == first["checks"]


def test_a_missing_library_name_makes_the_section_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import refimpl.lab.registry as registry

    patched = tuple(
        s._replace(requires=(*s.requires, "refimpl.not_written_yet")) if s.key == "effort" else s
        for s in registry.SECTIONS
    )
    monkeypatch.setattr(registry, "SECTIONS", patched)
    metrics = _run_sections(tmp_path, "effort")
    effort = metrics["sections"]["effort"]
    assert effort["available"] is False
    assert effort["missing"] == ["refimpl.not_written_yet"]
    assert effort["checks"] == []
    assert effort["metrics"] == {}
    assert effort["figures"] == []
    html = (tmp_path / "index.html").read_text()
    assert "Not available in this build" in html
    assert "refimpl.not_written_yet" in html


def test_the_lab_flags_a_wrong_optimal_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wrong variant of L*(b) (10% too long) must make the lab's own checks disagree and exit 1.
    import refimpl

    right = refimpl.optimal_length

    def wrong(b: Any, **kw: float) -> Any:
        return 1.1 * right(b, **kw)

    monkeypatch.setattr(refimpl, "optimal_length", wrong)
    out = tmp_path / "wrong"
    code = main(["lab", "--quick", "--only", "effort", "--out", str(out)])
    checks = json.loads((out / "metrics.json").read_text())["sections"]["effort"]["checks"]
    failed = {c["name"] for c in checks if not c["passed"]}
    assert code == 1
    assert {c["name"] for c in checks if c["name"].startswith("L*-")} <= failed


def test_every_section_links_docs_pages_that_exist() -> None:
    root = Path(__file__).resolve().parent.parent
    for spec in SECTIONS:
        assert spec.docs, spec.key
        for link in spec.docs:
            folder, _, name = link.page.partition("/")
            if folder == "derivations":  # generated at build time from proofs/<name>.py
                assert (root / "proofs" / f"{name}.py").is_file(), link
            else:
                assert (root / "docs" / f"{link.page}.md").is_file(), link


@pytest.mark.parametrize(
    ("key", "pages"),
    [
        # The teaching page and the derivations behind each section's closed forms (issue 7: "follow
        # every section to the docs page that explains it"); the length-bias page and its
        # derivations were missing from the sections that use them.
        ("length-bias", {"concepts/length-bias", "derivations/length_bias", "derivations/fluid"}),
        ("staleness", {"concepts/length-bias", "derivations/fluid", "derivations/importance"}),
        ("async-worth", {"concepts/length-bias", "derivations/order_statistics"}),
    ],
)
def test_each_section_links_the_pages_that_derive_its_closed_forms(
    key: str, pages: set[str]
) -> None:
    (spec,) = [s for s in SECTIONS if s.key == key]
    linked = {link.page for link in spec.docs}
    assert pages <= linked, f"{key} does not link {sorted(pages - linked)}"


def test_the_lab_flags_an_off_by_one_keep_probability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wrong variant of the fluid keep probability (η counted one too high) must make the
    # debugging section's kept-fraction checks disagree with the simulated masks.
    import refimpl

    right = refimpl.fluid_keep_probability

    def wrong(lengths: Any, *, step_time: float, eta: int) -> Any:
        return right(lengths, step_time=step_time, eta=eta + 1)

    monkeypatch.setattr(refimpl, "fluid_keep_probability", wrong)
    out = tmp_path / "wrong"
    code = main(["lab", "--quick", "--only", "debugging", "--out", str(out)])
    checks = json.loads((out / "metrics.json").read_text())["sections"]["debugging"]["checks"]
    assert code == 1
    assert {c["name"] for c in checks if not c["passed"]} >= {"kept-eta0", "kept-eta1"}


def test_paired_closed_forms_are_the_library_values(quick: QuickRun) -> None:
    # The closed forms in the report are recomputed here from the library, independently of the
    # lab's code, so a lab that paired a simulation with the wrong closed form would fail.
    import refimpl
    from refimpl.lab import length_bias as lb
    from refimpl.lab._common import discretized_lognormal, lognormal

    sections = quick.metrics["sections"]
    if sections["length-bias"]["available"]:
        checks = {c["name"]: c for c in sections["length-bias"]["checks"]}
        for sigma in lb.TAILS.values():
            pmf = discretized_lognormal(median=lb.MEDIAN, sigma=sigma, max_length=lb.MAX_LENGTH)
            for k in lb.KS:
                bias = refimpl.length_bias(pmf, n=lb.N_LAUNCH, k=k)
                got = checks[f"first-k-mean-s{sigma:g}-k{k}"]["closed_form"]
                assert got == pytest.approx(float(bias.selected_mean), rel=1e-12)
        dist = lognormal(median=lb.MEDIAN, sigma=1.0)
        ratio = refimpl.length_bias(dist, n=8, k=4).ratio
        assert checks["tail-ratio-n8-k4-s1"]["closed_form"] == pytest.approx(ratio, rel=1e-12)
    if sections["effort"]["available"]:
        from refimpl.lab.effort import PROBLEM

        for row in sections["effort"]["metrics"]["effort-table"]:
            b = row["b"]
            assert row["L*(b)"] == pytest.approx(float(refimpl.optimal_length(b, **PROBLEM)))
            assert row["Q(L*(b))"] == pytest.approx(
                float(refimpl.effort_frontier(b, **PROBLEM).quality)
            )
    if sections["staleness"]["available"]:
        from refimpl.lab.staleness_masking import _law

        setting = sections["staleness"]["metrics"]["setting"]
        checks = {c["name"]: c for c in sections["staleness"]["checks"]}
        fl = refimpl.fluid_steady_state(
            _law(), slots=setting["slots"], batch=setting["batch"], eta=0
        )
        assert checks["trained-mean-eta0"]["closed_form"] == pytest.approx(fl.trained_mean_length)
        assert checks["kept-fraction-eta0"]["closed_form"] == pytest.approx(fl.kept_fraction)


def test_bad_arguments_are_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["lab", "--seed", "-1", "--out", str(tmp_path / "a")])
    assert exc.value.code == 2
    assert "seed must be >= 0; got seed=-1" in capsys.readouterr().err
    assert main(["lab", "--only", "nope", "--out", str(tmp_path / "b")]) == 2
    assert "unknown section nope; choose among" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # nothing written for a refused call


def test_an_unusable_out_directory_is_refused_before_the_run_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --out naming an existing file: refused up front with exit 2 and a message naming --out, the
    # rule and the path (was: a NotADirectoryError traceback, exit 1).
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    assert main(["lab", "--quick", "--out", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert "--out must be a writable directory" in err
    assert str(a_file) in err
    assert "Traceback" not in err
    # --out below a file: same, nothing created.
    assert main(["lab", "--quick", "--out", str(a_file / "sub")]) == 2
    assert "--out must be a writable directory" in capsys.readouterr().err
    assert a_file.read_text() == "not a directory"


def test_report_md_tables_have_one_cell_per_column(quick: QuickRun) -> None:
    # An unescaped "|" inside a cell (e.g. E[ℓ|b]) would shift every later column.
    def cells(line: str) -> int:
        return len(re.split(r"(?<!\\)\|", line.strip())) - 2

    lines = quick.markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            width = cells(lines[i - 1])
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                assert cells(lines[j]) == width, lines[j]
                j += 1


def test_each_section_requires_exactly_the_library_names_it_calls() -> None:
    # The "not available in this build" switch is only honest if `requires` matches the code.
    root = Path(__file__).resolve().parent.parent
    for spec in SECTIONS:
        path = root / (spec.module.replace(".", "/") + ".py")
        code = re.sub(r'""".*?"""', "", path.read_text(), flags=re.S)
        used = {f"refimpl.{n}" for n in re.findall(r"\brefimpl\.([a-z_][a-z_0-9]*)\(", code)}
        used |= {f"refimpl.sim.{n}" for n in re.findall(r"\brsim\.([A-Za-z_]\w*)\b", code)}
        assert set(spec.requires) == used, spec.key
