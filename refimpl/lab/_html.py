"""The HTML pieces of the lab report: its style sheet, the tiny Markdown subset of its text, and
tables that scroll inside their own box. Nothing here knows what a section is.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Iterable, Sequence

__all__ = ["CSS", "html_table", "html_text", "inline", "td", "th"]

# Layout rules (checked in a browser at 1400 and 700 CSS px; the page never scrolls sideways,
# ``document.documentElement.scrollWidth <= window.innerWidth``):
# - the text column is at most 1020 px; every table sits in a ``.table-wrap`` that scrolls
#   horizontally inside itself when the table is wider than the column (narrow windows);
# - numbers never wrap (``td.num``); text cells and long headers keep a minimum width (an empty
#   block of that width: ``min-width`` on table cells is ignored or inflates columns in browsers) so
#   that no column shrinks to one word per line;
# - figures are displayed at their CSS width (``width`` attribute) and shrink with the column.
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1020px;margin:2em auto;
padding:0 1.2em;color:#1d2330;line-height:1.5;background:#fbfbfd;overflow-wrap:break-word}
h1{font-size:1.9em;margin-bottom:.2em}h2{margin-top:2.2em;border-bottom:2px solid #d9dde8;padding-bottom:.2em}
code{background:#eef0f6;padding:0 .25em;border-radius:3px;font-size:.92em}
figure{margin:1.2em 0;background:#fff;border:1px solid #e1e4ec;border-radius:6px;padding:.6em}
figure img{max-width:100%;height:auto;display:block;margin:auto}
figcaption{font-size:.92em;color:#444;margin-top:.4em}
.table-wrap{max-width:100%;overflow-x:auto;margin:.8em 0}
table{border-collapse:collapse;font-size:.9em;background:#fff}
th,td{border:1px solid #d9dde8;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#eef0f6;font-weight:600}
td.num{white-space:nowrap;font-variant-numeric:tabular-nums}
td.txt{text-align:left}td.txt code{overflow-wrap:normal}
th .w{display:block;height:0}td.txt::before{content:"";display:block;height:0;width:8em}
th:first-child,th.l{text-align:left}
.caption{font-weight:600;margin:1.2em 0 0}.tag{color:#55607a;font-weight:600}.note{font-size:.85em;color:#555;margin:.2em 0 1em}
.docs{color:#555;font-size:.95em}
.bad{color:#b00020;font-weight:700}.ok{color:#1b7f3b}
.unavailable{background:#fff4e5;border-left:4px solid #f0a020;padding:.6em 1em}
nav ol{columns:2 18em}.small{font-size:.85em;color:#666}
.takeaway{background:#eef6ff;border-left:4px solid #3b6fd4;padding:.1em 1em;margin:1em 0}
.takeaway p{margin:.45em 0}.takeaway p:first-child{font-weight:600}
.meaning{color:#3d4b66;font-style:italic}.glance li{margin-bottom:.5em}
footer{margin-top:2.5em;border-top:1px solid #d9dde8;padding-top:.6em}
.glance{background:#eef6ff;border-radius:6px;padding:.2em 1.2em .6em}.glance h2{margin-top:.6em;border:0}
.reading{background:#f4f5f9;border-radius:6px;padding:.2em 1.2em .6em;margin-top:1em}
.reading h2{margin-top:.6em;border:0;font-size:1.25em}
"""

_NUMBER = re.compile(r"^[-+−]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?( ?%)?$|^-?inf$|^nan$|^—$")


def _code(match: re.Match[str]) -> str:
    """An inline code span; a long one may wrap after its ``.``, ``_``, ``:`` and ``/`` (``<wbr>``:
    not text, so a copied name stays whole), never inside a word."""
    code = match[1]
    if len(code) > 16:
        code = re.sub(r"(?<=[._:/])(?=\w)", "<wbr>", code)
    return f"<code>{code}</code>"


def inline(text: str) -> str:
    t = html.escape(text, quote=False)
    t = re.sub(r"`([^`]+)`", _code, t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", t)
    t = re.sub(r"(?<![*\w])\*([^*\s][^*]*)\*(?![*\w])", r"<em>\1</em>", t)
    t = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', t)
    return t


def html_text(markdown: str) -> str:
    parts = []
    for para in re.split(r"\n\s*\n", markdown.strip()):
        lines = para.splitlines()
        if all(line.lstrip().startswith("- ") for line in lines):
            items = "".join(f"<li>{inline(line.lstrip()[2:])}</li>" for line in lines)
            parts.append(f"<ul>{items}</ul>")
        else:
            parts.append(f"<p>{inline(' '.join(lines))}</p>")
    return "\n".join(parts)


def td(cell: str, *, raw: bool = False) -> str:
    """A table cell: numbers right-aligned and unbreakable, text left-aligned with a minimum width."""
    plain = re.sub(r"<[^>]+>", "", cell) if raw else cell
    cls = "num" if _NUMBER.match(plain.strip()) or raw else "txt"
    return f'<td class="{cls}">{cell if raw else inline(cell)}</td>'


def th(column: str, *, left: bool = False) -> str:
    """A header cell at least as wide as its longest pair of adjacent words (at most 2 lines
    for a 3-word header, never one word per line), through an empty block of that width; left
    aligned over a column of text."""
    tag = '<th class="l">' if left else "<th>"
    words = column.split()
    if len(words) < 3:
        return f"{tag}{inline(column)}</th>"
    pair = max(len(a) + 1 + len(b) for a, b in itertools.pairwise(words))
    width = min(0.62 * pair, 9.0)
    return f'{tag}<span class="w" style="width:{width:.1f}em"></span>{inline(column)}</th>'


def html_table(
    columns: Sequence[str], rows: Iterable[Sequence[str]], *, raw_last: bool = False
) -> str:
    """A table inside its own horizontally scrolling container (never the whole page)."""
    rows = [list(r) for r in rows]
    text = [all(not _NUMBER.match(r[i].strip()) for r in rows) for i in range(len(columns))]
    head = "".join(th(c, left=t) for c, t in zip(columns, text, strict=True))
    body = "".join(
        "<tr>" + "".join(td(c, raw=raw_last and i == len(r) - 1) for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )
