"""The conformance matrix: every shipped adapter run against its spec, as committed JSON and a docs page.

``docs/conformance-matrix.json`` holds one entry per adapter (framework × function × setting →
spec) with its verdict: ``"pass"`` (no convention declared), ``"pass under conventions"`` (the
conventions are named), or ``"divergence"`` (each failing check with its shrunk counterexample, the
reproduction a maintainer can paste, and its classification). ``refimpl conformance`` reruns it on
the installed versions and prints what changed; CI fails when a fresh run differs from the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from refimpl.frameworks._registry import TESTED_VERSIONS, Adapter, installed_version

__all__ = [
    "MATRIX_EXAMPLES",
    "MATRIX_PATH",
    "SCHEMA",
    "changes",
    "load_matrix",
    "matrix_entry",
    "render_markdown",
    "run_matrix",
    "verdict_of",
]

#: Version of the JSON layout below; bump it when a field changes meaning.
SCHEMA = 1
#: Hypothesis examples per check in the matrix (derandomized: the same inputs every run).
MATRIX_EXAMPLES = 25
#: The committed matrix, relative to a checkout's root.
MATRIX_PATH = Path("docs") / "conformance-matrix.json"

#: Statuses of a check that count as conforming.
_OK = ("passed", "skipped")


def matrix_entry(a: Adapter, *, max_examples: int = MATRIX_EXAMPLES) -> dict[str, Any]:
    """Run adapter ``a``'s checks on the installed function and describe the outcome as a matrix entry.

    Parameters
    ----------
    a : Adapter
        The adapter (:func:`refimpl.frameworks.adapters`).
    max_examples : int
        Hypothesis examples per check.

    Returns
    -------
    dict
        ``key, framework, version, function, settings, spec, dtype, conventions, verdict, checks``
        and ``divergences`` (a list: ``check, status, message, counterexample, reproduction,
        classification, explanation``).
    """
    from refimpl.frameworks import check

    report = check(a.key, max_examples=max(max_examples, a.max_examples or 0))
    divergences = []
    for r in report.results:
        if r.status in _OK:
            continue
        known = a.divergences.get(r.name)
        divergences.append(
            {
                "check": r.name,
                "status": r.status,
                "message": r.message,
                "counterexample": r.counterexample,
                "reproduction": r.reproduction,
                "classification": known.classification if known else "unclassified",
                "explanation": known.explanation if known else "",
            }
        )
    return {
        "key": a.key,
        "framework": a.framework,
        "version": installed_version(a.framework),
        "function": a.function,
        "settings": _jsonable(a.settings),
        "spec": a.spec,
        "dtype": a.dtype,
        "conventions": _jsonable(a.conventions),
        "note": a.note,
        "verdict": verdict_of(a.spec, a.conventions, divergences),
        "checks": {r.name: r.status for r in report.results},
        "divergences": divergences,
    }


def verdict_of(spec: str, conventions: Mapping[str, Any], divergences: Sequence[Any]) -> str:
    """``"divergence"`` if any check diverges, else ``"pass under conventions"`` when a declared
    convention differs from the spec's default, else ``"pass"``.

    Examples
    --------
    >>> from refimpl.frameworks._matrix import verdict_of
    >>> verdict_of("dapo_overlong", {"floor": True}, []), verdict_of("dapo_overlong", {"floor": False}, [])
    ('pass', 'pass under conventions')
    """
    from refimpl.testing import conventions as known

    if divergences:
        return "divergence"
    defaults = {c.key: c.default for c in known(spec)}
    named = {k: v for k, v in conventions.items() if defaults.get(k, object()) != v}
    return "pass under conventions" if named else "pass"


def run_matrix(
    frameworks: Iterable[str] | None = None,
    *,
    max_examples: int = MATRIX_EXAMPLES,
    progress: Any = None,
) -> dict[str, Any]:
    """The conformance matrix of the installed frameworks (all shipped ones, or those named).

    Parameters
    ----------
    frameworks : iterable of str, optional
        Keys of :data:`refimpl.frameworks.TESTED_VERSIONS`; default all.
    max_examples : int
        Hypothesis examples per check.
    progress : callable, optional
        Called with each finished entry (the CLI prints a line).

    Returns
    -------
    dict
        ``schema, max_examples, versions`` (framework → installed version) and ``entries``.
    """
    from refimpl.frameworks import adapters

    names = list(TESTED_VERSIONS) if frameworks is None else list(frameworks)
    entries = []
    for name in names:
        for a in adapters(name):
            entry = matrix_entry(a, max_examples=max_examples)
            entries.append(entry)
            if progress is not None:
                progress(entry)
    return {
        "schema": SCHEMA,
        "max_examples": max_examples,
        "versions": {name: installed_version(name) for name in names},
        "entries": entries,
    }


def load_matrix(path: str | Path = MATRIX_PATH) -> dict[str, Any]:
    """The committed matrix (``docs/conformance-matrix.json`` by default)."""
    data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return data


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


_COMPARED = ("version", "function", "settings", "spec", "dtype", "conventions", "verdict", "checks")
_COMPARED_DIVERGENCE = ("status", "counterexample", "classification")


def changes(
    fresh: Mapping[str, Any],
    committed: Mapping[str, Any],
    *,
    frameworks: Sequence[str] | None = None,
) -> list[str]:
    """What differs between a fresh run and the committed matrix, one line each (empty: they agree).

    Only the frameworks of the fresh run are compared (``frameworks`` narrows it further). Compared:
    each entry's version, function, settings, spec, dtype, conventions, verdict and check statuses,
    and each divergence's status, counterexample and classification.

    Examples
    --------
    >>> from refimpl.frameworks._matrix import changes
    >>> old = {"versions": {"x": "1"}, "entries": [{"key": "x.f", "framework": "x", "verdict": "pass"}]}
    >>> new = {"versions": {"x": "2"}, "entries": [{"key": "x.f", "framework": "x", "verdict": "divergence"}]}
    >>> changes(new, old)
    ['x: version 1 -> 2', "x.f: verdict 'pass' -> 'divergence'"]
    """
    names = set(fresh.get("versions", {})) if frameworks is None else set(frameworks)
    out = []
    for name in sorted(names):
        was, now = committed.get("versions", {}).get(name), fresh.get("versions", {}).get(name)
        if was != now:
            out.append(f"{name}: version {was} -> {now}")
    old = {e["key"]: e for e in committed.get("entries", []) if e["framework"] in names}
    new = {e["key"]: e for e in fresh.get("entries", []) if e["framework"] in names}
    for key in sorted(old.keys() - new.keys()):
        out.append(f"{key}: in the committed matrix, not in the fresh run")
    for key in sorted(new.keys() - old.keys()):
        out.append(f"{key}: new ({new[key].get('verdict')})")
    for key in sorted(old.keys() & new.keys()):
        o, n = old[key], new[key]
        for f in _COMPARED:
            if o.get(f) != n.get(f):
                if f == "checks":
                    diff = {
                        c: (o[f].get(c), n[f].get(c))
                        for c in sorted(set(o[f]) | set(n[f]))
                        if o[f].get(c) != n[f].get(c)
                    }
                    out.append(f"{key}: checks {diff}")
                else:
                    out.append(f"{key}: {f} {o.get(f)!r} -> {n.get(f)!r}")
        od = {d["check"]: d for d in o.get("divergences", [])}
        nd = {d["check"]: d for d in n.get("divergences", [])}
        for c in sorted(od.keys() & nd.keys()):
            for f in _COMPARED_DIVERGENCE:
                if od[c].get(f) != nd[c].get(f):
                    out.append(f"{key}: divergence {c}: {f} changed")
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(matrix: Mapping[str, Any]) -> str:
    """The matrix as a MyST page: a summary table, then every divergence with its reproduction."""
    lines = [
        "# Conformance matrix",
        "",
        "Generated from `docs/conformance-matrix.json` when the docs are built; do not edit. "
        "{doc}`howto/conformance` says how it is made and refreshed.",
        "",
        "Installed versions: "
        + ", ".join(f"{k} {v}" for k, v in matrix.get("versions", {}).items())
        + f"; {matrix.get('max_examples')} Hypothesis examples per check, derandomized.",
        "",
        "| adapter | verdict | spec | function | conventions (where they differ from the spec's) |",
        "|---|---|---|---|---|",
    ]
    from refimpl.testing import conventions as known

    for e in matrix.get("entries", []):
        defaults = {c.key: c.default for c in known(e["spec"])}
        named = {k: v for k, v in e["conventions"].items() if defaults.get(k, object()) != v}
        # plain text, not code spans, so that the cells wrap
        conv = ", ".join(f"{k}={v!r}" for k, v in named.items()) or "none"
        short = e["function"].rpartition(":")[2]
        verdict = e["verdict"]
        if e["divergences"]:
            kinds = sorted({d["classification"] for d in e["divergences"]})
            verdict = f"[divergence](#{e['key'].replace('.', '-').replace('_', '-')}) ({', '.join(kinds)})"
        lines.append(f"| `{e['key']}` | {verdict} | {e['spec']} | {_cell(short)} | {_cell(conv)} |")
    divergent = [e for e in matrix.get("entries", []) if e["divergences"]]
    if divergent:
        lines += ["", "## Divergences", ""]
    for e in divergent:
        anchor = e["key"].replace(".", "-").replace("_", "-")
        lines += [
            f"({anchor})=",
            f"### `{e['key']}`",
            "",
            f"{e['framework']} {e['version']}, `{e['function']}` with {_cell(json.dumps(e['settings']))}; "
            f"spec `{e['spec']}`. {e['note']}",
            "",
        ]
        for d in e["divergences"]:
            lines += [
                f"**{d['check']}** — {d['status']}, classified **{d['classification']}**: "
                f"{d['explanation'] or '(not yet classified)'}",
                "",
                f"> {_cell(d['message'])}",
                "",
                "```python",
                d["reproduction"].rstrip(),
                "```",
                "",
            ]
    return "\n".join(lines) + "\n"
