"""The lab report: sections made of text, figures, tables and closed-form-vs-simulation checks.

A section records every number it shows in its ``metrics`` (written to ``metrics.json``), and every
pairing of a closed form with a simulation as a :class:`Check` with the tolerance it is held to and the
rule that tolerance comes from. The writers turn the sections into ``index.html`` (self-contained: inline
CSS, figures as relative ``figures/*.png`` links, no script, no CDN), ``report.md`` and
``metrics.json``.
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

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

__all__ = [
    "Check",
    "DocLink",
    "FigureBlock",
    "Section",
    "TableBlock",
    "TextBlock",
    "fmt",
    "write_html",
    "write_markdown",
    "write_metrics",
]


class DocLink(NamedTuple):
    """A documentation page that explains a section (path relative to ``docs/``, without suffix)."""

    page: str
    title: str


class TextBlock(NamedTuple):
    """A paragraph or list in a tiny Markdown subset (``**bold**``, `` `code` ``, ``- `` items)."""

    markdown: str


class FigureBlock(NamedTuple):
    """A figure saved as ``figures/<file>``."""

    file: str
    caption: str


class TableBlock(NamedTuple):
    """A table of formatted cells; its raw numbers are in the section's metrics under ``key``."""

    key: str
    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


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


def fmt(value: float, digits: int = 3) -> str:
    """Format a number for the report: ``digits`` significant digits, ``inf`` spelled out.

    Examples
    --------
    >>> fmt(0.123456), fmt(1234.6), fmt(2.5e7), fmt(float("inf")), fmt(3)
    ('0.123', '1235', '2.5e+07', 'inf', '3')
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    v = float(value)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        return "nan"
    if 10**digits <= abs(v) < 1e7:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


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
        dpi: int = 100,
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
        self.seconds = 0.0

    # -- content ---------------------------------------------------------------------------------
    def text(self, markdown: str) -> None:
        """Add a paragraph (or a ``- `` list)."""
        self.blocks.append(TextBlock(markdown.strip()))

    def headline(self, markdown: str) -> None:
        """A one-line finding shown at the top of the report (numbers from the metrics only)."""
        self.headlines.append(markdown.strip())

    def metric(self, key: str, value: Any) -> Any:
        """Record a number (or a list/dict of numbers) shown in the report; return it."""
        if key in self.metrics:
            raise KeyError(f"metric {key!r} recorded twice in section {self.key!r}")
        self.metrics[key] = value
        return value

    def figure(self, fig: MplFigure, name: str, caption: str) -> None:
        """Save ``fig`` as ``figures/<section>-<name>.png`` and add it to the section."""
        file = f"{self.key}-{name}.png"
        self.figures_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(self.figures_dir / file, dpi=self.dpi)
        self.blocks.append(FigureBlock(file, caption.strip()))

    def table(
        self,
        key: str,
        caption: str,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        *,
        digits: int = 3,
    ) -> None:
        """Add a table; its raw cells are recorded as the metric ``key`` (a list of row dicts)."""
        raw = [list(r) for r in rows]
        self.metric(key, [dict(zip(columns, r, strict=True)) for r in raw])
        cells = tuple(tuple(c if isinstance(c, str) else fmt(c, digits) for c in r) for r in raw)
        self.blocks.append(TableBlock(key, caption.strip(), tuple(columns), cells))

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
                "metrics": s.metrics,
                "headlines": s.headlines,
                "checks": [c.as_dict() for c in s.checks],
                "figures": [b.file for b in s.blocks if isinstance(b, FigureBlock)],
            }
            for s in sections
        },
    }
    path.write_text(json.dumps(_jsonable(doc), indent=1, allow_nan=False) + "\n")


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
            "yes" if c.passed else "**NO**",
        )
        for c in section.checks
    ]


CHECK_COLUMNS = ("quantity", "closed form", "simulation", "difference", "tolerance", "agree")


def write_markdown(path: Path, sections: Sequence[Section], meta: dict[str, Any]) -> None:
    """Write ``report.md`` (figures linked as ``figures/*.png``)."""
    out = [f"# {meta['title']}", "", meta["summary"], ""]
    glance = [f"- **{s.title}:** {h}" for s in sections for h in s.headlines]
    if glance:
        out += ["## At a glance", "", *glance, ""]
    out += [_md_table(("", ""), [(k, str(v)) for k, v in meta["settings"].items()]), ""]
    for s in sections:
        out += [f"## {s.number}. {s.title}", ""]
        if s.docs:
            links = ", ".join(f"{d.title} (`docs/{d.page}.md`)" for d in s.docs)
            out += [f"*Explained in:* {links}", ""]
        for b in s.blocks:
            if isinstance(b, TextBlock):
                out += [b.markdown, ""]
            elif isinstance(b, FigureBlock):
                out += [f"![{b.caption}](figures/{b.file})", "", f"*{b.caption}*", ""]
            else:
                out += [f"**{b.caption}**", "", _md_table(b.columns, b.rows), ""]
        if s.checks:
            out += ["**Closed form vs simulation**", "", _md_table(CHECK_COLUMNS, _check_rows(s))]
            out += ["", "Tolerances: " + "; ".join(sorted({c.rule for c in s.checks})) + ".", ""]
    path.write_text("\n".join(out).rstrip() + "\n")


# -- index.html ------------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1020px;margin:2em auto;
padding:0 1.2em;color:#1d2330;line-height:1.5;background:#fbfbfd}
h1{font-size:1.9em;margin-bottom:.2em}h2{margin-top:2.2em;border-bottom:2px solid #d9dde8;padding-bottom:.2em}
code{background:#eef0f6;padding:0 .25em;border-radius:3px;font-size:.92em}
figure{margin:1.2em 0;background:#fff;border:1px solid #e1e4ec;border-radius:6px;padding:.6em}
figure img{max-width:100%;height:auto;display:block;margin:auto}
figcaption{font-size:.92em;color:#444;margin-top:.4em}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em;background:#fff}
th,td{border:1px solid #d9dde8;padding:.25em .6em;text-align:right}
th{background:#eef0f6}td:first-child,th:first-child{text-align:left}
.caption{font-weight:600;margin-top:1em}.docs{color:#555;font-size:.95em}
.bad{color:#b00020;font-weight:700}.ok{color:#1b7f3b}
.unavailable{background:#fff4e5;border-left:4px solid #f0a020;padding:.6em 1em}
nav ol{columns:2}.small{font-size:.85em;color:#666}
.glance{background:#eef6ff;border-radius:6px;padding:.2em 1.2em .6em}.glance h2{margin-top:.6em;border:0}
"""


def _inline(text: str) -> str:
    t = html.escape(text, quote=False)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", t)
    t = re.sub(r"(?<![*\w])\*([^*\s][^*]*)\*(?![*\w])", r"<em>\1</em>", t)
    return t


def _html_text(markdown: str) -> str:
    parts = []
    for para in re.split(r"\n\s*\n", markdown.strip()):
        lines = para.splitlines()
        if all(line.lstrip().startswith("- ") for line in lines):
            items = "".join(f"<li>{_inline(line.lstrip()[2:])}</li>" for line in lines)
            parts.append(f"<ul>{items}</ul>")
        else:
            parts.append(f"<p>{_inline(' '.join(lines))}</p>")
    return "\n".join(parts)


def _html_table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{_inline(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_html(path: Path, sections: Sequence[Section], meta: dict[str, Any]) -> None:
    """Write ``index.html``: one self-contained page (inline CSS, relative figure links)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(meta['title'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(meta['title'])}</h1>",
        _html_text(meta["summary"]),
    ]
    glance = [
        f'<li><a href="#{s.key}"><strong>{html.escape(s.title)}</strong></a>: {_inline(h)}</li>'
        for s in sections
        for h in s.headlines
    ]
    if glance:
        out += ['<div class="glance"><h2>At a glance</h2><ul>', *glance, "</ul></div>"]
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
    for s in sections:
        out.append(f'<section id="{s.key}"><h2>{s.number}. {html.escape(s.title)}</h2>')
        if s.docs:
            links = ", ".join(
                f"{html.escape(d.title)} (<code>docs/{html.escape(d.page)}.md</code>)"
                for d in s.docs
            )
            out.append(f'<p class="docs">Explained in: {links}</p>')
        for b in s.blocks:
            if isinstance(b, TextBlock):
                cls = ' class="unavailable"' if not s.available else ""
                out.append(f"<div{cls}>{_html_text(b.markdown)}</div>")
            elif isinstance(b, FigureBlock):
                src = html.escape(f"figures/{b.file}")
                out.append(
                    f'<figure><img src="{src}" alt="{html.escape(b.caption)}">'
                    f"<figcaption>{_inline(b.caption)}</figcaption></figure>"
                )
            else:
                out.append(f'<p class="caption">{_inline(b.caption)}</p>')
                out.append(_html_table(b.columns, b.rows))
        if s.checks:
            out.append('<p class="caption">Closed form vs simulation</p>')
            rows = [
                (
                    *r[:5],
                    '<span class="ok">yes</span>' if c.passed else '<span class="bad">NO</span>',
                )
                for r, c in zip(_check_rows(s), s.checks, strict=True)
            ]
            head = "".join(f"<th>{c}</th>" for c in CHECK_COLUMNS)
            body = "".join(
                "<tr>"
                + "".join(f"<td>{_inline(c) if i < 5 else c}</td>" for i, c in enumerate(r))
                + "</tr>"
                for r in rows
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            rules = "; ".join(sorted({c.rule for c in s.checks}))
            out.append(f'<p class="small">Tolerances: {_inline(rules)}.</p>')
        out.append(f'<p class="small">Section time: {s.seconds:.1f} s.</p></section>')
    out.append(f'<p class="small">{_inline(meta["footer"])}</p></body></html>')
    path.write_text("\n".join(out) + "\n")
