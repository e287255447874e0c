"""Every citation in the repository resolves inside it.

Definitions are cited as ``conventions §<anchor>``, an anchor of ``docs/concepts/conventions.md``. The
external specification and the path of the project's peer directory are not in the repository, so
no tracked file may cite them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONVENTIONS = ROOT / "docs" / "concepts" / "conventions.md"

# Spelled in pieces, so that this file does not match its own patterns.
FORBIDDEN = {
    "a citation of the external specification": re.compile(
        r"\b" + "SP" + "EC" + r"(?:\s*§|\b(?!::))"
    ),
    "a path in the peer directory outside the repository": re.compile(r"\b" + "shared" + "/"),
}
CITATION = re.compile(r"§([a-z][a-z0-9-]*)")


def tracked_files() -> dict[str, str]:
    """Every tracked text file (path relative to the root -> text), from ``git ls-files``."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"test_citations needs git to list the tracked files of {ROOT}: {exc}")
    files = {}
    for name in filter(None, out.split("\0")):
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" not in data[:8192]:
            files[name] = data.decode("utf-8", errors="replace")
    assert "docs/concepts/conventions.md" in files, "git ls-files listed no conventions page"
    return files


def occurrences(pattern: re.Pattern[str], files: dict[str, str]) -> list[str]:
    found = []
    for name, text in sorted(files.items()):
        for number, line in enumerate(text.splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def convention_anchors() -> set[str]:
    return set(re.findall(r"^\(([a-z][a-z0-9-]*)\)=$", CONVENTIONS.read_text(), flags=re.M))


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_no_tracked_file_cites_outside_the_repository(what: str) -> None:
    found = occurrences(FORBIDDEN[what], tracked_files())
    assert not found, (
        f"{len(found)} lines cite {what}; cite the conventions page (conventions §<anchor>, an anchor of "
        "docs/concepts/conventions.md) or a file in the repository instead:\n" + "\n".join(found)
    )


def test_every_conventions_citation_names_an_anchor_of_the_conventions_page() -> None:
    anchors = convention_anchors()
    bad = []
    for name, text in sorted(tracked_files().items()):
        for number, line in enumerate(text.splitlines(), start=1):
            bad += [
                f"{name}:{number}: §{m[1]}" for m in CITATION.finditer(line) if m[1] not in anchors
            ]
    assert not bad, (
        "these citations name no anchor of docs/concepts/conventions.md (its anchors: "
        + ", ".join(sorted(anchors))
        + "):\n"
        + "\n".join(bad)
    )


def test_the_citation_patterns_catch_what_they_forbid() -> None:
    spec, peers = FORBIDDEN.values()
    assert spec.search("follows " + "SP" + "EC" + " §2.3")
    assert spec.search("the " + "SP" + "EC" + "'s definition")
    assert not spec.search("refimpl::" + "SP" + "EC" + "::CHECK")  # a placeholder, not a citation
    assert not spec.search("SPECS = {}")
    assert peers.search("python ../" + "shared" + "/peers/simpy_queue.py")
    assert not CITATION.search("David & Nagaraja (2003), §2.1")
    assert {"staleness", "tie-rule", "first-k-of-n"} <= convention_anchors()
