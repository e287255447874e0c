"""``refimpl lab --quick``: the files it writes, and its closed forms against its simulations.

One quick run (module-scoped) is shared by the tests; each test reads what that run wrote.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from _wrong_variants import rejects
from conftest import QuickLab

import refimpl
from refimpl.cli import main
from refimpl.lab._html import inline as _inline
from refimpl.lab.registry import SECTIONS, missing_names
from refimpl.lab.report import (
    NOISE_BOUND,
    Check,
    Section,
    fmt,
    nonnegative,
    write_html,
    write_markdown,
    write_metrics,
)


class DrawnFigure(NamedTuple):
    """What a test needs to know about a figure the lab drew (collected as it is saved)."""

    file: str
    width_in: float
    font_sizes: tuple[float, ...]
    axis_labels: tuple[str, ...]
    titles: tuple[str, ...]


class QuickRun:
    def __init__(self, out: Path, code: int, drawn: list[DrawnFigure]) -> None:
        self.out = out
        self.code = code
        self.drawn = drawn
        self.metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text())
        # the page as written, and as a reader's text (<wbr> marks where a long name may wrap)
        self.raw_html = (out / "index.html").read_text()
        self.html = self.raw_html.replace("<wbr>", "")
        self.markdown = (out / "report.md").read_text()


def _recording(drawn: list[DrawnFigure]) -> Any:
    """A ``Section.figure`` that also records the font sizes and axis labels of each figure."""
    from matplotlib.text import Text

    save = Section.figure

    def figure(self: Section, fig: Any, name: str, caption: str) -> None:
        sizes = tuple(
            float(t.get_fontsize())
            for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip()
        )
        labels = tuple(
            label for ax in fig.axes for label in (ax.get_xlabel(), ax.get_ylabel()) if label
        )
        titles = tuple(ax.get_title() for ax in fig.axes)
        width = float(fig.get_size_inches()[0])
        drawn.append(DrawnFigure(f"{self.key}-{name}.png", width, sizes, labels, titles))
        save(self, fig, name, caption)

    return figure


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    out = tmp_path_factory.mktemp("lab") / "report"
    drawn: list[DrawnFigure] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Section, "figure", _recording(drawn))
        code = main(["lab", "--quick", "--seed", "0", "--out", str(out)])
    return QuickRun(out, code, drawn)


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
    docs_url = quick.metrics["meta"]["docs_url"]
    docs = [r for r in refs if docs_url is not None and r.startswith(docs_url + "/")]
    local = [r for r in refs if not r.startswith("#") and r not in docs]
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
    html = (tmp_path / "index.html").read_text().replace("<wbr>", "")  # as read
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


def test_the_help_of_only_names_every_section_key(capsys: pytest.CaptureFixture[str]) -> None:
    # The keys were once typed into the help by hand, and "learning" was missing from them.
    from refimpl.lab.registry import SECTIONS

    with pytest.raises(SystemExit):
        main(["lab", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    listed = text.split("keys: ", 1)[1].split(" --docs-url", 1)[0]
    assert listed.split(", ") == [s.key for s in SECTIONS]


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
    # --out below a file: refused naming --out and the cause, nothing created.
    assert main(["lab", "--quick", "--out", str(a_file / "sub")]) == 2
    err = capsys.readouterr().err
    assert "cannot use --out" in err
    assert "a component of the path is not a directory" in err
    assert a_file.read_text() == "not a directory"
    # --out in a directory that does not exist: refused, and no parent directories are created
    # (as check --report, simulate --trace and sweep --out refuse a missing directory).
    deep = tmp_path / "missing" / "report"
    assert main(["lab", "--quick", "--out", str(deep)]) == 2
    err = capsys.readouterr().err
    assert f"the directory {str(deep.parent)!r} it would be created in does not exist" in err
    assert not (tmp_path / "missing").exists()


def test_an_out_that_would_overwrite_what_the_lab_reads_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the documentation build that the report links to: its own index.html would be replaced
    docs = tmp_path / "html"
    docs.mkdir()
    (docs / "index.html").write_text("the docs")
    assert (
        main(["lab", "--quick", "--only", "debugging", "--out", str(docs), "--docs-url", "."]) == 2
    )
    err = capsys.readouterr().err
    assert "--out must not name an input" in err
    assert str(docs) in err
    assert (docs / "index.html").read_text() == "the docs"
    assert sorted(p.name for p in docs.iterdir()) == ["index.html"]
    # the installed package (its code and data)
    inside = Path(refimpl.__file__).resolve().parent / "lab" / "a-report"
    assert main(["lab", "--quick", "--only", "debugging", "--out", str(inside)]) == 2
    assert "--out must not name an input" in capsys.readouterr().err
    assert not inside.exists()


def test_a_failed_write_leaves_the_previous_report_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's files are replaced atomically: a write that fails (here: the disk refuses to
    flush) leaves the previous file as it was, and no temporary file behind."""
    old = tmp_path / "metrics.json"
    old.write_text("the previous run")

    def refuse(fd: int) -> None:
        raise OSError(errno.EIO, "input/output error")

    monkeypatch.setattr(os, "fsync", refuse)  # refimpl._io flushes through os.fsync
    meta = {"title": "t", "summary": "s", "settings": {}, "footer": "f"}
    for write in (write_metrics, write_markdown, write_html):
        target = tmp_path / f"{write.__name__}.out"
        target.write_text("the previous run")
        with pytest.raises(OSError, match="input/output error"):
            write(target, [], meta)
        assert target.read_text() == "the previous run", write.__name__
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            "metrics.json",
            *(f"{w.__name__}.out" for w in (write_metrics, write_markdown, write_html)),
        ]
    )


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
    shared = {"_common", "_html", "_plot", "config", "registry", "report"}
    sections = {s.module.removeprefix("refimpl.lab.") for s in SECTIONS}

    def source(module: str, seen: set[str]) -> str:
        """The module's code and that of the section's own helper modules it imports."""
        seen.add(module)
        code = (root / "refimpl" / "lab" / f"{module}.py").read_text()
        for helper in re.findall(r"^from refimpl\.lab\.(\w+) import", code, flags=re.M):
            if helper not in shared | sections | seen:
                code += source(helper, seen)
        return code

    for spec in SECTIONS:
        code = re.sub(
            r'""".*?"""', "", source(spec.module.removeprefix("refimpl.lab."), set()), flags=re.S
        )
        used = {f"refimpl.{n}" for n in re.findall(r"\brefimpl\.([a-z_][a-z_0-9]*)\(", code)}
        used |= {f"refimpl.sim.{n}" for n in re.findall(r"\brsim\.([A-Za-z_]\w*)\b", code)}
        used |= {f"refimpl.learning.{n}" for n in re.findall(r"\blrn\.([a-z_]\w*)\(", code)}
        used |= {f"refimpl.learning_async.{n}" for n in re.findall(r"\bla\.([a-z_]\w*)\(", code)}
        # a section that calls another section's module needs what that one needs
        for other in re.findall(r"from refimpl\.lab import (\w+)", code):
            used |= set(next(s for s in SECTIONS if s.module == f"refimpl.lab.{other}").requires)
        assert set(spec.requires) == used, spec.key


# -- the report as people read it ------------------------------------------------------------------
class _Cells(HTMLParser):
    """Every table cell of an HTML page, and each table's parent element."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.table_parents: list[str] = []
        self._stack: list[tuple[str, str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"meta", "img", "br", "hr", "link"}:
            return
        cls = dict(attrs).get("class") or ""
        if tag == "table":
            parent = self._stack[-1] if self._stack else ("", "")
            self.table_parents.append(f"{parent[0]}.{parent[1]}")
        if tag in {"td", "th"}:
            self._cell = []
        self._stack.append((tag, cls))

    def handle_endtag(self, tag: str) -> None:
        if tag in {"td", "th"} and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None
        if self._stack:
            self._stack.pop()

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _cells(page: str) -> _Cells:
    parser = _Cells()
    parser.feed(page)
    return parser


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.1e-16, -2.16e-16, -8.53e-14, 1.14e-13, 9.99e-13, -9.99e-13, 5e-324],
)
def test_fmt_shows_rounding_noise_as_zero(value: float) -> None:
    # The unfixed formatter printed "-2.16e-16" for a KL divergence that is 0.
    assert fmt(value) == "0"
    assert fmt(value, 4) == "0"


@pytest.mark.parametrize("exponent", range(-12, 9))
@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("mantissa", [1.0, 1.2345, 9.99])
def test_fmt_shows_every_value_above_the_noise_bound(
    exponent: int, sign: float, mantissa: float
) -> None:
    value = sign * mantissa * 10.0**exponent
    assert abs(value) >= NOISE_BOUND
    text = fmt(value)
    shown = float(text)
    assert shown != 0.0, (value, text)
    assert math.copysign(1.0, shown) == sign
    assert shown == pytest.approx(value, rel=6e-3), (value, text)


def test_nonnegative_clamps_rounding_but_refuses_a_real_negative() -> None:
    assert nonnegative(-2.16e-16, name="KL") == 0.0
    assert nonnegative(-NOISE_BOUND, name="KL") == 0.0
    assert nonnegative(0.395, name="KL") == 0.395
    with pytest.raises(ValueError, match=r"KL must be >= 0 .* got KL=-1e-06"):
        nonnegative(-1e-6, name="KL")
    with pytest.raises(ValueError, match="KL must be >= 0"):
        nonnegative(float("nan"), name="KL")


def _numbers_under(
    doc: Any, key_pattern: str, found: list[tuple[str, float]], path: str = ""
) -> None:
    if isinstance(doc, dict):
        for k, v in doc.items():
            p = f"{path}/{k}"
            if re.search(key_pattern, str(k)) and isinstance(v, (int, float)):
                found.append((p, float(v)))
            _numbers_under(v, key_pattern, found, p)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            _numbers_under(v, key_pattern, found, f"{path}[{i}]")


def test_metrics_json_has_no_negative_divergence(quick: QuickRun) -> None:
    # KL(q‖p) and TV(q, p) are >= 0 by definition; the unfixed lab wrote KL = -2.16e-16.
    found: list[tuple[str, float]] = []
    _numbers_under(quick.metrics["sections"], r"^(KL|TV)\b|kl_divergence|total_variation", found)
    assert any(p.endswith("KL(q‖p) (nats)") for p, _ in found), "the KL column is recorded"
    assert [(p, v) for p, v in found if v < 0] == []


def test_no_number_in_the_report_is_rounding_noise(quick: QuickRun) -> None:
    number = re.compile(r"^[-+]?\d*\.?\d+(e[-+]?\d+)?$")
    shown = [c for c in _cells(quick.html).cells if number.match(c)]
    assert len(shown) > 200
    noise = [c for c in shown if float(c) != 0.0 and abs(float(c)) < NOISE_BOUND]
    assert noise == []
    # Where a cell was zeroed, the table says so and states the bound.
    assert f"values below {NOISE_BOUND:.0e} in absolute value are float64 rounding noise" in (
        quick.html
    )


def test_every_table_scrolls_inside_its_own_container(quick: QuickRun) -> None:
    parsed = _cells(quick.html)
    assert len(parsed.table_parents) >= 15
    assert set(parsed.table_parents) == {"div.table-wrap"}
    css = re.search(r"<style>(.*?)</style>", quick.html, re.S)
    assert css is not None
    assert re.search(r"\.table-wrap\{[^}]*overflow-x:auto", css[1])
    assert re.search(r"td\.num\{[^}]*white-space:nowrap", css[1])
    # Headers of three words or more keep the width of their longest word pair (no one word per
    # line); text cells keep a minimum width.
    heads = re.findall(r'<th(?: class="l")?>((?:(?!</th>).)*)</th>', quick.html)
    assert any(h.startswith('<span class="w"') for h in heads)
    for head in heads:
        if not head.startswith('<span class="w"'):
            assert len(re.sub(r"<[^>]+>", "", head).split()) < 3, head
    assert re.search(r"td\.txt::before\{[^}]*width:8em", css[1])


def _doc_hrefs(page: str) -> list[str]:
    lines = re.findall(r'<p class="docs">(.*?)</p>', page)
    assert lines, "every section has an Explained in line"
    return [h for line in lines for h in re.findall(r'href="([^"]+)"', line)]


def _assert_points_at_built_pages(hrefs: list[str], base: str) -> None:
    root = Path(__file__).resolve().parent.parent
    assert hrefs
    for href in hrefs:
        assert href.startswith(base.rstrip("/") + "/"), href
        page = href[len(base.rstrip("/")) + 1 :].split("#")[0]
        assert page.endswith(".html"), href
        assert ".md" not in href, href
        assert "proofs/" not in href, href
        folder, _, name = page.removesuffix(".html").partition("/")
        source = (
            root / "proofs" / f"{name}.py"
            if folder == "derivations"
            else root / "docs" / folder / f"{name}.md"
        )
        assert source.is_file(), f"{href}: no docs page {source}"


def test_explained_in_links_point_at_the_built_docs_of_the_checkout(quick: QuickRun) -> None:
    # A source checkout links its own docs/_build/html, relative to the report.
    base = quick.metrics["meta"]["docs_url"]
    assert base is not None
    root = Path(__file__).resolve().parent.parent
    assert (quick.out / base).resolve() == (root / "docs" / "_build" / "html").resolve()
    _assert_points_at_built_pages(_doc_hrefs(quick.html), base)
    assert "sphinx-build docs docs/_build/html" in quick.html
    assert not re.search(r"docs/[\w/-]+\.md|proofs/\w+\.py", quick.html + quick.markdown)


def test_explained_in_links_follow_docs_url(tmp_path: Path) -> None:
    base = "https://docs.example.org/refimpl/"
    main(["lab", "--quick", "--only", "effort", "--docs-url", base, "--out", str(tmp_path)])
    page = (tmp_path / "index.html").read_text()
    _assert_points_at_built_pages(_doc_hrefs(page), base)
    assert "](https://docs.example.org/refimpl/concepts/effort.html)" in (
        (tmp_path / "report.md").read_text()
    )


def test_without_the_docs_the_report_says_where_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import refimpl.lab.cli as lab_cli

    monkeypatch.setattr(lab_cli, "default_docs_url", lambda out: None)  # a pip installation
    main(["lab", "--quick", "--only", "effort", "--out", str(tmp_path)])
    page = (tmp_path / "index.html").read_text().replace("<wbr>", "")  # as read
    assert _doc_hrefs(page) == []
    assert "<code>concepts/effort.html</code>" in page
    assert "sphinx-build docs docs/_build/html" in page
    assert "--docs-url" in page


def _png_size_and_dpi(path: Path) -> tuple[int, int, float]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    at = data.find(b"pHYs")
    assert at > 0, f"{path.name} records no resolution"
    per_metre, _, unit = struct.unpack(">IIB", data[at + 4 : at + 13])
    assert unit == 1
    return width, height, per_metre * 0.0254


def test_figures_are_displayed_at_their_css_width_and_drawn_for_it(quick: QuickRun) -> None:
    # --quick draws at 100 dpi: one image pixel per CSS pixel at 100 CSS px per inch.
    imgs = dict(re.findall(r'<img src="figures/([^"]+)" width="(\d+)"', quick.html))
    drawn = {d.file: d for d in quick.drawn}
    assert (
        set(imgs)
        == set(drawn)
        == {f for s in quick.metrics["sections"].values() for f in s["figures"]}
    )
    for file, css in imgs.items():
        width, _, dpi = _png_size_and_dpi(quick.out / "figures" / file)
        assert dpi == pytest.approx(100, abs=0.5), file
        assert int(css) == round(drawn[file].width_in * 100), file
        assert abs(width - int(css)) <= 2, (
            file
        )  # constrained layout: the saved size is the figure's
        assert int(css) <= 1000, f"{file} is wider than the text column"


def test_the_default_run_draws_at_print_resolution(tmp_path: Path) -> None:
    from refimpl.lab._plot import lab_style, new_figure

    section = Section(key="k", number=1, title="t", docs=(), figures_dir=tmp_path)
    with lab_style():
        fig, (ax,) = new_figure(1)
        ax.plot([0, 1], [0, 1])
        section.figure(fig, "f", "caption")
    width, _, dpi = _png_size_and_dpi(tmp_path / "k-f.png")
    assert dpi == pytest.approx(200, abs=0.5)
    assert width == 2 * 700


def test_figure_text_is_readable_and_each_axis_shows_one_quantity(quick: QuickRun) -> None:
    # 9 pt at 100 CSS px per inch is 12.5 px on the page; the unfixed legends were 6.5-8 pt.
    assert quick.drawn
    for d in quick.drawn:
        assert min(d.font_sizes) >= 9.0, (d.file, min(d.font_sizes))
        for label in d.axis_labels:
            assert not ("N/B" in label and "n/k" in label), (d.file, label)


def test_the_staleness_section_names_which_step_time_is_which(quick: QuickRun) -> None:
    st = quick.metrics["sections"]["staleness"]
    if not st["available"]:
        pytest.skip("staleness section not available in this build")
    free = fmt(st["metrics"]["step_time_no_bound"])
    (section,) = re.findall(r'<section id="staleness">(.*?)</section>', quick.html, re.S)
    assert any(f"no bound: Δ = {free} tokens/step" in t for d in quick.drawn for t in d.titles)
    assert "Δ_η (tokens/step)" in section
    assert f"{free} tokens/step" in section
    eta0 = st["metrics"]["drop-table"][0]
    assert eta0["η"] == 0
    assert f"at `η = 0`, {fmt(eta0['Δ_η (tokens/step)'])} tokens/step" in quick.markdown


def test_restart_throughput_reconciles_with_its_waste(quick: QuickRun) -> None:
    st = quick.metrics["sections"]["staleness"]
    if not st["available"]:
        pytest.skip("staleness section not available in this build")
    rows = {r["strategy"]: r for r in st["metrics"]["alternatives-cost"]}
    base = rows["async, no bound"]
    assert base["trained samples/time (× async)"] == 1.0
    for name, r in rows.items():
        # Every slot decodes one token per token time in these runs (no re-prefill), so the trained
        # tokens per time relative to async are the share of decoded tokens that is not wasted.
        if name != "partial: recompute":
            assert r["trained tokens/time (× async)"] == pytest.approx(
                1.0 - r["wasted (share of decoded tokens)"], abs=0.03
            ), name
    restart = rows["partial: restart"]
    assert (
        restart["trained samples/time (× async)"] > 1.0 > restart["trained tokens/time (× async)"]
    )
    assert "×" in quick.html


def test_the_report_cites_no_internal_specification(quick: QuickRun) -> None:
    root = Path(__file__).resolve().parent.parent
    sources = "".join(p.read_text() for p in (root / "refimpl" / "lab").glob("*.py"))
    for text in (quick.html, quick.markdown, sources):
        # (the pattern is split so that this line does not itself cite the folder it looks for)
        assert not re.search(r"\bSPEC\b|" + "shared" + "/", text)


def test_the_report_needs_no_network_and_no_math_typesetting(quick: QuickRun) -> None:
    # Offline: no script at all (so no MathJax/KaTeX from a CDN), no TeX left for a typesetter.
    assert "<script" not in quick.html.lower()
    assert not re.search(r"mathjax|katex", quick.html, re.I)
    assert not re.search(r"\\\(|\\\[|\$[^$\s][^$]*\$", quick.html)


def test_the_lab_flags_a_frontier_that_is_not_the_adaptive_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wrong variant of the adaptive frontier on a mix (quality 2% too high) must make the
    # checkpoint-on-the-frontier checks disagree: their tolerance is the derived regret bound.
    import refimpl

    right = refimpl.frontier_quality

    def wrong(cost: Any, **kw: Any) -> Any:
        return 1.02 * right(cost, **kw)

    monkeypatch.setattr(refimpl, "frontier_quality", wrong)
    out = tmp_path / "wrong"
    code = main(["lab", "--quick", "--only", "effort", "--out", str(out)])
    checks = json.loads((out / "metrics.json").read_text())["sections"]["effort"]["checks"]
    failed = {c["name"] for c in checks if not c["passed"]}
    assert code == 1
    assert {c["name"] for c in checks if c["name"].startswith("mix-policy-")} <= failed


def test_the_mix_part_shows_every_strategy_and_the_gap(quick: QuickRun) -> None:
    effort = quick.metrics["sections"]["effort"]
    assert effort["available"]
    metrics = effort["metrics"]
    families = {row["penalty"] for row in metrics["penalties-on-mix"]}
    for name in ("DAPO", "cosine", "L1-Exact", "L1-Max", "Kimi"):
        assert any(f.startswith(name) for f in families), name
    gaps = {row["mix"]: row for row in metrics["mix-gap-table"]}
    one = gaps["one class (λ = 100)"]
    assert abs(one["at cost 300"]) <= 4e-16  # one class: the two curves are one
    for name, row in gaps.items():
        if name != "one class (λ = 100)":
            assert row["at cost 300"] > 0.0, name
    # the checkpoint lies above the fixed-budget curve at every effort, within its regret bound
    assert metrics["conditioned_policy_min_margin_over_fixed_budget"] > 0.0
    assert metrics["conditioned_policy_max_distance"] <= metrics["conditioned_policy_max_regret"]
    assert {"effort-mix-frontier.png", "effort-mix-gap.png"} <= set(effort["figures"])


def test_async_worth_reports_the_measured_verdict_for_every_length_law(quick: QuickRun) -> None:
    # issue 18: the verdict is the measurement (time to a reward target), the γ^s model secondary
    from refimpl.lab import async_worth as aw

    sec = quick.metrics["sections"]["async-worth"]
    if not sec["available"]:
        return
    metrics = sec["metrics"]
    assert metrics["verdict_kind"].startswith("measured")
    names = [name for name, _ in aw.laws()]
    assert list(metrics["measured_verdicts"]) == names
    for name in names:
        cells = [c["verdict"] for c in metrics["measured_cells"] if c["law"] == name]
        assert cells
        assert metrics["measured_verdicts"][name] == aw.measured_verdict(cells)
    assert sec["headlines"][0].startswith("Measured (reward reached per unit of simulated time")


@pytest.mark.parametrize("dpi", [100, 200])
def test_scatter_labels_cover_no_point_and_no_other_label(dpi: int) -> None:
    # The bias-variance figure's numbers once printed over each other ("9" and "12" read "912").
    import numpy as np

    from refimpl.lab._plot import lab_style, label_points, new_figure

    rng = np.random.default_rng(4)
    xy = np.column_stack([rng.uniform(0.4, 0.7, 14), 10 ** rng.uniform(-1.2, -0.9, 14)])
    xy = np.vstack([xy, xy[3], xy[3]])  # three points at one place: one label "4, 15, 16"
    with lab_style():
        fig, (ax,) = new_figure(1, height=4.0)
        fig.set_dpi(dpi)
        ax.scatter(xy[:, 0], xy[:, 1], s=30)
        ax.set_yscale("log")
        ax.margins(x=0.1, y=0.3)
        label_points(ax, xy, [str(i + 1) for i in range(len(xy))])
        fig.draw_without_rendering()  # the labels are placed while the figure is drawn
        texts = [t for t in ax.texts if t.get_visible()]
        boxes = [t.get_window_extent() for t in texts]
        pts = ax.transData.transform(xy)
    assert "4, 15, 16" in [t.get_text() for t in texts]
    assert sorted(int(n) for t in texts for n in t.get_text().split(", ")) == list(range(1, 17))
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1 :]), texts[i].get_text()
        own = {int(n) - 1 for n in texts[i].get_text().split(", ")}
        for k, (px, py) in enumerate(pts):
            if k not in own:
                assert not a.contains(px, py), (texts[i].get_text(), k + 1)


# Seeded regression values: the numbers of `refimpl lab --quick --seed 0` (every section's metrics
# and every check's closed form, simulation and tolerance), recorded by running this file:
#     .venv/bin/python tests/test_lab.py --record
# A change that moves any of them (a size, a stream, a tolerance, a wrong computation that stays
# self-consistent) fails here; a change meant to move them is recorded again, in its own commit.
REGRESSION = Path(__file__).parent / "data" / "lab_quick_seed0.json"


def regression_view(metrics: dict[str, Any]) -> dict[str, Any]:
    """What the regression file holds of a run's metrics.json: all but the wall-clock seconds."""
    return {
        key: {
            "metrics": s["metrics"],
            "headlines": s["headlines"],
            "takeaway": s["takeaway"],
            "checks": [
                {k: c[k] for k in ("name", "closed_form", "simulation", "tolerance", "passed")}
                for c in s["checks"]
            ],
        }
        for key, s in metrics["sections"].items()
    }


def _differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: floats beyond 1e-9 relative (1e-12 absolute), anything
    else at all."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        same = math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
        return [] if same else [f"{path}: {got!r}, recorded {want!r}"]
    if isinstance(want, dict) and isinstance(got, dict):
        if got.keys() != want.keys():
            return [f"{path}: keys {sorted(got)} , recorded {sorted(want)}"]
        return [d for k in want for d in _differences(got[k], want[k], f"{path}/{k}")]
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in _differences(g, w, f"{path}[{i}]")
        ]
    return [] if got == want else [f"{path}: {got!r}, recorded {want!r}"]


def test_differences_finds_a_moved_number_and_only_that() -> None:
    want = {"a": [1.0, "x", {"b": 2.5}], "c": True}
    assert _differences(want, want) == []
    assert _differences({"a": [1.0 + 1e-12, "x", {"b": 2.5}], "c": True}, want) == []
    assert _differences({"a": [1.0, "x", {"b": 2.5000001}], "c": True}, want) == [
        "/a[2]/b: 2.5000001, recorded 2.5"
    ]
    assert _differences({"a": [1.0, "y", {"b": 2.5}], "c": True}, want) == [
        "/a[1]: 'y', recorded 'x'"
    ]


def test_quick_run_numbers_are_the_recorded_ones(quick: QuickRun) -> None:
    want = json.loads(REGRESSION.read_text())
    diffs = _differences(regression_view(quick.metrics), want)
    assert not diffs, (
        f"{len(diffs)} numbers of the quick lab moved (first 10 below); if the change is meant, "
        "record them again with `.venv/bin/python tests/test_lab.py --record`:\n"
        + "\n".join(diffs[:10])
    )


# -- a first run compiles only what pays -----------------------------------------------------------
def _python(
    code: str, cache: Path, cwd: Path | None = None, *, codes: tuple[int, ...] = (0,)
) -> str:
    """Run ``code`` in a fresh interpreter whose numba cache is ``cache``; its stdout."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert result.returncode in codes, result.stderr[-3000:]
    return result.stdout.strip()


_DECIDE = """
import numpy as np
from refimpl.sim import SimConfig, _compiled, _vector_compiled
pmf = np.full(50, 1 / 50)
short = dict(slots=8, batch=8, steps=20, lengths=pmf, seed=1)
long = dict(short, steps=2_000_000)
drop = dict(eta=1, over_bound="drop")
from scipy import stats
from refimpl.sim.agent import AgentConfig, _compiled as _agent_compiled
agent = dict(slots=8, batch=8, steps=20, lengths=stats.geom(0.02), turns=3, seed=1)
print(
    _compiled.worth_compiling(SimConfig(**short, **drop)),
    _compiled.worth_compiling(SimConfig(**long, **drop)),
    _vector_compiled.worth_compiling(SimConfig(**short)),
    _vector_compiled.worth_compiling(SimConfig(**long)),
    _agent_compiled.worth_compiling(AgentConfig(**agent)),
    _agent_compiled.worth_compiling(AgentConfig(**dict(agent, steps=200_000))),
)
"""


def test_a_short_run_on_an_empty_numba_cache_compiles_nothing(tmp_path: Path) -> None:
    pytest.importorskip("numba")  # without numba nothing is ever compiled
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    assert _python(_DECIDE, cache) == "False True False True False True"
    assert not [p for p in cache.rglob("*") if p.is_file()], "deciding compiled something"


_TINY = """
import numba

@numba.njit(cache=True)
def twice(x):
    return 2 * x
"""


def _on_disk(module: Path, cache: Path, *, call: bool) -> str:
    code = (
        "from refimpl.sim._compiled import cached_on_disk\nimport tiny\n"
        + ("tiny.twice(1)\n" if call else "")
        + "print(cached_on_disk(tiny.twice))"
    )
    return _python(code, cache, cwd=module.parent)


def test_a_kernel_in_numbas_cache_counts_as_ready_and_a_stale_one_does_not(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    module, cache = tmp_path / "tiny.py", tmp_path / "numba-cache"
    module.write_text(_TINY)
    cache.mkdir()
    assert _on_disk(module, cache, call=False) == "False"  # a fresh cache holds nothing
    assert _on_disk(module, cache, call=True) == "True"  # compiled and saved by this process
    assert _on_disk(module, cache, call=False) == "True"  # and found by the next one
    module.write_text(_TINY.replace("2 * x", "3 * x"))  # a new source: the cache is stale
    os.utime(module, (1, 1))
    assert _on_disk(module, cache, call=False) == "False"


def test_the_quick_lab_on_an_empty_numba_cache_compiles_nothing(quick_lab: QuickLab) -> None:
    """A first run after installation does not wait for a compiler: its runs are short, and the
    reference engines give the same numbers (tests/test_sim_agreement.py). The run is the
    ``quick_lab`` fixture's (``refimpl lab --quick`` in a fresh process, on an empty numba cache)."""
    pytest.importorskip("numba")
    # 1: a check disagreed (other tests say which)
    assert quick_lab.result.returncode in (0, 1), quick_lab.result.stderr[-3000:]
    assert not quick_lab.compiled, f"the quick lab compiled {quick_lab.compiled}"


def _titles_fit(fig: Any) -> None:
    """Every axes title lies within its axes' width, and within the figure."""
    fig.draw_without_rendering()
    for ax in fig.axes:
        title, box = ax.title.get_window_extent(), ax.get_window_extent()
        assert title.width <= box.width + 1, ax.title.get_text()
        assert title.x0 >= 0, ax.title.get_text()
        assert title.x1 <= fig.bbox.width, ax.title.get_text()


def test_a_title_wider_than_its_panel_is_wrapped_not_cut(tmp_path: Path) -> None:
    from refimpl.lab._plot import lab_style, new_figure

    long = (
        "Shortfall below the adaptive frontier at equal cost, for every published penalty setting"
    )
    with lab_style():
        fig, (left, right) = new_figure(2, height=3.0)
        left.set_title(long)
        right.set_title("short")
        rejects(_titles_fit, fig)  # as drawn, the long title runs past its panel
        section = Section(key="k", number=1, title="t", docs=(), figures_dir=tmp_path, dpi=50)
        section.figure(fig, "f", "caption")
    _titles_fit(fig)
    assert left.get_title().replace("\n", " ") == long  # every word kept
    assert right.get_title() == "short"


def test_every_table_or_figure_the_text_names_is_there_and_linked(quick: QuickRun) -> None:
    """A section's text cites its tables and figures by name ("table lag-separation"); each name
    is shown on its table or figure and links to it, so no reference dangles."""
    unlinked = re.sub(r"<a [^>]*>.*?</a>", "", quick.html)
    dangling = re.findall(r"\b(?:table|figure) \w+[-_][\w-]*", _text(unlinked))
    assert not dangling, dangling
    cited = re.findall(r'<a href="#([\w-]+-(?:table|figure)-[\w-]+)">', quick.html)
    assert cited, "the report cites no table or figure by name"
    anchors = set(re.findall(r'id="([^"]+)"', quick.html))
    assert set(cited) <= anchors
    for key, sec in quick.metrics["sections"].items():
        for figure in sec["figures"]:
            name = figure.removeprefix(f"{key}-").removesuffix(".png")
            assert f'id="{key}-figure-{name}"' in quick.html, figure
            assert f"Figure {name}." in quick.html, figure


def test_a_reference_links_only_to_what_the_section_has(tmp_path: Path) -> None:
    from refimpl.lab.report import _link_references

    section = Section(key="s", number=1, title="t", docs=(), figures_dir=tmp_path)
    section.table("lag-separation", "caption", ("a",), [(1.0,)])
    linked = _link_references("see table lag-separation and table nowhere", section)
    assert linked == (
        'see <a href="#s-table-lag-separation">table lag-separation</a> and table nowhere'
    )


def test_the_report_never_breaks_a_word_mid_word(quick: QuickRun) -> None:
    """No CSS that breaks inside a word (``stalenes|s``); long code wraps at its boundaries."""
    css = quick.raw_html[quick.raw_html.index("<style>") : quick.raw_html.index("</style>")]
    assert "anywhere" not in css
    assert "word-break" not in css
    assert "<wbr>" in quick.raw_html  # long identifiers carry their break points


# -- the first screen: takeaways before evidence ---------------------------------------------------
def _section_html(html: str, key: str) -> str:
    start = html.index(f'<section id="{key}">')
    return html[start : html.index("</section>", start)]


def test_every_section_opens_with_a_two_line_takeaway_before_its_figures(quick: QuickRun) -> None:
    """The first screen (At a glance) and the top of each section say what the run found."""
    glance = _text(quick.html[quick.html.index('class="glance"') : quick.html.index("</div>")])
    for key, sec in quick.metrics["sections"].items():
        if not sec["available"]:
            continue
        assert len(sec["takeaway"]) == 2, (key, sec["takeaway"])
        assert all(sec["takeaway"]), (key, sec["takeaway"])
        body = _section_html(quick.html, key)
        figure = body.find("<figure")
        assert -1 < body.index('class="takeaway"') < (figure if figure >= 0 else len(body)), key
        for line in sec["takeaway"]:
            assert _text(_inline(line)) in glance, (key, line)


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_a_takeaway_takes_its_numbers_from_the_metrics_and_refuses_typed_in_ones(
    tmp_path: Path,
) -> None:
    section = Section(key="k", number=1, title="t", docs=(), figures_dir=tmp_path)
    section.metric("share", 0.1234)
    section.metric("setting", {"eta": 2})
    section.takeaway("masking at η = {setting.eta} keeps {share:%}.", "Weights cannot fix it.")
    assert section.takeaways == ("masking at η = 2 keeps 12.3%.", "Weights cannot fix it.")
    with pytest.raises(ValueError, match=r"finding must take its numbers from the section's"):
        section.takeaway("masking at η = 2 keeps {share:%}.", "Weights cannot fix it.")
    with pytest.raises(ValueError, match=r"meaning must name only recorded metrics .*share"):
        section.takeaway("keeps {share:%}.", "it keeps {shares}.")


def test_the_footer_says_how_long_each_section_took(quick: QuickRun) -> None:
    footer = quick.html[quick.html.index("<footer") :]
    total = 0.0
    for sec in quick.metrics["sections"].values():
        assert f"{sec['title']} {sec['seconds']:.1f} s" in footer, sec["title"]
        total += sec["seconds"]
    assert f"(sections total {total:.1f} s)" in footer
    assert "Time per section:" in quick.markdown.splitlines()[-1]


if __name__ == "__main__":
    import sys
    import tempfile

    if sys.argv[1:] != ["--record"]:
        raise SystemExit("usage: python tests/test_lab.py --record")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report"
        main(["lab", "--quick", "--seed", "0", "--out", str(out)])
        view = regression_view(json.loads((out / "metrics.json").read_text()))
    REGRESSION.parent.mkdir(exist_ok=True)
    REGRESSION.write_text(json.dumps(view, indent=1, sort_keys=True) + "\n")
    print(f"recorded {REGRESSION}")
