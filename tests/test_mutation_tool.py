"""The mutation tool's own contract: the seed of a change, the modules it picks, the exit status.

``tools/mutate.py`` is what CI runs on each change (``.ci/mutation``): a fresh sample of the formula
modules the change touched, failing below a threshold. Its verdict is only as good as these parts:
the seed is derived from the commit (new for each change, the same for the same commit), the
modules are the ones the change touched (formula modules only, deleted ones left out), the sample
is split over them, and the exit status is 1 exactly when the score is below the threshold. The end
to end runs mutate a tiny fixture module in a temporary repository (a few pytest runs of one test
each), never the suite itself.
"""

from __future__ import annotations

import json
import random
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from _scripts import load_script
from _wrong_variants import rejects

ROOT = Path(__file__).resolve().parent.parent


def _tool() -> ModuleType:
    return load_script("mutate", ROOT / "tools" / "mutate.py")


mutate = _tool()

TINY = """\
def inc(x: int) -> int:
    return x + 1


def unchecked(x: int) -> bool:
    return not x
"""
TINY_TEST = """\
from refimpl.tiny import inc


def test_inc() -> None:
    assert inc(1) == 2
"""


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _fixture_repo(root: Path) -> Path:
    """A repository holding one formula-like module (``refimpl/tiny.py``: 3 mutants a test kills,
    ``not x`` -> ``x`` that none does) and its tests, committed on ``main``."""
    (root / "refimpl").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "refimpl" / "__init__.py").write_text("")
    (root / "refimpl" / "tiny.py").write_text(TINY)
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "test_tiny.py").write_text(TINY_TEST)
    (root / "tests" / "test_validation.py").write_text("def test_nothing() -> None:\n    pass\n")
    (root / "tools").mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "tiny")
    return root


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = _fixture_repo(tmp_path / "repo")
    monkeypatch.setattr(mutate, "ROOT", root)
    monkeypatch.setattr(mutate, "EQUIVALENTS", root / "tools" / "mutation-equivalents.toml")
    monkeypatch.setattr(mutate, "FORMULA_MODULES", ("refimpl/tiny.py",))
    mutate._import_graph.cache_clear()
    return root


# --- the seed of a change ---------------------------------------------------------------------


def test_commit_seed_is_the_hash_first_32_bits() -> None:
    assert mutate.commit_seed("0123abcd" + "f" * 32) == 0x0123ABCD
    assert mutate.commit_seed("ffffffff" + "0" * 56) == 2**32 - 1  # SHA-256 repositories
    assert mutate.commit_seed("0" * 40) == 0


def test_commit_seed_differs_between_commits_and_repeats_for_one() -> None:
    hashes = [f"{i:08x}" + "a" * 32 for i in (1, 2, 3)]
    assert len({mutate.commit_seed(h) for h in hashes}) == 3
    assert mutate.commit_seed(hashes[0]) == mutate.commit_seed(hashes[0])


@pytest.mark.parametrize("bad", ["0123abc", "HEAD", "0123ABCD" + "f" * 32, "g" * 40, ""])
def test_commit_seed_refuses_what_is_not_a_full_hash(bad: str) -> None:
    with pytest.raises(ValueError, match="commit must be a full hexadecimal commit hash"):
        mutate.commit_seed(bad)


def test_the_seed_of_a_changed_run_is_heads(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    (repo / "README").write_text("no formula here\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "docs only")
    head = _git(repo, "rev-parse", "HEAD")
    assert mutate.main(["--changed", "--list"]) == 0
    out = capsys.readouterr().out
    assert f"seed {mutate.commit_seed(head)}" in out
    assert "no formula module changed: nothing to mutate (passed)" in out


# --- the modules a change touched -------------------------------------------------------------


def test_changed_modules_keeps_existing_formula_modules_only(tmp_path: Path) -> None:
    for name in ("refimpl/dispatch/ipw.py", "refimpl/penalties.py", "refimpl/sim/_config.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    names = [
        "refimpl/dispatch/ipw.py",
        "refimpl/penalties.py",
        "refimpl/sim/_config.py",  # not a formula module
        "refimpl/staleness/gone.py",  # deleted by the change
        "refimpl/dispatch/README.md",  # not a module
        "tests/test_dispatch.py",
        "docs/howto/develop.md",
    ]
    got = mutate.changed_modules(names, root=tmp_path)
    assert got == [(tmp_path / "refimpl/dispatch/ipw.py").resolve(),
                   (tmp_path / "refimpl/penalties.py").resolve()]  # fmt: skip
    assert mutate.changed_modules(["refimpl/sim/_config.py"], root=tmp_path) == []
    assert mutate.changed_modules(
        ["refimpl/sim/_config.py"], patterns=["refimpl/sim/*.py"], root=tmp_path
    ) == [(tmp_path / "refimpl/sim/_config.py").resolve()]


def test_changed_files_since_a_revision_and_of_the_last_commit(tmp_path: Path) -> None:
    root = _fixture_repo(tmp_path / "repo")
    _git(root, "checkout", "-q", "-b", "change")
    (root / "refimpl" / "other.py").write_text("X = 1\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    (root / "refimpl" / "tiny.py").write_text(TINY + "\n\nY = 2\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "second")
    _git(root, "checkout", "-q", "main")
    (root / "tests" / "test_tiny.py").write_text(TINY_TEST + "\n")  # main moves on meanwhile
    _git(root, "commit", "-q", "-am", "on main")
    _git(root, "checkout", "-q", "change")
    # REV...HEAD: what the branch changed since it left main, not what main did since
    assert mutate.changed_files("main", root=root) == ["refimpl/other.py", "refimpl/tiny.py"]
    assert mutate.changed_files(None, root=root) == ["refimpl/tiny.py"]  # the last commit alone
    first = _fixture_repo(tmp_path / "fresh")  # a root commit: every file it added
    assert "refimpl/tiny.py" in mutate.changed_files(None, root=first)


def test_split_sample_is_even_and_spills_over() -> None:
    assert mutate.split_sample([100, 100, 100], 7) == [3, 2, 2]
    assert mutate.split_sample([1, 100, 3], 9) == [1, 5, 3]
    assert mutate.split_sample([2, 2], 10) == [2, 2]  # never more than the sites
    assert mutate.split_sample([5, 5, 5], 2) == [1, 1, 0]
    assert mutate.split_sample([], 4) == []


def test_a_split_draw_takes_its_quota_from_each_module(repo: Path) -> None:
    other = repo / "refimpl" / "other.py"
    other.write_text("def f(a: int, b: int) -> int:\n    return a * b + a - b // 2 + 7\n")
    paths = [repo / "refimpl" / "tiny.py", other]
    drawn = mutate.draw(paths, 3, seed=5, split=True)
    counts = {m.module: sum(d.module == m.module for d in drawn) for m in drawn}
    assert counts == {"refimpl/other.py": 1, "refimpl/tiny.py": 2}
    assert drawn == mutate.draw(paths, 3, seed=5, split=True)  # reproducible from the seed
    # without split: the draw of earlier versions of the tool, so old seeds give old samples
    everything = [m for p in paths for m in mutate.mutants(p)]
    want = sorted(random.Random(5).sample(everything, 3), key=lambda m: (m.module, m.line, m.col))
    assert mutate.draw(paths, 3, seed=5) == want


def test_the_tests_of_a_package_module_include_its_class_tests(repo: Path) -> None:
    """A formula module is scored by the tests written per class of hole too
    (``tests/test_depth_<pkg>*.py``), which call it through the flat ``refimpl`` names."""
    (repo / "refimpl" / "pkg").mkdir()
    (repo / "refimpl" / "pkg" / "mod.py").write_text("X = 1\n")
    for name in ("test_pkg.py", "test_depth_pkg.py", "test_depth_other.py", "test_unrelated.py"):
        (repo / "tests" / name).write_text("import refimpl\n")
    got = mutate.default_tests(repo / "refimpl" / "pkg" / "mod.py")
    assert got == ["tests/test_depth_pkg.py", "tests/test_pkg.py", "tests/test_validation.py"]
    (repo / "tests" / "test_depth_tiny.py").write_text("import refimpl\n")
    assert "tests/test_depth_tiny.py" in mutate.default_tests(repo / "refimpl" / "tiny.py")
    # the bad calls of a module tested under the name it is re-exported as (no import names it)
    (repo / "tests" / "test_validation_mod.py").write_text("from refimpl import alias\n")
    got = mutate.default_tests(repo / "refimpl" / "pkg" / "mod.py")
    assert "tests/test_validation_mod.py" in got


# --- the threshold and the exit status --------------------------------------------------------


def _outcomes(killed: int, survived: int, equivalent: int = 0, timeout: int = 0) -> list[object]:
    m = mutate.Mutant("refimpl/tiny.py", "inc", "binop", 2, 11, 2, 16, "x + 1", "(x - 1)")
    statuses = ["killed"] * killed + ["survived"] * survived
    statuses += ["equivalent"] * equivalent + ["timeout"] * timeout
    return [mutate.Outcome(m, status, 0.0) for status in statuses]


@pytest.mark.parametrize(
    ("killed", "survived", "equivalent", "timeout", "status"),
    [
        (29, 1, 0, 0, 1),  # 96.7 % < 97 %
        (33, 1, 0, 0, 0),  # 97.06 %
        (97, 3, 0, 0, 0),  # exactly 97 %: not below
        (96, 3, 0, 0, 1),  # 96.97 %
        (28, 1, 5, 1, 1),  # equivalents count apart; a timeout counts as killed: 29 / 30
        (32, 1, 5, 1, 0),  # 33 / 34
        (0, 0, 4, 0, 0),  # nothing not equivalent: nothing to fail
    ],
)
def test_verdict_fails_exactly_below_the_threshold(
    killed: int, survived: int, equivalent: int, timeout: int, status: int
) -> None:
    got, line = mutate.verdict(_outcomes(killed, survived, equivalent, timeout), 0.97)
    assert got == status
    assert line.startswith("FAILED" if status else "passed")


def test_verdict_without_a_threshold_always_passes() -> None:
    assert mutate.verdict(_outcomes(0, 5), None) == (0, "")


def _wrong_verdict(outcomes: list[object], threshold: float) -> tuple[int, str]:
    """Counts equivalents as killed: a score that a list of equivalents could inflate."""
    killed = sum(o.status != "survived" for o in outcomes)  # type: ignore[attr-defined]
    total = len(outcomes)
    return (0 if killed >= threshold * total else 1), ""


def _check_verdict(verdict: object) -> None:
    assert verdict(_outcomes(28, 1, 5, 1), 0.97)[0] == 1  # type: ignore[operator]


def test_the_verdict_check_rejects_counting_equivalents_as_kills() -> None:
    _check_verdict(mutate.verdict)
    rejects(_check_verdict, _wrong_verdict)


def test_a_failing_verdict_prints_each_survivor_as_a_toml_entry() -> None:
    status, line = mutate.verdict(_outcomes(0, 1), 0.97)
    assert status == 1
    entry = line[line.index("[[equivalent]]") :]
    parsed = tomllib.loads(entry.replace("<why no input can tell the mutant from the module>", "r"))
    assert parsed["equivalent"][0]["key"] == "refimpl/tiny.py::inc: x + 1 -> (x - 1) #1"


def test_threshold_must_be_a_fraction(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        mutate.main(["refimpl/penalties.py", "--threshold", "97", "--list"])
    assert "--threshold must be a fraction in [0, 1]" in capsys.readouterr().err


# --- end to end on the fixture module ---------------------------------------------------------


def test_a_module_below_the_threshold_exits_1_and_lists_its_survivor(
    repo: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "out.json"
    tiny = str(repo / "refimpl" / "tiny.py")
    status = mutate.main([tiny, "--sample", "0", "--threshold", "0.97", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert status == 1
    assert "score 75.0 % (3 killed, 1 survived, 0 equivalent of 4 sampled; seed 0)" in out
    assert "SURVIVED refimpl/tiny.py::unchecked: not x -> (x) #1" in out
    assert "FAILED: 3 of 4 not-equivalent mutants killed, below the threshold 0.97" in out
    rows = json.loads(out_json.read_text())
    assert sorted(r["status"] for r in rows) == ["killed"] * 3 + ["survived"]


def test_a_changed_run_passes_once_its_survivor_is_listed_equivalent(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mutate.EQUIVALENTS.write_text(
        '[[equivalent]]\nkey = "refimpl/tiny.py::unchecked: not x -> (x) #1"\nreason = "fixture"\n'
    )
    status = mutate.main(["--changed", "--sample", "4", "--threshold", "0.97"])
    out = capsys.readouterr().out
    head = _git(repo, "rev-parse", "HEAD")
    assert status == 0
    assert f"in the last commit (HEAD {head[:12]}): seed {mutate.commit_seed(head)}" in out
    assert "  refimpl/tiny.py\n" in out
    assert "score 100.0 % (3 killed, 0 survived, 1 equivalent of 4 sampled" in out
    assert "equivalent refimpl/tiny.py:6: 'not x' -> '(x)': fixture" in out
    assert "passed: 3 of 3 not-equivalent mutants killed (threshold 0.97)" in out


def test_fresh_prints_its_seed_first(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mutate.main([str(repo / "refimpl" / "tiny.py"), "--fresh", "--list"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("fresh seed ")
    seed = int(first.split()[2])
    assert 0 <= seed < 2**32
    assert first.endswith(f"(repeat this sample with --seed {seed})")


def test_only_runs_the_listed_mutants_whatever_the_sample(
    repo: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("refimpl/tiny.py::unchecked: not x -> (x) #1\n")
    tiny = str(repo / "refimpl" / "tiny.py")
    assert mutate.main([tiny, "--sample", "1", "--seed", "3", "--only", str(keys)]) == 0
    out = capsys.readouterr().out
    assert "score 0.0 % (0 killed, 1 survived, 0 equivalent of 1 sampled; seed 3)" in out
    keys.write_text("refimpl/tiny.py::inc: x + 1 -> (x * 1) #1\n")
    with pytest.raises(SystemExit, match="no such mutant"):
        mutate.main([tiny, "--only", str(keys)])


def test_a_depth_1_clone_is_refused_with_the_fix(tmp_path: Path) -> None:
    origin = _fixture_repo(tmp_path / "origin")
    (origin / "refimpl" / "tiny.py").write_text(TINY + "\nZ = 3\n")
    _git(origin, "commit", "-q", "-am", "second")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{origin}", str(clone))
    with pytest.raises(SystemExit, match=r"depth 1\).*--deepen 1"):
        mutate.changed_files(None, root=clone)
    _git(clone, "fetch", "-q", "--deepen", "1")
    assert mutate.changed_files(None, root=clone) == ["refimpl/tiny.py"]


def test_a_sigint_ignored_by_the_shell_is_not_passed_on_to_the_tests(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Started as a background job (SIGINT ignored, inherited by every test process), the tool
    puts SIGINT back to Python's default first: a test that sends itself a real Ctrl-C failed
    the unmutated run of refimpl/losses that way."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert mutate.main(["refimpl/penalties.py", "--list"]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert "refimpl/penalties.py:" in capsys.readouterr().out
