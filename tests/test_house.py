"""The house rules of ``refimpl/``: small rooms, short functions, no history in code or docs.

- No module of ``refimpl/`` runs past :data:`MAX_MODULE_LINES` lines: one module per quantity a
  reader can name.
- No function runs past :data:`MAX_FUNCTION_LINES` lines of code, counted with :mod:`ast` from
  its ``def`` to its last statement, without its docstring: a numpydoc docstring with its
  formula and doctested examples is documentation, and the style asks for it; the code after it
  is what a reader must hold in mind, and past a hundred lines it is a pipeline that wants
  named steps.
- No issue number in ``refimpl/``, ``docs/`` (but ``docs/changelog.md``, which is the history)
  and ``proofs/``: a user cannot see the tracker; the code says what it does and why.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100

#: "issue 36", "issues 33 and 36", "(#33)", "see #12": an issue cited by number. Not an anchor
#: (``#stable-names``), a colour (``#1f77b4``, ``color:#444;``), a count (``#samples``) or the
#: occurrence of a mutant's key (``f: 3 -> (2) #1``, tools/mutate.py).
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&/#:])(?<!\) )#\d{1,5}\b(?![\w;}-])", re.IGNORECASE)


def _where(path: Path, base: Path) -> str:
    return path.relative_to(base).as_posix()


def long_modules(root: Path, base: Path = ROOT) -> list[str]:
    """``path: n lines`` for every ``.py`` under ``root`` longer than the limit."""
    found = []
    for path in sorted(root.rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > MAX_MODULE_LINES:
            found.append(f"{_where(path, base)}: {n} lines")
    return found


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the ``def`` (decorators not counted) to the last statement, minus the
    docstring's lines."""
    assert node.end_lineno is not None
    total = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
        and first.end_lineno is not None
    ):
        total -= first.end_lineno - first.lineno + 1
    return total


def long_functions(root: Path, base: Path = ROOT) -> list[str]:
    """``path:line name: n lines`` for every function under ``root`` longer than the limit."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = code_lines(node)
                if n > MAX_FUNCTION_LINES:
                    found.append(f"{_where(path, base)}:{node.lineno} {node.name}: {n} lines")
    return found


def issue_references(paths: list[Path], base: Path = ROOT) -> list[str]:
    """``path:line: text`` for every line that cites an issue by number."""
    found = []
    for path in paths:
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ISSUE.search(line):
                found.append(f"{_where(path, base)}:{i}: {line.strip()[:100]}")
    return found


def _documents() -> list[Path]:
    roots = [ROOT / "refimpl", ROOT / "docs", ROOT / "proofs"]
    skip = {ROOT / "docs" / "changelog.md"}
    suffixes = {".py", ".md", ".rst", ".txt", ".toml", ".html", ".css", ".js"}
    return sorted(
        p
        for root in roots
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in suffixes
        and p not in skip
        and not any(part.startswith(("_build", ".")) or part == "__pycache__" for part in p.parts)
    )


#: Rooms that still break a rule, each with its size when it was listed (none is left). The list
#: only shrinks: a listed room may not grow, and one that keeps the rule must leave the list.
STILL_LONG_MODULES: dict[str, int] = {}
STILL_LONG_FUNCTIONS: dict[str, int] = {}


def rooms(found: list[str]) -> dict[str, int]:
    """``{room: lines}`` from :func:`long_modules` or :func:`long_functions` entries; a function's
    room is ``path name`` (its line number moves with every edit above it)."""
    out = {}
    for entry in found:
        where, n = entry.rsplit(": ", 1)
        path, _, name = where.partition(" ")
        out[f"{path.split(':')[0]} {name}".strip()] = int(n.split()[0])
    return out


def breaches(found: dict[str, int], listed: dict[str, int]) -> list[str]:
    """What breaks the rule beyond the list: a new room, a listed room that grew, and a listed room
    that now keeps the rule (take it off the list)."""
    out = [f"{room}: {n} lines (not listed)" for room, n in found.items() if room not in listed]
    out += [
        f"{room}: {n} lines (listed at {listed[room]})"
        for room, n in found.items()
        if room in listed and n > listed[room]
    ]
    out += [
        f"{room}: keeps the rule now; take it off the list" for room in listed if room not in found
    ]
    return out


def test_no_module_runs_past_800_lines() -> None:
    assert breaches(rooms(long_modules(ROOT / "refimpl")), STILL_LONG_MODULES) == []


def test_no_function_runs_past_100_lines_of_code() -> None:
    assert breaches(rooms(long_functions(ROOT / "refimpl")), STILL_LONG_FUNCTIONS) == []


def test_the_list_of_long_rooms_only_shrinks() -> None:
    # the wrong variants: a room not listed, a listed room grown by a line, a listed room that
    # keeps the rule; beside them a listed room at its size, which is no breach
    found = {"a.py f": 120, "b.py g": 131, "c.py h": 101}
    listed = {"b.py g": 130, "c.py h": 101, "d.py k": 140}
    assert breaches(found, listed) == [
        "a.py f: 120 lines (not listed)",
        "b.py g: 131 lines (listed at 130)",
        "d.py k: keeps the rule now; take it off the list",
    ]
    assert rooms(["refimpl/x.py:12 run: 150 lines"]) == {"refimpl/x.py run": 150}
    assert rooms(["refimpl/x.py: 900 lines"]) == {"refimpl/x.py": 900}


def test_no_issue_number_in_code_docs_or_proofs() -> None:
    assert issue_references(_documents()) == []


# --- the checks can fail ------------------------------------------------------------------------


def test_the_checks_find_a_long_module_a_long_function_and_an_issue_number(tmp_path: Path) -> None:
    # the wrong variants: 801 lines, a function of 101 lines of code, issue numbers; beside
    # each, the same thing just within the rule
    doc = '    """A docstring of three lines.\n\n    It does not count."""\n'
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    for name, n in (("func.py", MAX_FUNCTION_LINES), ("fine.py", MAX_FUNCTION_LINES - 1)):
        body = "".join(f"    x{i} = {i}\n" for i in range(n))
        (tmp_path / name).write_text("def f():\n" + doc + body)
    assert long_modules(tmp_path, tmp_path) == [f"long.py: {MAX_MODULE_LINES + 1} lines"]
    assert long_functions(tmp_path, tmp_path) == ["func.py:1 f: 101 lines"]
    cited = tmp_path / "cited.md"
    cited.write_text(
        "fixed in issue 36\nsee #33 for why\nIssues 12 and 13\n"
        "{ref}`conventions#stable-names`, colour #1f77b4, the #samples column, a{color:#444;}\n"
        "SURVIVED refimpl/x.py::f: 3 -> (2) #1\n"
    )
    hits = [line.split(":")[1] for line in issue_references([cited], tmp_path)]
    assert hits == ["1", "2", "3"]


# --- text that a string escape ate -----------------------------------------------------------------

#: Control characters that a Python string writing TeX produces when it forgets to be raw
#: ("\bar" is a backspace and "ar", "\varepsilon" a vertical tab and "arepsilon", "\frac" a form
#: feed): MathJax then fails on the page, and a docstring shows the wrong formula.
_EATEN = re.compile("[\x07\x08\x0b\x0c]")


def eaten_escapes(paths: list[Path]) -> list[str]:
    """``path:line`` of each line holding a control character a lost backslash leaves."""
    return [
        f"{path.name}:{n}"
        for path in paths
        # split on newlines only: str.splitlines also splits at a vertical tab and a form feed
        for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1)
        if _EATEN.search(line)
    ]


def test_no_text_holds_a_control_character_from_a_lost_backslash() -> None:
    assert eaten_escapes([*_documents(), *sorted((ROOT / "tests").glob("*.py"))]) == []


def test_the_eaten_escape_check_finds_a_backspace_and_a_vertical_tab(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("$\\bar A$ is fine\n$\bar A$\n$s + \varepsilon$\n", encoding="utf-8")
    assert eaten_escapes([page]) == ["page.md:2", "page.md:3"]
