"""``refimpl conformance``: rerun the conformance matrix on the installed frameworks, print what changed.

::

    refimpl conformance                      # every installed framework; changes vs the committed matrix
    refimpl conformance --framework verl     # one framework (repeat --framework for more)
    refimpl conformance --check              # exit 1 when anything changed (the CI stage)
                                             # (each committed counterexample is tried first)
    refimpl conformance --write              # store the fresh entries in docs/conformance-matrix.json

Exit codes: 0 when it ran (and, with ``--check``, nothing changed); 1 when something changed under
``--check``, or when what the run needs is not installed (torch, a framework named with
``--framework``, or none of the frameworks): not a usage error (the call is right; this machine
cannot run it), and a gate that cannot run must not pass; 2 when it refused to run: a bad option
value, a committed matrix that is missing or unreadable, a matrix that cannot be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``refimpl conformance``."""
    from refimpl.frameworks._matrix import CHECK_EXAMPLES, MATRIX_EXAMPLES, MATRIX_PATH
    from refimpl.frameworks._registry import TESTED_VERSIONS

    parser.add_argument(
        "--framework",
        action="append",
        choices=sorted(TESTED_VERSIONS),
        metavar="NAME",
        help=f"a framework to rerun ({', '.join(sorted(TESTED_VERSIONS))}); repeatable; "
        "default: every installed one",
    )
    parser.add_argument(
        "--matrix",
        type=Path,
        default=MATRIX_PATH,
        help=f"the committed matrix to compare with (default: {MATRIX_PATH})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when the fresh run differs from the matrix; a check that diverged there "
        "tries its committed counterexample first and is searched only if that now passes",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="replace the rerun frameworks' entries in --matrix with the fresh ones",
    )
    parser.add_argument(
        "--max-examples",
        type=int,
        default=None,
        help=f"Hypothesis examples per check (default {MATRIX_EXAMPLES}, what the committed "
        f"matrix is written with; {CHECK_EXAMPLES} under --check alone, where each committed "
        "divergence is replayed first; another value is compared all the same)",
    )


def _default_examples(args: argparse.Namespace) -> int:
    """Examples per check when ``--max-examples`` is not given: fewer for CI's rerun
    (``--check`` without ``--write``), which replays every committed divergence first."""
    from refimpl.frameworks._matrix import CHECK_EXAMPLES, MATRIX_EXAMPLES

    return CHECK_EXAMPLES if args.check and not args.write else MATRIX_EXAMPLES


#: the exit status when torch or the frameworks to rerun are not installed: the gate fails
NOT_INSTALLED = 1


def _fail(message: str, status: int = 2) -> int:
    print(f"refimpl conformance: {message}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    """Rerun the matrix, print one line per adapter, then the changes; see the module docstring."""
    import importlib.util

    from refimpl.frameworks._matrix import changes, load_matrix, run_matrix
    from refimpl.frameworks._registry import TESTED_VERSIONS, installed_version
    from refimpl.testing._conformance_plan import MAX_EXAMPLES

    examples = _default_examples(args) if args.max_examples is None else args.max_examples
    if not 1 <= examples <= MAX_EXAMPLES:
        return _fail(
            f"--max-examples must be >= 1 and <= {MAX_EXAMPLES}; got "
            f"--max-examples={examples}. Pass e.g. --max-examples 100."
        )
    if importlib.util.find_spec("torch") is None:
        return _fail(
            "torch is not installed; the adapters call the frameworks with torch tensors: "
            "pip install torch==2.13.0 (see ci/frameworks-requirements.txt)",
            NOT_INSTALLED,
        )
    named = args.framework
    if named:
        missing = [n for n in named if installed_version(n) is None]
        if missing:
            pins = " ".join(f"{TESTED_VERSIONS[n][0]}=={TESTED_VERSIONS[n][1]}" for n in missing)
            return _fail(f"not installed: {', '.join(missing)}; pip install {pins}", NOT_INSTALLED)
        names = list(dict.fromkeys(named))
    else:
        names = [n for n in TESTED_VERSIONS if installed_version(n) is not None]
        if not names:
            return _fail(
                "none of the frameworks is installed; .ci/frameworks installs the pinned set "
                "(ci/frameworks-lock.txt)",
                NOT_INSTALLED,
            )
    committed: dict[str, Any] | None = None
    if args.matrix.is_file():
        try:
            committed = load_matrix(args.matrix)
        except (OSError, ValueError) as exc:
            return _fail(f"cannot read {args.matrix}: {exc}")
    elif args.check or not args.write:
        return _fail(f"no committed matrix at {args.matrix}; pass --matrix PATH (or --write)")

    def progress(entry: dict[str, Any]) -> None:
        kinds = sorted({d["classification"] for d in entry["divergences"]})
        tail = f" ({', '.join(kinds)})" if kinds else ""
        print(f"{entry['verdict']:24s} {entry['key']}{tail}", flush=True)

    # --check (CI) tries each committed counterexample first; --write searches every check anew
    replay = committed if args.check and not args.write else None
    fresh = run_matrix(names, max_examples=examples, progress=progress, replay_from=replay)
    found = changes(fresh, committed or {}, frameworks=names)
    if found:
        print(f"\n{len(found)} change(s) against {args.matrix}:")
        for line in found:
            print(f"  {line}")
    else:
        print(f"\nno change against {args.matrix}")
    unclassified = [
        f"{e['key']}.{d['check']}"
        for e in fresh["entries"]
        for d in e["divergences"]
        if d["classification"] == "unclassified"
    ]
    if unclassified:
        print(f"unclassified divergences: {', '.join(unclassified)}")
    if args.write:
        merged = dict(committed or {})
        kept = [e for e in merged.get("entries", []) if e["framework"] not in names]
        merged.update({k: v for k, v in fresh.items() if k != "entries"})
        merged["versions"] = {**(committed or {}).get("versions", {}), **fresh["versions"]}
        merged["entries"] = sorted([*kept, *fresh["entries"]], key=lambda e: e["key"])
        try:
            args.matrix.write_text(json.dumps(merged, indent=1) + "\n", encoding="utf-8")
        except OSError as exc:
            return _fail(f"cannot write {args.matrix}: {exc}")
        print(f"wrote {args.matrix}")
    if args.check and (found or unclassified):
        return 1
    return 0
