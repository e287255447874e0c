"""Sphinx configuration for refimpl's documentation (built by .ci/run with warnings as errors)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # proofs/ is not installed

project = "refimpl"
author = "the refimpl developers"
copyright = "2026, the refimpl developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    # MathJax 3 shipped with the docs (copied into _static/mathjax), so formulas render offline.
    "sphinx-mathjax-offline",
    # The CLI reference is generated from the argparse parsers themselves.
    "sphinxarg.ext",
    "matplotlib.sphinxext.plot_directive",
    # A copy button on every code block; prompts and doctest output are not copied.
    "sphinx_copybutton",
]
# The bundled copy, not a CDN; loaded on every page (see setup) so that math in the sidebar and
# in page titles renders on pages that have no formula of their own.
mathjax_path = "mathjax/tex-chtml.js"
# Figures made at build time by ``.. plot::`` (code runs against the installed refimpl).
plot_include_source = False
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# Markdown links (`[OS1](#os1)`) resolve against these domains only; sphinx-argparse adds a domain
# that cannot resolve them and warns for every link.
myst_ref_domains = ["std", "py"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_typehints = "description"
autodoc_member_order = "bysource"
# Furo: light and dark modes (following the reader's system setting, with a toggle), a responsive
# layout, and Sphinx's own search, which runs in the browser and so works from file:// offline.
html_theme = "furo"
html_title = "refimpl"
# Options, flags, JSON and code must reach the reader as written: smart quotes would turn ``--flag``
# into an en dash and straight quotes into curly ones wherever docutils does not know a span is code
# (sphinx-argparse's option lists, for one).
smartquotes = False
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False
html_static_path = ["_static"]
html_css_files = ["refimpl.css"]
nitpicky = False

# Public modules whose ``__all__`` must be documented in the API reference; the flat names of
# ``refimpl.__all__`` count when documented as ``refimpl.NAME`` or under their defining module.
PUBLIC_SUBMODULES = [
    "refimpl.frameworks",
    "refimpl.learning",
    "refimpl.sim",
    "refimpl.sim.agent",
    "refimpl.testing",
    "refimpl.testing.strategies",
    "refimpl.testing.tolerances",
    "refimpl.sweep",
]

logger = logging.getLogger("refimpl.docs")


def _generate_derivations(app: Sphinx) -> None:
    """Write docs/derivations/<module>.md from each proof module: its docstring, then its claims."""
    from proofs._framework import all_claims, derivation_page

    out = Path(app.srcdir) / "derivations"
    out.mkdir(exist_ok=True)
    claims = all_claims()
    modules = sorted({c.module for c in claims.values()})
    for name in modules:
        text = derivation_page(name, claims.values())
        page = out / f"{name.split('.')[-1]}.md"
        if not page.exists() or page.read_text() != text:
            page.write_text(text)


def _generate_conformance_matrix(app: Sphinx) -> None:
    """Write docs/conformance-matrix.md from the committed docs/conformance-matrix.json."""
    import json

    from refimpl.frameworks._matrix import render_markdown

    source = Path(app.srcdir) / "conformance-matrix.json"
    page = Path(app.srcdir) / "conformance-matrix.md"
    text = render_markdown(json.loads(source.read_text(encoding="utf-8")))
    if not page.exists() or page.read_text(encoding="utf-8") != text:
        page.write_text(text, encoding="utf-8")


def _check_api_documented(app: Sphinx, env: Any) -> None:
    """Warn (an error under -W) for every public name without an API reference entry."""
    import refimpl

    documented = set(env.get_domain("py").objects)
    missing = []
    for name in refimpl.__all__:
        obj = getattr(refimpl, name)
        home = getattr(obj, "__module__", "refimpl")
        if f"refimpl.{name}" not in documented and f"{home}.{name}" not in documented:
            missing.append(f"refimpl.{name}")
    for modname in PUBLIC_SUBMODULES:
        try:
            module = importlib.import_module(modname)
        except ImportError:
            continue
        for name in getattr(module, "__all__", []):
            home = getattr(getattr(module, name), "__module__", modname)
            places = {f"{modname}.{name}", f"refimpl.{name}", f"{home}.{name}"}
            if not places & documented:
                missing.append(f"{modname}.{name}")
    for name in missing:
        logger.warning("public name %s has no entry in the API reference (docs/api/)", name)


def _check_plot_prefixes(app: Sphinx, docname: str, source: list[str]) -> None:
    """Warn when a page has several ``.. plot::`` blocks and one lacks ``:filename-prefix:``.

    In MyST every ``{eval-rst}`` block is parsed on its own, so matplotlib's plot directive numbers
    each page's inline figures from 1 again and a second figure silently overwrites the first.
    """
    text = source[0]
    plots = text.count(".. plot::")
    if plots > 1 and text.count(":filename-prefix:") < plots:
        logger.warning(
            "%s has %d plot directives but not every one has a distinct :filename-prefix:; "
            "their images would overwrite each other",
            docname,
            plots,
        )


# A citation of a definition on the conventions page: "conventions §staleness" (see that page).
_CITATION = re.compile(r"§([a-z][a-z0-9-]*)")
_CONVENTIONS = Path(__file__).resolve().parent / "concepts" / "conventions.md"


def convention_anchors() -> set[str]:
    """The anchors that the conventions page defines (its ``(name)=`` targets)."""
    return set(re.findall(r"^\(([a-z][a-z0-9-]*)\)=$", _CONVENTIONS.read_text(), flags=re.M))


def _link_citations_in_pages(app: Sphinx, docname: str, source: list[str]) -> None:
    """Turn each ``§<anchor>`` of a Markdown page into a link to that anchor of the conventions page.

    Fenced code blocks are left alone; an anchor the conventions page does not define is a warning
    (an error under -W).
    """
    if app.env.doc2path(docname).suffix != ".md":
        return
    anchors = convention_anchors()
    lines = source[0].split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue

        def link(match: re.Match[str]) -> str:
            if match[1] not in anchors:
                logger.warning(
                    "%s cites conventions §%s, which docs/concepts/conventions.md does not define",
                    docname,
                    match[1],
                )
                return match[0]
            return f"{{ref}}`§{match[1]} <{match[1]}>`"

        lines[i] = _CITATION.sub(link, line)
    source[0] = "\n".join(lines)


_CLAIM_ID = re.compile(
    r"(?<![`\w-])((?:LB|OS|KM|FL|EF|PEN|VT|IS|ESS|ST|PS|SQ|KL|AD|RJ|LP|AG|GAE)\d+)(?![`\w])"
)


def _link_claim_ids(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Turn the claim ids (``EF1``, ``LB3``) and the conventions citations (``§staleness``) that a
    docstring cites into links to their derivations and to the conventions page.

    Math blocks and doctest lines are left alone; an id that no proof registers, or an anchor that
    the conventions page does not define, is a warning (an error under -W).
    """
    from proofs._framework import all_claims

    known = all_claims()
    anchors = convention_anchors()
    math_indent: int | None = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if math_indent is not None:
            if not stripped or indent > math_indent:
                continue
            math_indent = None
        if stripped.startswith(".. math::"):
            math_indent = indent
            continue
        if stripped.startswith((">>>", "...")):
            continue

        def link(match: re.Match[str]) -> str:
            claim_id = match[1]
            if claim_id not in known:
                logger.warning("%s cites claim %s, which no proof registers", name, claim_id)
                return claim_id
            return f":ref:`{claim_id} <{claim_id.lower()}>`"

        def cite(match: re.Match[str]) -> str:
            if match[1] not in anchors:
                logger.warning(
                    "%s cites conventions §%s, which docs/concepts/conventions.md does not define",
                    name,
                    match[1],
                )
                return match[0]
            return f":ref:`§{match[1]} <{match[1]}>`"

        lines[i] = _CITATION.sub(cite, _CLAIM_ID.sub(link, line))


# Inline code in the built pages (``<code class="docutils literal"><span class="pre">…``): a break
# opportunity after each ``.``, ``_``, ``:`` and ``/`` of an identifier, so that a long qualified name
# wraps at a boundary a reader sees instead of mid-word or past the column. ``<wbr>`` is not text:
# copying the name copies it whole.
_INLINE_CODE = re.compile(
    r'(<code class="docutils literal[^"]*"><span class="pre">)([^<]+)(</span>)'
)
_BREAK_AFTER = re.compile(r"(?<=[._:/])(?=\w)")


def _break_long_identifiers(app: Sphinx, exception: Exception | None) -> None:
    """Insert ``<wbr>`` at the boundaries of inline code longer than a short word, in every page."""
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")

        def split(match: re.Match[str]) -> str:
            code = match[2]
            if len(code) <= 16:
                return match[0]
            return match[1] + _BREAK_AFTER.sub("<wbr>", code) + match[3]

        new = _INLINE_CODE.sub(split, text)
        if new != text:
            page.write_text(new, encoding="utf-8")


def _dash_field_separators(app: Sphinx, doctree: Any, docname: str) -> None:
    """Show the `` -- `` that Sphinx puts between a parameter's name and type and its description as
    the en dash it stands for (with smart quotes off, nothing else turns it into one)."""
    from docutils import nodes

    for text in list(doctree.findall(nodes.Text)):
        if str(text) == " -- " and not isinstance(text.parent, nodes.literal):
            text.parent.replace(text, nodes.Text(" \u2013 "))


def setup(app: Sphinx) -> dict[str, Any]:
    # Page titles with math ("first-$k$-of-$n$") appear in every page's sidebar and toctree.
    app.set_html_assets_policy("always")
    app.connect("autodoc-process-docstring", _link_claim_ids)
    app.connect("builder-inited", _generate_derivations)
    app.connect("builder-inited", _generate_conformance_matrix)
    app.connect("source-read", _check_plot_prefixes)
    app.connect("source-read", _link_citations_in_pages)
    app.connect("env-check-consistency", _check_api_documented)
    app.connect("doctree-resolved", _dash_field_separators)
    app.connect("build-finished", _break_long_identifiers)
    return {"parallel_read_safe": True}
