"""The built documentation and the lab report, as a browser shows them.

Every page of the docs (built once, into a temporary directory) and the quick lab report are opened
in headless Chromium (Debian's ``chromium``; ``.ci/run`` installs it) at 1400 and 700 px, and fail on

- a formula that did not render: TeX left in the text after MathJax finished (``\\(``, ``\\[``,
  ``$$``, a ``$...$`` pair, a backslash command such as ``\\frac``), MathJax error nodes, or a docs
  page that did not load MathJax at all (its sidebar has math);
- a table whose rows have more or fewer cells than its header (a ``|`` inside ``$...$`` splits a
  Markdown table's cell);
- typography that changes meaning: an en or em dash where an option's ``--`` was written, curly
  quotes in code or JSON;
- horizontal overflow: the document wider than the viewport; at 1400 px, a code block that
  scrolls sideways;
- a broken internal link: a link, image, script or style sheet whose file or ``#fragment`` does not
  exist.

Apart from those, the docs' search must work from ``file://`` (Sphinx's own JavaScript over its
index: no server, no network), every code block must have a copy button, and the theme must turn
dark when the system asks for it.

The browser is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``): no
port, no extra package, and every wait is for a condition (the load event, then MathJax's
``startup.promise`` and ``document.fonts.ready``), never a sleep. ``test_the_checks_catch_*`` check
the checks against deliberately broken pages.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from conftest import QuickLab

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (1400, 700)
CODE_WIDTH = 1400  # from this width on, no code block may scroll sideways
TIMEOUT = 300.0  # seconds for one protocol reply: a hung browser fails the test instead of hanging
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Runs in the page after its load event: waits for MathJax and the fonts, then reports what does
# not depend on the width (raw TeX, MathJax errors, links).
PROBE = r"""
(async () => {
  const mj = window.MathJax;
  const mathjax = !!(mj && mj.startup && mj.startup.promise);
  if (mathjax) await mj.startup.promise;
  await document.fonts.ready;
  const code = new Set(["PRE", "CODE", "KBD", "SAMP", "TT"]);
  const skip = new Set(["SCRIPT", "STYLE", "TEXTAREA", "NOSCRIPT", ...code]);
  // TeX that MathJax did not typeset: a \( \[ or $$ delimiter, a $...$ pair around something that
  // is not a space, or a backslash command (\frac, \mathbb) left in the text.
  const tex = /\\\(|\\\[|\$\$|\$[^$\s][^$]*\$|\\[A-Za-z]{2,}/;
  // Typography that changes meaning: an en or em dash where "--" was written before an option
  // (in code or prose), and curly quotes in code, options or JSON.
  const option = /(^|[\s(\[=])[\u2013\u2014][A-Za-z]/;
  const curly = /[\u2018\u2019\u201c\u201d]/;
  const raw = [], typography = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent;
    let p = n.parentElement, inCode = false, skipped = false;
    for (; p; p = p.parentElement) {
      if (p.tagName.startsWith("MJX-") || p.tagName === "MATH") { skipped = true; break; }
      if (code.has(p.tagName)) inCode = true;
      if (skip.has(p.tagName)) skipped = true;
    }
    const where = text.trim().slice(0, 160);
    if (!skipped && tex.test(text)) raw.push(where);
    if (inCode && curly.test(text)) typography.push(`curly quotes in code: ${where}`);
    if (option.test(text)) typography.push(`a dash for an option's --: ${where}`);
  }
  // A table row with more or fewer cells than its header (a "|" inside $...$ of a Markdown
  // table splits a cell). Tables with row spans are not counted.
  const tables = [];
  for (const t of document.querySelectorAll("table")) {
    const rows = [...t.rows];
    if (rows.length < 2 || rows.some((r) => [...r.cells].some((c) => c.rowSpan > 1))) continue;
    const width = (r) => [...r.cells].reduce((n, c) => n + c.colSpan, 0);
    const head = width(rows[0]);
    const bad = rows.map((r, i) => [i, width(r)]).filter(([, w]) => w !== head);
    if (bad.length) {
      const name = rows[0].textContent.trim().replace(/\s+/g, " ").slice(0, 60);
      tables.push(`table "${name}": header ${head} columns, ` +
        bad.slice(0, 3).map(([i, w]) => `row ${i} ${w}`).join(", "));
    }
  }
  const errors = [
    ...[...document.querySelectorAll("mjx-merror")]
      .filter((e) => !e.parentElement.closest("mjx-merror"))
      .map((e) => e.getAttribute("data-mjx-error") || e.textContent.slice(0, 160)),
    // MathJax shows an undefined macro as red text, not as an error node.
    ...[...document.querySelectorAll('mjx-assistive-mml mtext[mathcolor="red"]')].map(
      (e) => `undefined control sequence ${e.textContent}`),
  ];
  const links = [
    ...[...document.querySelectorAll("a[href]")].map((a) => a.href),
    ...[...document.querySelectorAll("img[src], script[src]")].map((e) => e.src),
    ...[...document.querySelectorAll("link[href][rel~=stylesheet]")].map((e) => e.href),
  ];
  return JSON.stringify({mathjax, raw, typography, tables, errors, links});
})()
"""

# Runs at each width: is the document wider than the viewport, and which outermost elements stick out.
MEASURE = r"""
(() => {
  const root = document.documentElement;
  const width = root.clientWidth;
  const wide = [];
  if (root.scrollWidth > width) {
    for (const e of document.body.querySelectorAll("*")) {
      const out = (x) => x && x.getBoundingClientRect().right > width + 1;
      if (out(e) && !out(e.parentElement)) {
        const name = e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
          [...e.classList].map((c) => "." + c).join("");
        wide.push(`${name} (right edge ${Math.round(e.getBoundingClientRect().right)} px)`);
      }
    }
  }
  // code blocks that scroll sideways (hide part of a line behind a scroll bar)
  const scrolling = [...document.querySelectorAll("div.highlight pre")]
    .filter((e) => e.scrollWidth > e.clientWidth + 1)
    .map((e) => e.textContent.trim().split("\n")[0].slice(0, 80));
  return JSON.stringify({scrollWidth: root.scrollWidth, width, wide, scrolling});
})()
"""


# Runs on search.html?q=...: waits until Sphinx's search (its own JavaScript over searchindex.js,
# no server) has listed its results, and returns the pages found.
SEARCH = r"""
(async () => {
  const deadline = Date.now() + 60000;
  const status = () => document.querySelector("#search-results .search-summary");
  const done = () => status() && /finished|did not match/.test(status().textContent);
  while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const hits = [...document.querySelectorAll("#search-results ul.search li a")];
  return JSON.stringify({
    finished: !!done(),
    pages: hits.map((a) => a.getAttribute("href")).filter((h) => h && !h.startsWith("#")),
  });
})()
"""


class BrowserError(RuntimeError):
    """The browser failed, hung or answered a command with an error."""


def find_chromium() -> str:
    """The Chromium executable: ``REFIMPL_CHROMIUM``, else the first of the usual names on PATH."""
    env = os.environ.get("REFIMPL_CHROMIUM")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"REFIMPL_CHROMIUM={env} is not an executable file")
        return env
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "the browser test needs Chromium and found none of "
        f"{', '.join(CHROMIUM_NAMES)} on PATH (nor REFIMPL_CHROMIUM). Install Debian's package: "
        "apt-get update && apt-get install -y chromium (.ci/run does this before the tests)."
    )


class Chromium:
    """Headless Chromium driven through the DevTools protocol over ``--remote-debugging-pipe``."""

    def __init__(self, executable: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="refimpl-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            "about:blank",
        ]
        # The protocol pipe is the browser's fds 3 (commands in) and 4 (replies out).
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
        self.process = subprocess.Popen(
            ["bash", "-c", script, executable, *args],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.send("Page.enable", session=self.session)

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], TIMEOUT)
            if not ready:
                raise BrowserError(f"Chromium sent nothing for {TIMEOUT:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium exited: {self._stderr()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        result: dict[str, Any] = json.loads(message)
        return result

    def _stderr(self) -> str:
        self.process.kill()
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")[-3000:]

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method} failed: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def wait_for_event(self, method: str) -> dict[str, Any]:
        """The first event ``method`` of the page's session (kept or still to come)."""
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == self.session:
                    return self._events.pop(i)
            self._events.append(self._read_message())

    def evaluate(self, expression: str) -> dict[str, Any]:
        """Run ``expression`` (a JSON string, or a promise of one) in the page and parse it."""
        reply = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
            session=self.session,
        )
        if "exceptionDetails" in reply:
            details = reply["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"the page's scripts failed: {text}")
        result: dict[str, Any] = json.loads(reply["result"]["value"])
        return result

    def resize(self, width: int) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session=self.session,
        )

    def open(self, url: str, width: int) -> None:
        """Open ``url`` at ``width`` px and wait for its load event."""
        self.resize(width)
        self._events.clear()
        navigation = self.send("Page.navigate", {"url": url}, session=self.session)
        if navigation.get("errorText"):
            raise BrowserError(f"{url}: {navigation['errorText']}")
        self.wait_for_event("Page.loadEventFired")

    def close(self) -> None:
        try:
            self.send("Browser.close")
            self.process.wait(timeout=TIMEOUT)
        except (BrowserError, OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            if self.process.stderr is not None:
                self.process.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)


@dataclass
class Findings:
    """What is wrong with one page at one width (empty lists: nothing)."""

    raw_tex: list[str] = field(default_factory=list)
    math_errors: list[str] = field(default_factory=list)
    overflow: list[str] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)
    typography: list[str] = field(default_factory=list)
    broken_tables: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return [
            *(f"raw TeX left unrendered: {t!r}" for t in self.raw_tex),
            *(f"MathJax error: {e!r}" for e in self.math_errors),
            *(f"typography: {t!r}" for t in self.typography),
            *(f"broken table: {t}" for t in self.broken_tables),
            *self.overflow,
            *(f"broken internal link: {link}" for link in self.broken_links),
        ]


_ids: dict[Path, set[str]] = {}


def anchors(path: Path) -> set[str]:
    """The ``id``/``name`` attributes of an HTML file (its link targets), cached."""
    if path not in _ids:
        text = path.read_text(errors="replace")
        _ids[path] = set(re.findall(r"""\b(?:id|name)=["']([^"']+)["']""", text))
    return _ids[path]


def broken(links: list[str], page: Path, relocate: dict[Path, Path] | None = None) -> list[str]:
    """The ``file://`` links (with their fragments) that point nowhere; others are not internal.

    ``relocate`` maps a directory the links point into onto the one to look in instead (the lab
    report links to ``docs/_build/html`` of the checkout; the test looks in its own docs build).
    """
    bad = []
    for link in links:
        parts = urlsplit(link)
        if parts.scheme != "file":
            continue
        target = Path(unquote(parts.path))
        for old, new in (relocate or {}).items():
            if target.is_relative_to(old):
                target = new / target.relative_to(old)
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            bad.append(f"{link} (no such file)")
        elif (
            parts.fragment
            and target.suffix == ".html"
            and unquote(parts.fragment) not in anchors(target)
        ):
            bad.append(f"{link} (no #{parts.fragment} in {target.name})")
    return bad


def inspect(
    browser: Chromium,
    page: Path,
    widths: tuple[int, ...] = WIDTHS,
    *,
    needs_mathjax: bool,
    relocate: dict[Path, Path] | None = None,
) -> dict[int, Findings]:
    """Open ``page`` once, wait for MathJax, and check it at each width (narrowing the viewport)."""
    browser.open(page.as_uri(), widths[0])
    result = browser.evaluate(PROBE)
    raw, errors = list(result["raw"]), list(result["errors"])
    if needs_mathjax and not result["mathjax"]:
        raw.append("(MathJax was not loaded on this page)")
    links = broken(result["links"], page, relocate)
    found = {}
    for width in widths:
        browser.resize(width)
        measured = browser.evaluate(MEASURE)
        overflow = []
        if measured["scrollWidth"] > measured["width"]:
            overflow.append(
                f"horizontal overflow at {width} px: the document is {measured['scrollWidth']} px "
                f"wide; sticking out: {'; '.join(measured['wide'][:5])}"
            )
        if width >= CODE_WIDTH and measured["scrolling"]:
            overflow.append(
                f"code blocks scroll sideways at {width} px (first lines: "
                f"{'; '.join(map(repr, measured['scrolling'][:3]))})"
            )
        # Raw TeX, errors and links do not depend on the width: reported at the first only.
        first = width == widths[0]
        found[width] = Findings(
            raw_tex=raw if first else [],
            math_errors=errors if first else [],
            overflow=overflow,
            broken_links=links if first else [],
            typography=list(result["typography"]) if first else [],
            broken_tables=list(result["tables"]) if first else [],
        )
    return found


def report(pages: dict[str, Findings]) -> str:
    return "\n".join(
        f"{name}:\n" + "\n".join(f"    {p}" for p in f.problems())
        for name, f in pages.items()
        if f.problems()
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    chromium = Chromium(find_chromium())
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs built from this checkout, warnings as errors, into a temporary directory.

    ``.ci/run`` sets ``REFIMPL_DOCS_HTML`` to the checkout's ``docs/_build/html``: the gate's docs
    build is then this one (the same command), done once instead of twice.
    """
    target = os.environ.get("REFIMPL_DOCS_HTML")
    out = tmp_path_factory.mktemp("docs")
    html, doctrees = (Path(target) if target else out / "html"), out / "doctrees"
    if target:
        shutil.rmtree(html, ignore_errors=True)
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    result = subprocess.run(
        [*command, "-d", str(doctrees), str(ROOT / "docs"), str(html)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"the docs build failed:\n{result.stdout}\n{result.stderr}"
    return html


def docs_pages(html: Path) -> list[Path]:
    skip = {"_static", "_sources", "_images", "_modules"}
    return sorted(p for p in html.rglob("*.html") if not skip & set(p.relative_to(html).parts))


@pytest.mark.slow
def test_every_docs_page_renders_its_math_fits_and_links_only_to_what_exists(
    browser: Chromium, built_docs: Path
) -> None:
    pages = docs_pages(built_docs)
    assert len(pages) > 30, [p.name for p in pages]
    found = {}
    for page in pages:
        for width, findings in inspect(browser, page, needs_mathjax=True).items():
            found[f"{page.relative_to(built_docs)} at {width} px"] = findings
    assert not report(found), report(found)


@pytest.mark.slow
def test_search_works_offline_from_the_files(browser: Chromium, built_docs: Path) -> None:
    """The docs opened from disk (file://, no server, no network) find a function by name and a
    concept in the prose."""
    browser.open((built_docs / "search.html").as_uri() + "?q=staleness_mask", WIDTHS[0])
    result = browser.evaluate(SEARCH)
    assert result["finished"], result
    assert "api/staleness.html#refimpl.staleness_mask" in result["pages"], result
    browser.open((built_docs / "search.html").as_uri() + "?q=admission", WIDTHS[0])
    result = browser.evaluate(SEARCH)
    assert "concepts/sim-async-admission.html" in result["pages"], result


THEME = r"""
(() => {
  const rgb = (c) => c.match(/\d+/g).slice(0, 3).map(Number);
  const luminance = (c) => rgb(c).reduce((a, b) => a + b, 0) / 765;
  const style = getComputedStyle(document.body);
  return JSON.stringify({
    code_blocks: document.querySelectorAll("div.highlight").length,
    copy_buttons: document.querySelectorAll("div.highlight button.copybtn").length,
    background: luminance(style.backgroundColor),
    text: luminance(style.color),
  });
})()
"""


@pytest.mark.slow
def test_code_blocks_have_copy_buttons_and_the_theme_follows_a_dark_system(
    browser: Chromium, built_docs: Path
) -> None:
    page = (built_docs / "getting-started.html").as_uri()
    looks = {}
    for scheme in ("light", "dark"):
        browser.send(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
            session=browser.session,
        )
        browser.open(page, WIDTHS[0])
        looks[scheme] = browser.evaluate(THEME)
    browser.send("Emulation.setEmulatedMedia", {"features": []}, session=browser.session)
    light, dark = looks["light"], looks["dark"]
    assert light["code_blocks"] > 0, light
    assert light["copy_buttons"] == light["code_blocks"], light
    assert light["background"] > 0.9 > 0.3 > light["text"], light
    assert dark["background"] < 0.2 < 0.6 < dark["text"], dark


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_lab_report_renders_its_math_fits_and_links_only_to_what_exists(
    browser: Chromium, quick_lab: QuickLab, built_docs: Path, width: int
) -> None:
    assert quick_lab.result.returncode == 0, quick_lab.result.stderr[-3000:]
    page = quick_lab.report / "index.html"
    # The report links to the checkout's docs build (docs/_build/html, built after the tests by
    # .ci/run); its links are checked against this test's build of the same sources.
    relocate = {ROOT / "docs" / "_build" / "html": built_docs}
    found = {
        f"lab-report/index.html at {width} px": inspect(
            browser, page, (width,), needs_mathjax=False, relocate=relocate
        )[width]
    }
    assert not report(found), report(found)


def test_the_docs_css_never_breaks_a_word_mid_word() -> None:
    """Tables and prose wrap between words; long code wraps at the ``<wbr>`` the build inserts."""
    css = (ROOT / "docs" / "_static" / "refimpl.css").read_text()
    rules = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    assert "anywhere" not in rules
    assert "break-all" not in rules


BROKEN_PAGES = {
    # Math markup with no renderer: the TeX stays raw.
    "raw.html": '<p><span class="math">\\(x^2\\)</span> and $$y$$</p>',
    # TeX errors: an error node, and an undefined macro (which MathJax shows in red).
    "error.html": "{mathjax}<p>\\(\\frac{1}\\) and \\(\\undefinedmacro x\\)</p>",
    # A table wider than a narrow viewport.
    "wide.html": '<table style="width: 1000px"><tr><td>wide</td></tr></table>',
    # TeX that no renderer saw: a $...$ pair, a backslash command, a formula cut by a list item.
    "tex.html": "<p>the cost $x^2$ grows</p><p>a \\frac{a}{b} left over</p>"
    "<ul><li>1, 0, 1)$; averaging, $E[s] = N/B$</li></ul><p>costs $5 and more</p>",
    # A Markdown table whose row a "|" inside $...$ split into one cell too many.
    "table.html": "<table><thead><tr><th>op</th><th>condition</th></tr></thead><tbody>"
    "<tr><td>exp</td><td>|d| + 3</td></tr><tr><td>sum</td><td>$(</td><td>d</td></tr>"
    "</tbody></table>",
    # Smart quotes in JSON and en dashes for an option's "--".
    "typography.html": "<pre>{\u201ca\u201d: 1}</pre><p>run <code>refimpl lab \u2013quick</code>"
    " or pass \u2013seed 0; pages 1\u20134 \u2013 fine</p>",
    # A code block whose line is wider than the column: it scrolls sideways.
    "code.html": '<div class="highlight" style="width: 600px"><pre style="overflow-x: auto">'
    + "x = 1  # "
    + "long " * 60
    + "</pre></div>",
    # A missing page, a missing fragment, a missing image.
    "links.html": '<a href="missing.html">x</a> <a href="#nowhere">y</a> <img src="nothing.png">',
}


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory, built_docs: Path) -> Path:
    """Each page breaks one rule; the MathJax of the built docs renders the math."""
    out = tmp_path_factory.mktemp("broken")
    script = f'<script defer src="{(built_docs / "_static" / "mathjax" / "tex-chtml.js").as_uri()}"></script>'
    for name, body in BROKEN_PAGES.items():
        body = body.replace("{mathjax}", script)
        html = f"<!doctype html><html><head><title>{name}</title></head><body>{body}</body></html>"
        (out / name).write_text(html)
    return out


@pytest.mark.slow
def test_the_checks_catch_raw_tex_broken_tables_typography_overflow_and_broken_links(
    browser: Chromium, broken_site: Path
) -> None:
    def check(name: str, *, needs_mathjax: bool = False) -> dict[int, Findings]:
        return inspect(browser, broken_site / name, needs_mathjax=needs_mathjax)

    raw = check("raw.html")[1400]
    assert raw.raw_tex == ["\\(x^2\\)", "and $$y$$"], raw
    assert (raw.math_errors, raw.overflow, raw.broken_links) == ([], [], []), raw
    error = check("error.html")[1400]
    assert error.math_errors == [
        "Missing argument for \\frac",
        "undefined control sequence \\undefinedmacro",
    ], error
    assert (error.raw_tex, error.overflow) == ([], []), error
    wide = check("wide.html")
    assert not wide[1400].problems(), wide
    (overflow,) = wide[700].overflow
    assert "table" in overflow, wide
    tex = check("tex.html")[1400]
    assert tex.raw_tex == [
        "the cost $x^2$ grows",
        "a \\frac{a}{b} left over",
        "1, 0, 1)$; averaging, $E[s] = N/B$",
    ], tex
    table = check("table.html")[1400]
    assert table.broken_tables == ['table "opcondition": header 2 columns, row 2 3'], table
    assert table.raw_tex == [], table  # "$(" alone is not a formula
    typography = check("typography.html")[1400]
    assert typography.typography == [
        "curly quotes in code: {\u201ca\u201d: 1}",
        "a dash for an option's --: refimpl lab \u2013quick",
        "a dash for an option's --: or pass \u2013seed 0; pages 1\u20134 \u2013 fine",
    ], typography
    code = check("code.html")
    (scrolls,) = code[1400].overflow
    assert scrolls.startswith("code blocks scroll sideways at 1400 px"), code
    assert not code[700].problems(), code  # on a narrow screen a code block may scroll
    links = check("links.html")[1400]
    assert [b.split("/")[-1] for b in links.broken_links] == [
        "missing.html (no such file)",
        "links.html#nowhere (no #nowhere in links.html)",
        "nothing.png (no such file)",
    ], links
    assert check("wide.html", needs_mathjax=True)[1400].raw_tex == [
        "(MathJax was not loaded on this page)"
    ]
