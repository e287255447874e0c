"""The conformance matrix: every shipped adapter run against its spec, as committed JSON and a docs page.

``docs/conformance-matrix.json`` holds one entry per adapter (framework × function × setting →
spec) with its verdict: ``"pass"`` (no convention declared), ``"pass under conventions"`` (the
conventions are named), or ``"divergence"`` (each failing check with its shrunk counterexample, the
reproduction a maintainer can paste, and its classification). Each entry also carries three
verdicts: the value's, the gradient's (the checks that differentiate the candidate) and, for an
aggregation run on the framework's own scaling path, the partition's (invariant, dependent on the
split by a stated amount, or divergent). ``refimpl conformance`` reruns it on the installed
versions and prints what changed; CI fails when a fresh run differs from the file.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from refimpl.frameworks._registry import TESTED_VERSIONS, Adapter, installed_version
from refimpl.frameworks._replay import counterexamples

__all__ = [
    "CHECK_EXAMPLES",
    "MATRIX_EXAMPLES",
    "MATRIX_PATH",
    "SCHEMA",
    "adapter_lines",
    "changes",
    "level_of",
    "load_matrix",
    "matrix_entry",
    "partition_entry",
    "render_markdown",
    "run_matrix",
    "verdict_of",
]

#: Version of the JSON layout below; bump it when a field changes meaning.
SCHEMA = 2
#: Hypothesis examples per check in the matrix (derandomized: the same inputs every run).
MATRIX_EXAMPLES = 25
#: Hypothesis examples per check when CI reruns the matrix against the committed file
#: (``refimpl conformance --check``). A check that diverged in the matrix tries its committed
#: counterexample first, so every recorded divergence is met whatever this number; a check that
#: passed is searched again with this many derandomized examples. A new divergence that only a
#: longer search meets is left to the next ``--write``, which searches with
#: :data:`MATRIX_EXAMPLES`; the conformance how-to gives what a search at this count finds.
CHECK_EXAMPLES = 10
#: The committed matrix, relative to a checkout's root.
MATRIX_PATH = Path("docs") / "conformance-matrix.json"

#: Statuses of a check that count as conforming.
_OK = ("passed", "skipped")


def matrix_entry(
    a: Adapter,
    *,
    max_examples: int = MATRIX_EXAMPLES,
    replay: Mapping[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """Run adapter ``a``'s checks on the installed function and describe the outcome as a matrix entry.

    Parameters
    ----------
    a : Adapter
        The adapter (:func:`refimpl.frameworks.adapters`).
    max_examples : int
        Hypothesis examples per check (and of the partition check).
    replay : mapping, optional
        Check name → calls tried first by that check (the committed counterexamples,
        :mod:`refimpl.frameworks._replay`): a check that still fails on them is not searched.

    Returns
    -------
    dict
        ``key, framework, version, function, settings, spec, level, dtype``, ``xp`` (only for
        an adapter whose array library is not torch), ``conventions, note,
        verdict, verdicts`` (``value``, ``gradient``, ``partition``), ``checks``, ``divergences``
        (a list: ``check, status, message, counterexample, reproduction, classification,
        explanation, draft_report``), ``partition`` (see :func:`partition_entry`, or ``None``) and
        ``adapter_lines`` (:func:`adapter_lines` of the candidate).
    """
    results = _results(a, max(max_examples, a.max_examples or 0), replay or {})
    checks = {r.name: r.status for r in results}
    divergences = [
        _divergence(r, a.divergences.get(r.name)) for r in results if r.status not in _OK
    ]
    partition = None if a.partition is None else partition_entry(a, max_examples=max_examples)
    every = divergences + ([] if partition is None else partition["divergences"])
    return {
        "key": a.key,
        "framework": a.framework,
        "version": installed_version(a.framework),
        "function": a.function,
        "settings": _jsonable(a.settings),
        "spec": a.spec,
        "level": level_of(a.spec),
        "dtype": a.dtype,
        **({} if a.xp == "torch" else {"xp": a.xp}),  # torch entries stay as they were
        "conventions": _jsonable(a.conventions),
        "note": a.note,
        "verdict": verdict_of(a.spec, a.conventions, every),
        "verdicts": {
            "value": _part_verdict(checks, divergences, lambda name: "gradient" not in name),
            "gradient": _part_verdict(checks, divergences, lambda name: "gradient" in name),
            "partition": "not applicable" if partition is None else partition["verdict"],
        },
        "checks": checks,
        "divergences": divergences,
        "partition": partition,
        "adapter_lines": adapter_lines(a.candidate),
    }


def _results(a: Adapter, max_examples: int, replay: Mapping[str, list[Any]]) -> list[Any]:
    """The check results of ``a``, in the spec's order; a check in ``replay`` tries its calls
    first, then searches only if they pass (or the reference now refuses them)."""
    from refimpl.frameworks import check
    from refimpl.testing import check_names

    names = check_names(a.spec)
    searched = [name for name in names if name not in replay]
    found = {}
    if searched:
        found = {
            r.name: r for r in check(a.key, max_examples=max_examples, checks=searched).results
        }
    for name in names:
        if name not in replay:
            continue
        try:
            report = check(
                a.key,
                max_examples=max_examples,
                checks=[name],
                examples=(replay[name], *a.examples),
            )
        except ValueError:  # the reference refuses the committed input now: search instead
            report = check(a.key, max_examples=max_examples, checks=[name])
        found[name] = report.results[0]
    return [found[name] for name in names]


def partition_entry(a: Adapter, *, max_examples: int = MATRIX_EXAMPLES) -> dict[str, Any]:
    """Run adapter ``a``'s :class:`~refimpl.frameworks.Partition` on the framework's scaling path.

    Returns
    -------
    dict
        ``mode``, ``ratio`` (only where the loss has one ratio per sequence), ``rule``
        (described), ``trainer, intent, checks, divergences``, ``workload_gap``
        (:func:`refimpl.testing._partition.split_dependence` on its stated workload: the largest
        relative error of a token's weight against the full batch, ``None`` if non-finite),
        ``max_gap`` and ``dependence`` over the search (per-sequence modes), ``verdict`` and
        ``adapter_lines``.
    """
    from refimpl.testing import check_partition_invariance
    from refimpl.testing._partition import split_dependence

    p = a.partition
    if p is None:
        raise ValueError(f"adapter {a.key!r} has no partition: set Adapter(partition=...)")
    options: dict[str, Any] = {
        "mode": p.mode,
        "rule": p.rule,
        "xp": a.xp,
        "dtype": a.dtype,
        "constant": p.constant,
        "empty_rows": p.empty_rows,
    }
    if p.ratio != "token":  # one ratio per sequence: the sequence surrogate is the reference
        options["ratio"] = p.ratio
    with a.held():
        report = check_partition_invariance(
            p.candidate, max_examples=max(max_examples, a.max_examples or 0), rtol=p.rtol, **options
        )
        divergences = [
            _divergence(r, p.divergences.get(r.name), prefix="partition.") for r in report.failures
        ]
        try:
            gap = split_dependence(p.candidate, **options)
        except Exception:
            if report.ok:  # the search ran it without a fault, so this one is unexpected
                raise
            gap = math.nan  # the candidate raises, as the report's divergence shows
    workload_gap = None if math.isnan(gap) else round(gap, 4)
    if divergences:
        kinds = sorted({d["classification"] for d in divergences})
        verdict = f"divergence ({', '.join(kinds)})"
    elif report.intent == "split" and (workload_gap or 0.0) > 0.0:
        verdict = f"depends on the split (token weights off by up to {workload_gap:.0%})"
    else:
        verdict = "invariant"
    ratio = {} if p.ratio == "token" else {"ratio": p.ratio}  # token entries stay as they were
    return {
        "mode": p.mode,
        **ratio,
        "rule": report.rule.describe(),
        "trainer": p.trainer,
        "intent": report.intent,
        "checks": {r.name: r.status for r in report.results},
        "divergences": divergences,
        "workload_gap": workload_gap,
        "max_gap": round(report.max_gap, 4),
        "dependence": report.dependence,
        "verdict": verdict,
        "adapter_lines": adapter_lines(p.candidate),
    }


def adapter_lines(candidate: Callable[..., Any]) -> int:
    """The lines of code of an adapter's candidate: its body without the docstring, blank lines
    and comments (what the matrix page averages).

    Examples
    --------
    >>> from refimpl.frameworks._matrix import adapter_lines
    >>> def candidate(x):
    ...     \"\"\"A docstring is not counted.\"\"\"
    ...     import math  # an import is
    ...
    ...     return math.floor(x)
    >>> adapter_lines(candidate)
    2
    """
    source = textwrap.dedent(inspect.getsource(candidate))
    (function,) = ast.parse(source).body
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        raise TypeError(f"{candidate!r} is not a function defined with def")
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body:
        return 0
    lines = source.splitlines()[body[0].lineno - 1 : body[-1].end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def level_of(spec: str) -> str:
    """``"loss"`` for the specs of the losses level (:func:`refimpl.testing.spec_names` with
    ``losses=True`` only), ``"weights"`` for the others."""
    from refimpl.testing import spec_names

    return "weights" if spec in spec_names() else "loss"


def _divergence(result: Any, known: Any, *, prefix: str = "") -> dict[str, Any]:
    return {
        "check": prefix + result.name,
        "status": result.status,
        "message": result.message,
        "counterexample": result.counterexample,
        "reproduction": result.reproduction,
        "classification": known.classification if known else "unclassified",
        "explanation": known.explanation if known else "",
        "draft_report": known.draft_report if known else "",
    }


def _part_verdict(
    checks: Mapping[str, str], divergences: Sequence[Mapping[str, Any]], part: Callable[[str], bool]
) -> str:
    """The verdict of the checks ``part`` selects: ``pass``, ``divergence (…)`` or ``no check``."""
    names = [name for name in checks if part(name)]
    if not names:
        return "no check"
    kinds = sorted({d["classification"] for d in divergences if part(d["check"])})
    return f"divergence ({', '.join(kinds)})" if kinds else "pass"


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
    replay_from: Mapping[str, Any] | None = None,
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
    replay_from : mapping, optional
        A committed matrix whose counterexamples each divergent check tries first
        (:mod:`refimpl.frameworks._replay`; what ``refimpl conformance --check`` does). Without
        it every check searches from scratch (``--write``).

    Returns
    -------
    dict
        ``schema, max_examples, versions`` (framework → installed version) and ``entries``.
    """
    from refimpl.frameworks import adapters

    names = list(TESTED_VERSIONS) if frameworks is None else list(frameworks)
    committed = {e["key"]: e for e in (replay_from or {}).get("entries", [])}
    entries = []
    for name in names:
        for a in adapters(name):
            replay = counterexamples(committed[a.key]) if a.key in committed else None
            entry = matrix_entry(a, max_examples=max_examples, replay=replay)
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


_COMPARED = (
    "version",
    "function",
    "settings",
    "spec",
    "dtype",
    "xp",
    "conventions",
    "verdict",
    "verdicts",
    "checks",
)
_COMPARED_PARTITION = ("rule", "intent", "checks", "workload_gap", "verdict")
_COMPARED_DIVERGENCE = ("status", "counterexample", "classification")


def changes(
    fresh: Mapping[str, Any],
    committed: Mapping[str, Any],
    *,
    frameworks: Sequence[str] | None = None,
) -> list[str]:
    """What differs between a fresh run and the committed matrix, one line each (empty: they agree).

    Only the frameworks of the fresh run are compared (``frameworks`` narrows it further). Compared:
    each entry's version, function, settings, spec, dtype, array library, conventions, verdicts
    and check statuses; its partition's rule, intent, checks, workload gap and verdict; and each
    divergence's status, counterexample and classification.

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
        op, np_ = o.get("partition") or {}, n.get("partition") or {}
        for f in _COMPARED_PARTITION:
            if op.get(f) != np_.get(f):
                out.append(f"{key}: partition {f} {op.get(f)!r} -> {np_.get(f)!r}")
        od = {d["check"]: d for d in _all_divergences(o)}
        nd = {d["check"]: d for d in _all_divergences(n)}
        for c in sorted(od.keys() & nd.keys()):
            for f in _COMPARED_DIVERGENCE:
                if od[c].get(f) != nd[c].get(f):
                    out.append(f"{key}: divergence {c}: {f} changed")
    return out


def _all_divergences(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """An entry's divergences, its partition's included."""
    partition = entry.get("partition") or {}
    return [*entry.get("divergences", []), *partition.get("divergences", [])]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(matrix: Mapping[str, Any]) -> str:
    """The matrix as a MyST page: a summary, a table per level, the partition verdicts on the
    frameworks' scaling paths, the draft reports of defects, then every divergence with its
    reproduction."""
    entries = list(matrix.get("entries", []))
    lines = [
        "# Conformance matrix",
        "",
        "Generated from `docs/conformance-matrix.json` when the docs are built; do not edit. "
        "{doc}`howto/conformance` says how it is made and refreshed.",
        "",
        *_summary(matrix, entries),
    ]
    loss = [e for e in entries if e.get("level") == "loss"]
    if loss:
        lines += ["", "## Losses, aggregation, KL, advantages and log-probabilities", ""]
        lines += _loss_table(loss)
    partitioned = [e for e in entries if e.get("partition")]
    if partitioned:
        lines += ["", "## Partition invariance on the frameworks' own scaling paths", ""]
        lines += _partition_table(partitioned)
    weights = [e for e in entries if e.get("level", "weights") == "weights"]
    if weights:
        lines += ["", "## Weights, masks, penalties and staleness", ""]
        lines += _weights_table(weights)
    lines += _draft_reports(entries)
    lines += _divergence_sections(entries)
    return "\n".join(lines) + "\n"


def _summary(matrix: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> list[str]:
    frameworks = sorted({e["framework"] for e in entries})
    divergent = [d for e in entries for d in _all_divergences(e)]
    kinds = {k: sum(d["classification"] == k for d in divergent) for k in _KINDS}
    sizes = [e["adapter_lines"] for e in entries if "adapter_lines" in e]
    sizes += [e["partition"]["adapter_lines"] for e in entries if e.get("partition")]
    mean = sum(sizes) / len(sizes) if sizes else 0.0
    return [
        "Installed versions: "
        + ", ".join(f"{k} {v}" for k, v in matrix.get("versions", {}).items())
        + f"; {matrix.get('max_examples')} Hypothesis examples per check, derandomized.",
        "",
        f"**{len(entries)} entries over {len(frameworks)} frameworks** "
        f"({sum(e.get('level') == 'loss' for e in entries)} at the level of losses); "
        f"{sum(not _all_divergences(e) for e in entries)} agree with refimpl, "
        f"{sum(bool(_all_divergences(e)) for e in entries)} diverge: "
        + ", ".join(f"{n} {k} divergences" for k, n in kinds.items())
        + f". An adapter is **{mean:.1f} lines** of code on average (its body without docstring, "
        f"blank lines and comments, over {len(sizes)} candidates; the longest has "
        f"{max(sizes, default=0)}). The few helpers that several adapters of one framework share "
        "(the smallest trainer object TRL's and OpenRLHF's methods accept, a framework's "
        "config) are not counted in each adapter.",
    ]


_KINDS = ("defect", "convention", "numerical limit", "unclassified")


def _anchor(key: str) -> str:
    return key.replace(".", "-").replace("_", "-")


def _named_conventions(e: Mapping[str, Any]) -> str:
    from refimpl.testing import conventions as known

    defaults = {c.key: c.default for c in known(e["spec"])}
    named = {k: v for k, v in e["conventions"].items() if defaults.get(k, object()) != v}
    # plain text, not code spans, so that the cells wrap
    return ", ".join(f"{k}={v!r}" for k, v in named.items()) or "none"


def _linked(e: Mapping[str, Any], verdict: str) -> str:
    if verdict.startswith("divergence"):
        return f"[{verdict}](#{_anchor(e['key'])})"
    return verdict


def _loss_table(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """One table per framework: the adapter, its spec with the conventions it declares, the
    three verdicts and the adapter's length (the function is named in its divergence section)."""
    lines = [
        "Value covers every check that does not differentiate the candidate, gradient the checks "
        "that do; partition is the aggregation's own scaling path (next section).",
    ]
    for framework in sorted({e["framework"] for e in entries}):
        rows = [e for e in entries if e["framework"] == framework]
        lines += [
            "",
            f"### {framework} {rows[0]['version']}",
            "",
            "| adapter | spec: declared conventions | value | gradient | partition | lines |",
            "|---|---|---|---|---|---|",
        ]
        for e in rows:
            v = e["verdicts"]
            conventions = _named_conventions(e)
            spec = e["spec"] if conventions == "none" else f"{e['spec']}: {conventions}"
            library = f" ({e['xp']})" if "xp" in e else ""  # torch unless the entry says
            lines.append(
                f"| `{e['key']}`{library} | {_cell(spec)} | {_short(e, v['value'])} "
                f"| {_short(e, v['gradient'])} | {_short(e, v['partition'])} "
                f"| {e['adapter_lines']} |"
            )
    return lines


def _short(e: Mapping[str, Any], verdict: str) -> str:
    """A verdict as a narrow table cell: a divergence names its kinds and links its section."""
    if verdict.startswith("divergence ("):
        kinds = verdict.removeprefix("divergence (").removesuffix(")")
        return f"[diverges: {kinds}](#{_anchor(e['key'])})"
    if verdict.startswith("depends on the split"):
        return "depends on the split"
    return {"not applicable": "–", "no check": "–"}.get(verdict, verdict)


def _partition_table(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "Each framework's micro-batch loss is run as its trainer runs it, over simulated "
        "data-parallel ranks and accumulation steps, and the step's gradient is compared with "
        "the full batch's. The gap is measured on a stated workload: eight sequences of 1 to 34 "
        "tokens over 2 ranks × 2 accumulation steps, the micro-batches holding 3, 1, 2 and 2 "
        "sequences and 37, 21, 16 and 13 tokens; it is the largest relative error of one "
        "token's weight against the full batch.",
        "",
        "| adapter | mode, under the framework's scaling rule | verdict | gap |",
        "|---|---|---|---|",
    ]
    for e in entries:
        p = e["partition"]
        gap = "non-finite" if p["workload_gap"] is None else f"{p['workload_gap']:.1%}"
        lines.append(
            f"| `{e['key']}` | {p['mode']} ({_cell(p['rule'])}) "
            f"| {_linked(e, p['verdict'])} | {gap} |"
        )
    lines += ["", "Where each trainer computes and passes the numbers its loss is scaled by:", ""]
    lines += [f"- `{e['key']}`: {_cell(e['partition']['trainer'])}" for e in entries]
    return lines


def _weights_table(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| adapter | verdict | spec | function | conventions (where they differ from the spec's) |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        short = e["function"].rpartition(":")[2]
        verdict = e["verdict"]
        if e["divergences"]:
            kinds = sorted({d["classification"] for d in e["divergences"]})
            verdict = f"[divergence](#{_anchor(e['key'])}) ({', '.join(kinds)})"
        lines.append(
            f"| `{e['key']}` | {verdict} | {e['spec']} | {_cell(short)} "
            f"| {_cell(_named_conventions(e))} |"
        )
    return lines


def _draft_reports(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The defects, each as a short report for upstream (written here, not filed).

    Adapters that meet one defect (the same report: one line that every setting of a loss runs,
    failing several checks) share one report, which names the functions and checks and links each
    adapter's reproduction. A heading that two reports would share also names the first adapter.
    """
    groups: dict[tuple[str, str], list[tuple[Mapping[str, Any], str]]] = {}
    for e in entries:
        for d in _all_divergences(e):
            if d["classification"] == "defect" and d.get("draft_report"):
                key = (f"{e['framework']} {e['version']}", d["draft_report"].strip())
                groups.setdefault(key, []).append((e, d["check"]))
    if not groups:
        return []
    lines = [
        "",
        "## Draft reports for upstream",
        "",
        "Each defect below is written as a report a maintainer could act on: what the code "
        "does, what the reference and the framework's own documentation or paper say, and the "
        "reproduction (in the divergence's section of each adapter that meets it). They are "
        "drafts, not filed.",
    ]
    headings = {key: _report_heading(key[0], met) for key, met in groups.items()}
    seen = Counter(headings.values())
    for key, met in groups.items():
        keys = list(dict.fromkeys(e["key"] for e, _ in met))
        heading = headings[key] + (f", as `{keys[0]}` meets it" if seen[headings[key]] > 1 else "")
        links = ", ".join(f"[{k}](#{_anchor(k)})" for k in keys)
        many = f"Reproductions ({len(keys)} adapters): " if len(keys) > 1 else "Reproduction: "
        lines += ["", f"### {heading}", "", key[1], "", f"{many}{links}."]
    return lines


def _report_heading(release: str, met: Sequence[tuple[Mapping[str, Any], str]]) -> str:
    functions = ", ".join(f"`{f}`" for f in dict.fromkeys(e["function"] for e, _ in met))
    return f"{release}: {functions} ({', '.join(sorted({check for _, check in met}))})"


def _divergence_sections(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    divergent = [e for e in entries if _all_divergences(e)]
    if not divergent:
        return []
    lines = ["", "## Divergences", ""]
    for e in divergent:
        lines += [
            f"({_anchor(e['key'])})=",
            f"### `{e['key']}`",
            "",
            f"{e['framework']} {e['version']}, `{e['function']}` with "
            f"{_cell(json.dumps(e['settings']))}; spec `{e['spec']}`. {e['note']}",
            "",
        ]
        for d in _all_divergences(e):
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
    return lines
