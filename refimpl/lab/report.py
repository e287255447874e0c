"""The lab report: sections made of text, figures, tables and closed-form-vs-simulation checks.

A section records every number it shows in its ``metrics`` (written to ``metrics.json``), and every
pairing of a closed form with a simulation as a :class:`Check` with the tolerance it is held to and the
rule that tolerance comes from. The writers turn the sections into ``index.html`` (self-contained: inline
CSS, figures as relative ``figures/*.png`` links, no script, no CDN, no math to typeset: formulas are
plain Unicode text), ``report.md`` and ``metrics.json``. Numbers go through :func:`fmt`, which never
prints float64 rounding noise as a value, and quantities that are non-negative by definition through
:func:`nonnegative`.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from refimpl._io import atomic_path, atomic_write
from refimpl._validation import invalid
from refimpl.lab._html import CSS as _CSS
from refimpl.lab._html import html_table as _html_table
from refimpl.lab._html import html_text as _html_text
from refimpl.lab._html import inline as _inline
from refimpl.lab._html import th as _th

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

__all__ = [
    "NOISE_BOUND",
    "PX_PER_INCH",
    "Check",
    "DocLink",
    "FigureBlock",
    "Section",
    "TableBlock",
    "TextBlock",
    "fmt",
    "is_noise",
    "nonnegative",
    "write_html",
    "write_markdown",
    "write_metrics",
]


class DocLink(NamedTuple):
    """A documentation page that explains a section.

    ``page`` is the page's name in the docs site, without suffix (``concepts/length-bias``: the
    source ``docs/concepts/length-bias.md``, built as ``concepts/length-bias.html``; derivation pages
    ``derivations/<name>`` are generated from ``proofs/<name>.py`` at build time). ``anchor`` is an
    optional heading anchor on that page.
    """

    page: str
    title: str
    anchor: str = ""

    def href(self, base: str | None) -> str | None:
        """The address of the built page under the docs ``base`` URL, or None without a base.

        Examples
        --------
        >>> DocLink("concepts/length-bias", "t", "fluid").href("../docs/_build/html/")
        '../docs/_build/html/concepts/length-bias.html#fluid'
        >>> DocLink("concepts/length-bias", "t").href(None) is None
        True
        """
        if base is None:
            return None
        return f"{base.rstrip('/')}/{self.page}.html" + (f"#{self.anchor}" if self.anchor else "")


class TextBlock(NamedTuple):
    """A paragraph or list in a tiny Markdown subset (``**bold**``, `` `code` ``, ``- `` items)."""

    markdown: str


#: CSS pixels per inch of figure width: a figure is displayed at ``width_in × PX_PER_INCH`` CSS
#: pixels (shrunk to the column when the window is narrower), whatever dpi it was drawn at, so its
#: fonts have the same size on the page in the quick and the default run.
PX_PER_INCH = 100


class FigureBlock(NamedTuple):
    """A figure saved as ``figures/<file>``, displayed ``width`` CSS pixels wide."""

    file: str
    caption: str
    width: int = 0


class TableBlock(NamedTuple):
    """A table of formatted cells; its raw numbers are in the section's metrics under ``key``."""

    key: str
    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


class Check(NamedTuple):
    """A closed form paired with its simulation, and the tolerance the pair is held to.

    ``passed`` is ``|closed_form - simulation| <= tolerance``. ``rule`` says where the tolerance comes
    from (e.g. "4 standard errors: a false alarm rate below 1e-4 under the normal approximation").
    """

    name: str
    quantity: str
    closed_form: float
    simulation: float
    tolerance: float
    rule: str

    @property
    def passed(self) -> bool:
        return abs(self.closed_form - self.simulation) <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "quantity": self.quantity,
            "closed_form": self.closed_form,
            "simulation": self.simulation,
            "abs_diff": abs(self.closed_form - self.simulation),
            "tolerance": self.tolerance,
            "rule": self.rule,
            "passed": self.passed,
        }


Block = TextBlock | FigureBlock | TableBlock


#: Float64 rounding bound of the report: a computed value whose absolute size is below this is
#: rounding noise, never a measurement. Every quantity the lab shows is a length (tokens, ≥ 1), a
#: probability or ratio of order 1e-6 and above, or a variance (tokens², ≥ 1); the sums that produce
#: them (a few thousand terms of size up to ~1e4) carry rounding errors below ~1e-13 in float64
#: (observed: 1.1e-16 for a total variation and -8.5e-14 for an exact bias that is 0 in theory).
NOISE_BOUND = 1e-12
NOISE_NOTE = (
    f"values below {NOISE_BOUND:.0e} in absolute value are float64 rounding noise of a quantity "
    "that is 0 in exact arithmetic, and are shown as 0 (metrics.json keeps the computed value)"
)


def fmt(value: float, digits: int = 3) -> str:
    """Format a number for the report: ``digits`` significant digits, ``inf`` spelled out.

    A value whose absolute size is below :data:`NOISE_BOUND` is float64 rounding noise and is shown
    as ``0`` (so is ``-0.0``): the formatter never prints noise as if it were a value.

    Examples
    --------
    >>> fmt(0.123456), fmt(1234.6), fmt(2.5e7), fmt(float("inf")), fmt(3)
    ('0.123', '1235', '2.5e+07', 'inf', '3')
    >>> fmt(-2.16e-16), fmt(1.1e-16), fmt(-8.53e-14), fmt(-0.0), fmt(2e-12)
    ('0', '0', '0', '0', '2e-12')
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    v = float(value)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        return "nan"
    if abs(v) < NOISE_BOUND:
        return "0"
    if 10**digits <= abs(v) < 1e7:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def is_noise(value: Any) -> bool:
    """Whether ``value`` is a float that :func:`fmt` shows as 0 although it is not exactly 0."""
    if isinstance(value, (bool, int, np.integer, str)) or value is None:
        return False
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return v != 0.0 and abs(v) < NOISE_BOUND


def nonnegative(value: float, *, name: str, bound: float = NOISE_BOUND) -> float:
    """A quantity that is ``>= 0`` by definition, with its rounding noise below zero clamped to 0.

    A KL divergence, a total variation distance or a variance computed in float64 can come out as
    ``-2e-16``: that is rounding, and it is returned as ``0.0``. A value below ``-bound`` is not
    rounding but a bug in the computation, and is refused rather than hidden.

    Raises
    ------
    ValueError
        If ``value < -bound`` or ``value`` is NaN.

    Examples
    --------
    >>> nonnegative(-2.16e-16, name="KL(q‖p)"), nonnegative(0.395, name="KL(q‖p)")
    (0.0, 0.395)
    """
    v = float(value)
    if math.isnan(v) or v < -bound:
        raise invalid(
            name,
            "be >= 0 (it is non-negative by definition)",
            v,
            f"It is beyond the float64 rounding bound -{bound:g}: a bug in the computation that "
            "produced it, not rounding; do not clamp it, fix the computation.",
        )
    return max(v, 0.0)


_FIELD = re.compile(r"\{([A-Za-z_][\w.\-]*)(?::(%))?\}")
_MISSING = object()


class Section:
    """One section of the report, filled by a section module's ``build`` function."""

    def __init__(
        self,
        *,
        key: str,
        number: int,
        title: str,
        docs: Sequence[DocLink],
        figures_dir: Path,
        dpi: int = 200,
    ) -> None:
        self.key = key
        self.dpi = dpi
        self.number = number
        self.title = title
        self.docs = tuple(docs)
        self.figures_dir = figures_dir
        self.available = True
        self.missing: tuple[str, ...] = ()
        self.blocks: list[Block] = []
        self.metrics: dict[str, Any] = {}
        self.checks: list[Check] = []
        self.headlines: list[str] = []
        self.takeaways: tuple[str, str] | None = None
        self.seconds = 0.0

    # -- content ---------------------------------------------------------------------------------
    def text(self, markdown: str) -> None:
        """Add a paragraph (or a ``- `` list)."""
        self.blocks.append(TextBlock(markdown.strip()))

    def headline(self, markdown: str) -> None:
        """A one-line finding shown at the top of the report (numbers from the metrics only)."""
        self.headlines.append(markdown.strip())

    def takeaway(self, finding: str, meaning: str) -> None:
        """The section's two plain-language lines, shown before its figures and on the report's
        first screen: what it found (``finding``) and what that means for a user (``meaning``).

        Every number comes from the section's metrics: ``{key}`` is the metric ``key`` as
        :func:`fmt` shows it, ``{key.field}`` a field of a dict metric, ``{key:%}`` a fraction as a
        percentage. A literal digit is refused, so a takeaway cannot state a number that the run
        did not produce. A section without a takeaway still renders (its headlines stand in).

        Raises
        ------
        ValueError
            If a line has a digit outside a ``{...}`` field or names a metric that is not recorded.

        Examples
        --------
        >>> s = Section(key="k", number=1, title="t", docs=(), figures_dir=Path("."))
        >>> _ = s.metric("ratio", 0.61234)
        >>> s.takeaway("short rollouts make up {ratio:%} of a batch.", "Correct for it.")
        >>> s.takeaways
        ('short rollouts make up 61.2% of a batch.', 'Correct for it.')
        """
        self.takeaways = (self._filled(finding, "finding"), self._filled(meaning, "meaning"))

    def _filled(self, template: str, name: str) -> str:
        """``template`` with each ``{key[.field][:%]}`` replaced by that metric, formatted."""
        literal = _FIELD.sub("", template)
        if re.search(r"\d", literal):
            raise invalid(
                name,
                "take its numbers from the section's metrics (no literal digits)",
                template,
                "Record the number with section.metric(key, value) and write {key} (or {key:%}).",
            )

        def value(match: re.Match[str]) -> str:
            key, *path = match[1].split(".")
            v: Any = self.metrics.get(key, _MISSING)
            for field in path:
                v = v.get(field, _MISSING) if isinstance(v, dict) else _MISSING
            if v is _MISSING:
                raise invalid(
                    name,
                    f"name only recorded metrics (recorded: {', '.join(sorted(self.metrics))})",
                    match[0],
                    "Record it first with section.metric(key, value), or fix the key.",
                )
            if match[2] == "%":
                return f"{fmt(100 * float(v))}%"
            return v if isinstance(v, str) else fmt(v)

        return _FIELD.sub(value, template).strip()

    def metric(self, key: str, value: Any) -> Any:
        """Record a number (or a list/dict of numbers) shown in the report; return it."""
        if key in self.metrics:
            raise KeyError(f"metric {key!r} recorded twice in section {self.key!r}")
        self.metrics[key] = value
        return value

    def figure(self, fig: MplFigure, name: str, caption: str) -> None:
        """Save ``fig`` as ``figures/<section>-<name>.png`` and add it to the section."""
        from refimpl.lab._plot import fit_titles  # matplotlib loads only when a figure is drawn

        fit_titles(fig)
        file = f"{self.key}-{name}.png"
        self.figures_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.figures_dir / file) as tmp:  # a reader never sees half a figure
            fig.savefig(tmp, dpi=self.dpi)
        width = round(float(fig.get_size_inches()[0]) * PX_PER_INCH)
        self.blocks.append(FigureBlock(file, caption.strip(), width))

    def table(
        self,
        key: str,
        caption: str,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        *,
        digits: int = 3,
        note: str = "",
    ) -> None:
        """Add a table; its raw cells are recorded as the metric ``key`` (a list of row dicts).

        ``note`` is printed under the table; when a cell is rounding noise (shown as 0 by
        :func:`fmt`), the note says so and states the bound.
        """
        raw = [list(r) for r in rows]
        self.metric(key, [dict(zip(columns, r, strict=True)) for r in raw])
        cells = tuple(tuple(c if isinstance(c, str) else fmt(c, digits) for c in r) for r in raw)
        notes = [note.strip()] if note.strip() else []
        if any(is_noise(c) for r in raw for c in r):
            notes.append(NOISE_NOTE[0].upper() + NOISE_NOTE[1:] + ".")
        self.blocks.append(TableBlock(key, caption.strip(), tuple(columns), cells, " ".join(notes)))

    def check(
        self,
        name: str,
        quantity: str,
        *,
        closed_form: float,
        simulation: float,
        tolerance: float,
        rule: str,
    ) -> Check:
        """Pair a closed form with its simulation; the pair is listed in the section's check table."""
        c = Check(name, quantity, float(closed_form), float(simulation), float(tolerance), rule)
        if any(x.name == name for x in self.checks):
            raise KeyError(f"check {name!r} recorded twice in section {self.key!r}")
        self.checks.append(c)
        return c

    def unavailable(self, missing: Sequence[str]) -> None:
        """Mark the section as not available in this build, naming what is missing."""
        self.available = False
        self.missing = tuple(missing)
        self.blocks = [
            TextBlock(
                "**Not available in this build.** This section needs library functions that this "
                "installation of refimpl does not provide yet: "
                + ", ".join(f"`{m}`" for m in missing)
                + ". No numbers are shown rather than numbers the library cannot back."
            )
        ]
        self.metrics = {}
        self.checks = []
        self.headlines = []
        self.takeaways = None


# -- metrics.json ----------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    return value


def write_metrics(path: Path, sections: Sequence[Section], meta: dict[str, Any]) -> None:
    """Write ``metrics.json``: the run's settings and, per section, its metrics and checks.

    Non-finite numbers are written as the strings ``"inf"``, ``"-inf"`` (strict JSON has no infinity).
    """
    doc = {
        "meta": meta,
        "sections": {
            s.key: {
                "number": s.number,
                "title": s.title,
                "available": s.available,
                "missing": list(s.missing),
                "seconds": s.seconds,
                "docs": [d.page for d in s.docs],
                "docs_links": [d.href(meta.get("docs_url")) for d in s.docs],
                "metrics": s.metrics,
                "headlines": s.headlines,
                "takeaway": list(s.takeaways or ()),
                "checks": [c.as_dict() for c in s.checks],
                "figures": [b.file for b in s.blocks if isinstance(b, FigureBlock)],
            }
            for s in sections
        },
    }
    atomic_write(path, json.dumps(_jsonable(doc), indent=1, allow_nan=False) + "\n")


# -- links to the documentation --------------------------------------------------------------------
def _doc_links_md(section: Section, base: str | None) -> str:
    parts = []
    for d in section.docs:
        href = d.href(base)
        if href is None:
            parts.append(f"{d.title} (docs page `{d.page}.html`)")
        else:
            parts.append(f"[{d.title}]({href})")
    return ", ".join(parts)


def _doc_links_html(section: Section, base: str | None) -> str:
    parts = []
    for d in section.docs:
        href = d.href(base)
        title = html.escape(d.title)
        if href is None:
            parts.append(f"{title} (docs page <code>{html.escape(d.page)}.html</code>)")
        else:
            parts.append(f'<a href="{html.escape(href)}">{title}</a>')
    return ", ".join(parts)


# -- report.md -------------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(map(_md_cell, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def _check_rows(section: Section) -> list[tuple[str, ...]]:
    return [
        (
            c.quantity,
            fmt(c.closed_form, 4),
            fmt(c.simulation, 4),
            fmt(abs(c.closed_form - c.simulation), 2),
            fmt(c.tolerance, 2),
            fmt(_share_of_tolerance(c), 2),
            "yes" if c.passed else "**NO**",
        )
        for c in section.checks
    ]


def _tolerance_note(section: Section) -> str:
    """Where the section's tolerances come from, and their scale."""
    rules = "; ".join(sorted({c.rule for c in section.checks}))
    return (
        f"Tolerances, each in the unit of its quantity: {rules}. *Difference ÷ tolerance* puts "
        "every pair on that scale: at most 1 when the two agree."
    )


def _share_of_tolerance(check: Check) -> float:
    """The difference on the tolerance's own scale: at most 1 when the pair agrees."""
    diff = abs(check.closed_form - check.simulation)
    if diff == 0.0:
        return 0.0
    return diff / check.tolerance if check.tolerance > 0 else math.inf


#: The check table's columns; "difference ÷ tolerance" puts every pair on one scale (≤ 1: agree),
#: whatever the quantity's unit.
CHECK_COLUMNS = (
    "quantity",
    "closed form",
    "simulation",
    "difference",
    "tolerance",
    "difference ÷ tolerance",
    "agree",
)


def write_markdown(path: Path, sections: Sequence[Section], meta: dict[str, Any]) -> None:
    """Write ``report.md`` (figures linked as ``figures/*.png``, docs pages under ``docs_url``)."""
    base = meta.get("docs_url")
    out = [f"# {meta['title']}", "", meta["summary"], ""]
    glance = [f"- **{s.title}:** {line}" for s in sections for line in _glance(s)]
    if glance:
        out += ["## At a glance", "", *glance, ""]
    if meta.get("reading"):
        out += ["## Reading this report", "", meta["reading"], ""]
    if meta.get("symbols"):
        out += [_md_table(("symbol", "meaning"), meta["symbols"]), ""]
    out += [_md_table(("setting", "value"), [(k, str(v)) for k, v in meta["settings"].items()]), ""]
    for s in sections:
        out += [f"## {s.number}. {s.title}", ""]
        if s.takeaways:
            out += [f"> {s.takeaways[0]}", ">", f"> {s.takeaways[1]}", ""]
        if s.docs:
            out += [f"*Explained in:* {_doc_links_md(s, base)}", ""]
        for b in s.blocks:
            if isinstance(b, TextBlock):
                out += [b.markdown, ""]
            elif isinstance(b, FigureBlock):
                label = f"Figure {figure_name(s, b)}."
                out += [f"![{b.caption}](figures/{b.file})", "", f"*{label} {b.caption}*", ""]
            else:
                out += [f"**Table {b.key}.** {b.caption}", "", _md_table(b.columns, b.rows), ""]
                if b.note:
                    out += [f"*{b.note}*", ""]
        if s.checks:
            out += ["**Closed form vs simulation**", "", _md_table(CHECK_COLUMNS, _check_rows(s))]
            out += ["", _tolerance_note(s), ""]
    out += [f"*{meta['footer']} {_times(sections)}*", ""]
    atomic_write(path, "\n".join(out).rstrip() + "\n")


def _glance(section: Section) -> list[str]:
    """A section's lines on the report's first screen: its takeaway, else its headlines."""
    if section.takeaways:
        return [" ".join(section.takeaways)]
    return section.headlines


def _times(sections: Sequence[Section]) -> str:
    """The footer's account of where the run's time went, section by section."""
    parts = [f"{s.title} {s.seconds:.1f} s" for s in sections]
    total = sum(s.seconds for s in sections)
    return f"Time per section: {'; '.join(parts)} (sections total {total:.1f} s)."


# -- index.html ------------------------------------------------------------------------------------
def figure_name(section: Section, block: FigureBlock) -> str:
    """The name a figure is cited by in its section's text (``figure composition``)."""
    return block.file.removeprefix(f"{section.key}-").removesuffix(".png")


def _anchor(section: Section, kind: str, name: str) -> str:
    return f"{section.key}-{kind}-{name}"


_REFERENCE = re.compile(r"\b(table|figure) ([\w][\w-]*\w|\w)")


def _link_references(text: str, section: Section) -> str:
    """Turn each "table KEY" / "figure NAME" of a section's rendered text into a link to it."""
    tables = {b.key for b in section.blocks if isinstance(b, TableBlock)}
    figures = {figure_name(section, b) for b in section.blocks if isinstance(b, FigureBlock)}

    def link(match: re.Match[str]) -> str:
        kind, name = match[1], match[2]
        if name not in (tables if kind == "table" else figures):
            return match[0]
        return f'<a href="#{_anchor(section, kind, name)}">{match[0]}</a>'

    return _REFERENCE.sub(link, text)


def _html_glance(sections: Sequence[Section]) -> list[str]:
    """The first screen: each section's takeaway (else its headlines), linked to the section."""
    glance = []
    for s in sections:
        link = f'<a href="#{s.key}"><strong>{html.escape(s.title)}</strong></a>'
        if s.takeaways:
            finding, meaning = (_inline(line) for line in s.takeaways)
            glance.append(f'<li>{link}<br>{finding}<br><span class="meaning">{meaning}</span></li>')
        else:
            glance += [f"<li>{link}: {_inline(h)}</li>" for h in s.headlines]
    if not glance:
        return []
    return ['<div class="glance"><h2>At a glance</h2><ul>', *glance, "</ul></div>"]


def _html_front(sections: Sequence[Section], meta: dict[str, Any]) -> list[str]:
    """Everything before the first section: title, summary, glance, reading notes, contents."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(meta['title'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(meta['title'])}</h1>",
        _html_text(meta["summary"]),
        *_html_glance(sections),
    ]
    if meta.get("reading") or meta.get("symbols"):
        out.append('<div class="reading" id="reading"><h2>Reading this report</h2>')
        if meta.get("reading"):
            out.append(_html_text(meta["reading"]))
        if meta.get("symbols"):
            out.append("<details><summary>Symbols and units</summary>")
            out.append(_html_table(("symbol", "meaning"), meta["symbols"]))
            out.append("</details>")
        out.append("</div>")
    out += [
        "<details><summary>Run settings</summary>",
        _html_table(("setting", "value"), [(k, str(v)) for k, v in meta["settings"].items()]),
        "</details>",
        "<nav><ol>",
    ]
    for s in sections:
        status = "" if s.available else " (not available in this build)"
        n_ok = sum(c.passed for c in s.checks)
        checks = f" — {n_ok}/{len(s.checks)} checks agree" if s.checks else ""
        out.append(f'<li><a href="#{s.key}">{html.escape(s.title)}</a>{status}{checks}</li>')
    out.append("</ol></nav>")
    return out


def _html_block(section: Section, block: Block) -> list[str]:
    """One text, figure or table of a section; figures and tables carry the name the text cites."""
    if isinstance(block, TextBlock):
        cls = ' class="unavailable"' if not section.available else ""
        return [f"<div{cls}>{_link_references(_html_text(block.markdown), section)}</div>"]
    if isinstance(block, FigureBlock):
        src = html.escape(f"figures/{block.file}")
        width = f' width="{block.width}"' if block.width else ""
        name = figure_name(section, block)
        caption = _link_references(_inline(block.caption), section)
        return [  # the image links to itself: full resolution on a narrow screen
            f'<figure id="{_anchor(section, "figure", name)}"><a href="{src}"><img src="{src}"'
            f'{width} alt="{html.escape(block.caption)}"></a><figcaption>'
            f'<span class="tag">Figure {html.escape(name)}.</span> {caption}</figcaption></figure>'
        ]
    caption = _link_references(_inline(block.caption), section)
    out = [
        f'<p class="caption" id="{_anchor(section, "table", block.key)}">'
        f'<span class="tag">Table {html.escape(block.key)}.</span> {caption}</p>',
        _html_table(block.columns, block.rows),
    ]
    if block.note:
        out.append(f'<p class="note">{_link_references(_inline(block.note), section)}</p>')
    return out


def _html_checks(section: Section) -> list[str]:
    """The section's closed-form/simulation pairs and where their tolerances come from."""
    rows = [
        (
            *(_inline(c) for c in r[:6]),
            '<span class="ok">yes</span>' if c.passed else '<span class="bad">NO</span>',
        )
        for r, c in zip(_check_rows(section), section.checks, strict=True)
    ]
    head = "".join(_th(c) for c in CHECK_COLUMNS)
    body = "".join(
        "<tr>"
        + f'<td class="txt">{r[0]}</td>'
        + "".join(f'<td class="num">{c}</td>' for c in r[1:])
        + "</tr>"
        for r in rows
    )
    return [
        '<p class="caption">Closed form vs simulation</p>',
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>",
        f'<p class="note">{_inline(_tolerance_note(section))}</p>',
    ]


def _html_section(section: Section, base: str | None) -> list[str]:
    """A section: its takeaway first, then its docs, text, figures, tables and checks."""
    s = section
    out = [f'<section id="{s.key}"><h2>{s.number}. {html.escape(s.title)}</h2>']
    if s.takeaways:
        lines = "".join(f"<p>{_inline(line)}</p>" for line in s.takeaways)
        out.append(f'<div class="takeaway">{_link_references(lines, s)}</div>')
    if s.docs:
        out.append(f'<p class="docs">Explained in: {_doc_links_html(s, base)}</p>')
    for b in s.blocks:
        out += _html_block(s, b)
    if s.checks:
        out += _html_checks(s)
    out.append("</section>")
    return out


def write_html(path: Path, sections: Sequence[Section], meta: dict[str, Any]) -> None:
    """Write ``index.html``: one self-contained page (inline CSS, relative figure links, no script)."""
    out = _html_front(sections, meta)
    for s in sections:
        out += _html_section(s, meta.get("docs_url"))
    out.append(f'<footer class="small">{_inline(meta["footer"])} {_times(sections)}</footer>')
    out.append("</body></html>")
    atomic_write(path, "\n".join(out) + "\n")
