"""``refimpl lab [--out DIR] [--quick] [--seed S] [--docs-url URL]``: run the lab, write its report.

Writes ``DIR/index.html`` (open it in a browser; no server needed), ``DIR/report.md``,
``DIR/figures/*.png`` and ``DIR/metrics.json`` (every number of the report). Progress goes to stderr,
one line per section. The exit code is 0 when every closed form agrees with its simulation within the
stated tolerance, 1 otherwise (the report shows which pair disagrees), and 2 for a refused call
(a bad option, an unknown ``--only`` section, an ``--out`` that is not a writable directory, holds a
directory where a report file goes, or would overwrite what the lab reads: the package, or the
documentation build its links open; a ``--docs-url`` that is empty or no http, https or file
address), decided before any section runs. Every file is written atomically: a reader, or an
interrupted run, never leaves half a report.

"Explained in" lines link to pages of the built documentation (``concepts/length-bias.html``, …)
under ``--docs-url``. Without it, a run from a source checkout links to that checkout's
``docs/_build/html`` by a relative path (built with ``sphinx-build docs docs/_build/html``), and an
installation without the docs names the pages and says how to get them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import refimpl
from refimpl._io import describe_os_error, refuse_output_naming_input
from refimpl.errors import InvalidArgument
from refimpl.lab.config import LabConfig, lab_config

if TYPE_CHECKING:
    from refimpl.lab.registry import SectionSpec
    from refimpl.lab.report import Section

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``refimpl lab``."""
    from refimpl.lab.registry import SECTIONS

    parser.add_argument(
        "--out",
        type=Path,
        default=Path("lab-report"),
        metavar="DIR",
        help="output directory (default: ./lab-report)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, same sections (about 13 s of CPU; nothing to compile)",
    )
    parser.add_argument(
        "--seed", type=_seed, default=0, metavar="S", help="root seed, an integer >= 0 (default 0)"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="KEY",
        help="run only this section (repeatable); keys: " + ", ".join(s.key for s in SECTIONS),
    )
    parser.add_argument(
        "--docs-url",
        default=None,
        metavar="URL",
        help="base address of the built documentation that 'Explained in' links point to, e.g. "
        "https://example.org/refimpl/ or ../docs/_build/html (default: the docs/_build/html of "
        "the source checkout refimpl runs from, as a path relative to --out; none when refimpl "
        "was installed without its sources)",
    )


#: longest ``--seed`` accepted, in characters (numpy mixes every bit of a seed; 1000 digits
#: already hold more entropy than any generator's state)
_SEED_DIGITS = 1000


def _seed(text: str) -> int:
    """``--seed``: a non-negative integer (numpy's ``SeedSequence`` refuses negative entropy)."""
    shown = repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"
    if (
        len(text) > _SEED_DIGITS and text.strip().lstrip("+-").isdigit()
    ):  # int() refuses past 4300 digits: say why, quote an excerpt
        raise argparse.ArgumentTypeError(
            f"seed must have at most {_SEED_DIGITS} digits; got seed={shown}. Pass e.g. --seed 0."
        )
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seed must be an integer; got seed={shown}. Pass e.g. --seed 0."
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"seed must be >= 0; got seed={value}. Pass a non-negative integer, e.g. --seed 0."
        )
    return value


def _unwritable(figures: Path) -> str | None:
    """Create ``figures`` (and its parent, the report directory, in an existing directory); why it
    cannot be written, or None.

    Checked before any section runs, so that a bad ``--out`` fails in a second with exit 2 instead
    of a traceback after the whole run.
    """
    parent = figures.parent.parent
    if not parent.is_dir():  # as check --report, simulate --trace and sweep --out: no mkdir -p
        return f"the directory {str(parent)!r} it would be created in does not exist"
    try:
        figures.mkdir(parents=True, exist_ok=True)
        probe = figures.parent / ".refimpl-lab-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _bad_docs_url(url: str) -> str | None:
    """Why ``--docs-url`` cannot be the base of the report's links, or None: an empty one would
    make every link absolute from the file system's root (``/concepts/...``), and a scheme other
    than http, https or file (``javascript:``, ``data:``) is no address of documentation."""
    if not url.strip():
        return (
            f"--docs-url must be an address or a path; got --docs-url={url!r}. Leave the "
            "option out for the default, or pass e.g. --docs-url https://example.org/refimpl/."
        )
    scheme = urlsplit(url).scheme.lower()
    if len(scheme) > 1 and scheme not in ("http", "https", "file"):  # "c:" is a Windows drive
        shown = url if len(url) <= 60 else f"{url[:40]}... ({len(url)} characters)"
        return (
            f"--docs-url must be an http, https or file address, or a path; got the scheme "
            f"{scheme!r} in --docs-url={shown!r}. Pass e.g. --docs-url https://example.org/refimpl/."
        )
    return None


def _occupied(out: Path) -> str | None:
    """Why a report file in ``out`` could not be replaced (a directory, or something else that
    is not a file, stands at its name), or None. Checked before any section runs: found at the
    end, it would leave the figures and the files written before it (a partial report)."""
    for name in OUTPUTS[:-1]:
        path = out / name
        if path.is_dir() or (path.exists() and not path.is_file()):
            kind = "a directory" if path.is_dir() else "not a regular file"
            return f"{str(path)!r} is {kind}, where the lab writes its {name}; move it away"
    return None


def _examinable(out: Path) -> str | None:
    """Why ``out`` cannot even be looked at (a symlink loop, a component that is a file), or
    None. ``Path.resolve`` reports a loop as ``RuntimeError`` before Python 3.13: the ``stat``
    here names the cause and the path first."""
    try:
        out.stat()
    except FileNotFoundError:
        return None  # a new directory (or a dangling link: creating it says so)
    except OSError as exc:
        return describe_os_error(exc, out, action="use --out")
    return None


#: What ``refimpl lab`` writes into ``--out``.
OUTPUTS = ("index.html", "report.md", "metrics.json", "figures")


def _naming_input(out: Path, docs_url: str | None) -> str | None:
    """Why the report in ``out`` would overwrite something the lab reads, or None.

    The lab's inputs are the installed package (its code and data) and the documentation build that
    its links open (when that is a local directory): a report written into either would replace
    one of their files (the docs' own ``index.html``, for one).
    """
    inputs = [Path(refimpl.__file__).resolve().parent]
    if docs_url is not None and "://" not in docs_url:
        inputs.append(out / docs_url)
    try:
        for name in OUTPUTS:
            refuse_output_naming_input(out / name, inputs, option="--out")
    except InvalidArgument as exc:
        return str(exc)
    return None


def _docs_built(out: Path, docs_url: str | None) -> bool:
    """Whether ``docs_url`` is a local path (relative to ``out``) where the docs are built. An
    address with a scheme (``https://...``) is no path to look at: taken as one, a long address
    is a file name too long for the system (once found at the end of a run, after the figures)."""
    if docs_url is None or urlsplit(docs_url).scheme.lower() in ("http", "https", "file"):
        return False
    try:
        return (out / docs_url / "index.html").is_file()
    except OSError:  # a name too long, a loop: nothing built there to link to
        return False


def default_docs_url(out: Path) -> str | None:
    """The built docs of the source checkout refimpl runs from, relative to ``out``; or None.

    A pip installation has no ``docs/`` next to the package: then there is nothing to link to.
    """
    root = Path(refimpl.__file__).resolve().parent.parent
    if not (root / "docs" / "conf.py").is_file():
        return None
    try:
        rel = os.path.relpath(root / "docs" / "_build" / "html", out.resolve())
    except ValueError:  # another drive (Windows): no relative path exists
        return None
    return Path(rel).as_posix()


def _docs_note(url: str | None, explicit: bool, built: bool) -> str:
    """What the report says about where its documentation links lead."""
    build = "`sphinx-build docs docs/_build/html` (in the root of a source checkout)"
    if url is None:
        return (
            "**Documentation.** Each section names the pages of refimpl's documentation that "
            "explain it (e.g. `concepts/length-bias.html`). This installation has no copy of the "
            f"documentation: build it from a source checkout with {build}, then open "
            "`docs/_build/html/<page>`; rerun with `--docs-url URL` (the address of a built copy) "
            "to turn the page names into links."
        )
    if explicit:
        return (
            f"**Documentation.** *Explained in* links open pages of the documentation at `{url}`."
        )
    state = "rebuild it after a change" if built else "it is not built yet: build it"
    return (
        "**Documentation.** *Explained in* links open pages of the documentation built from this "
        f"source checkout, at `{url}` relative to this report ({state} with {build}). "
        "`--docs-url URL` points them at another copy."
    )


_READING = (
    "Lines are closed forms from the refimpl library, markers are the simulator (`refimpl.sim`); "
    "error bars are ±2 standard errors. Each *Closed form vs simulation* table lists the pairs "
    "and the tolerance each is held to. Time is counted in **token times** (the time one slot "
    "takes to decode one token), so a step time Δ in tokens per step is also the number of "
    "tokens a slot decodes during one trainer step. Throughputs are ratios of two runs on the "
    "same slots and are marked ×. In tables, "
)

#: Symbols used across the sections of the report, with their units.
SYMBOLS: tuple[tuple[str, str], ...] = (
    ("ℓ, L", "rollout length: generated tokens of one rollout (L the random variable)"),
    ("p, E[L] = E_p[L]", "the launched length law and its mean (tokens)"),
    ("q, E_q[L]", "the trained length law and its mean (tokens)"),
    ("n, k", "first k of n: launch n rollouts at once, train on the first k to finish"),
    ("N, B", "continuous (asynchronous) dispatch: N generation slots, B samples per trainer step"),
    ("j", "trainer step (0-based); step j trains while holding policy version j"),
    ("s", "staleness of a trained sample: j minus the oldest version of its tokens (steps)"),
    ("η", "staleness bound: a sample is admissible iff s ≤ η"),
    (
        "Δ, Δ_η",
        "trainer step time in token times (tokens a slot decodes per step); Δ without a bound, "
        "Δ_η when samples staler than η are dropped (longer: dropped samples do not fill batches)",
    ),
    ("π(ℓ), keep(ℓ)", "probability that a rollout of length ℓ is trained (first k of n; drop)"),
    ("TV(q, p), KL(q‖p)", "total variation distance and Kullback–Leibler divergence (nats), ≥ 0"),
    ("γ^s", "value of a sample s steps stale relative to a fresh one (staleness_decay)"),
    ("b, k(b), L*(b)", "effort level, price per generated token, best length (tokens)"),
    ("SE", "standard error of a simulated mean"),
)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _refusal(args: argparse.Namespace, keys: list[str], docs_url: str | None) -> str | None:
    """Why the call is refused before anything runs (an unknown ``--only`` key, an ``--out`` that
    would overwrite an input or cannot be written), or None."""
    if args.only is not None:
        unknown = sorted(set(args.only) - set(keys))
        if unknown:
            return f"--only: unknown section {', '.join(unknown)}; choose among {', '.join(keys)}"
    if args.docs_url is not None:
        refused = _bad_docs_url(args.docs_url)
        if refused is not None:
            return refused
    out: Path = args.out
    refused = _naming_input(out, docs_url)
    if refused is not None:
        return refused
    problem = _occupied(out) or _unwritable(out / "figures")
    if problem is not None:
        return (
            f"--out must be a writable directory (the report, metrics.json and figures/ go "
            f"there); got --out {str(out)!r}: {problem}. Pass --out with a new or writable "
            "directory path, e.g. --out lab-report."
        )
    return None


def _run_section(spec: SectionSpec, number: int, config: LabConfig, figures: Path) -> Section:
    """Build one section (or mark it unavailable), timed, with a progress line per step."""
    from refimpl.lab._plot import lab_style
    from refimpl.lab.registry import SECTIONS, missing_names
    from refimpl.lab.report import Section

    section = Section(
        key=spec.key,
        number=number,
        title=spec.title,
        docs=spec.docs,
        figures_dir=figures,
        dpi=100 if config.quick else 200,
    )
    _say(f"[{number}/{len(SECTIONS)}] {spec.title} ...")
    t0, c0 = time.perf_counter(), time.process_time()
    missing = missing_names(spec.requires)
    if missing:
        section.unavailable(missing)
        _say(f"      not available in this build (missing: {', '.join(missing)})")
    else:
        with lab_style():
            spec.build_function()(section, config, lambda message: _say(f"      {message}"))
    section.seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    bad = [c.name for c in section.checks if not c.passed]
    _say(
        f"      done in {section.seconds:.1f} s (CPU {cpu:.1f} s); "
        f"{len(section.checks) - len(bad)}/{len(section.checks)} checks agree"
        + (f" (DISAGREE: {', '.join(bad)})" if bad else "")
    )
    return section


def _meta(
    args: argparse.Namespace,
    sections: list[Section],
    config: LabConfig,
    docs_url: str | None,
    total: float,
    built: bool,
) -> dict[str, Any]:
    """The report's front matter and settings: the summary of its checks, how to read it, the run."""
    from refimpl.lab.report import NOISE_NOTE

    n_checks = sum(len(s.checks) for s in sections)
    n_ok = sum(c.passed for s in sections for c in s.checks)
    unavailable = [s.title for s in sections if not s.available]
    summary = (
        "Every section pairs a closed form from the refimpl library with a simulation of the "
        "asynchronous rollout queue, on the same figure or table. "
        f"**{n_ok} of {n_checks} closed-form/simulation pairs agree** within their stated tolerance."
    )
    if unavailable:
        summary += " Not available in this build: " + "; ".join(unavailable) + "."
    return {
        "title": "refimpl lab report",
        "summary": summary,
        "reading": _READING
        + NOISE_NOTE
        + ".\n\n"
        + _docs_note(docs_url, args.docs_url is not None, built),
        "symbols": [list(s) for s in SYMBOLS],
        "docs_url": docs_url,
        "settings": {
            "refimpl": version("refimpl"),
            "run": "quick" if config.quick else "default",
            "seed": config.seed,
            **{k: v for k, v in config._asdict().items() if k not in ("quick", "seed")},
            "wall time (s)": round(total, 1),
        },
        "footer": "Written by `refimpl lab`. Every number shown is in metrics.json.",
        "checks_total": n_checks,
        "checks_agree": n_ok,
    }


def _remove_stale_figures(figures: Path, sections: list[Section]) -> None:
    """Remove the figures of an earlier run into the same directory that this report does not
    show: only once the new report is written, so that a run that fails or is interrupted leaves
    the earlier report whole (its figures are replaced one by one, each atomically)."""
    from refimpl.lab.report import FigureBlock

    shown = {b.file for s in sections for b in s.blocks if isinstance(b, FigureBlock)}
    for old in figures.glob("*.png"):
        if old.name not in shown:
            old.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    """Run the lab with the parsed ``args``; return 0 if every check agrees, 1 if not, 2 if refused."""
    # Lazy, for `refimpl --help`'s start-up: matplotlib and the report (numpy) load only when the
    # lab runs, and matplotlib's backend is chosen before anything imports pyplot.
    import matplotlib

    matplotlib.use("Agg")

    from refimpl.lab.registry import SECTIONS
    from refimpl.lab.report import write_html, write_markdown, write_metrics

    out: Path = args.out
    refused = _examinable(out)
    if refused is None:
        try:
            docs_url = args.docs_url if args.docs_url is not None else default_docs_url(out)
            refused = _refusal(args, [s.key for s in SECTIONS], docs_url)
        except RuntimeError as exc:  # Path.resolve on a symlink loop (Python < 3.13)
            refused = f"cannot use --out {str(out)!r} or --docs-url: {exc}; fix or remove the link"
    if refused is not None:
        _say(f"refimpl lab: {refused}")
        return 2
    built = _docs_built(out, docs_url)  # before any section: nothing can fail at the end
    config = lab_config(quick=bool(args.quick), seed=int(args.seed))
    figures = out / "figures"

    start = time.perf_counter()
    _say(
        f"refimpl lab ({'quick' if config.quick else 'default'} run, seed {config.seed}) -> "
        f"{out}/index.html"
    )
    sections = [
        _run_section(spec, number, config, figures)
        for number, spec in enumerate(SECTIONS, start=1)
        if args.only is None or spec.key in args.only
    ]
    total = time.perf_counter() - start
    meta = _meta(args, sections, config, docs_url, total, built)
    write_metrics(out / "metrics.json", sections, meta)
    write_markdown(out / "report.md", sections, meta)
    write_html(out / "index.html", sections, meta)
    _remove_stale_figures(figures, sections)
    n_ok, n_checks = meta["checks_agree"], meta["checks_total"]
    _say(
        f"wrote {out}/index.html, report.md, metrics.json and {len(list(figures.glob('*.png')))}"
        f" figures in {total:.1f} s; {n_ok}/{n_checks} checks agree"
    )
    return 0 if n_ok == n_checks else 1
