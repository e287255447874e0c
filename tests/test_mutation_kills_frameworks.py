"""Pinned behaviours of refimpl.frameworks that a sampled mutation run (``tools/mutate.py``, seed
2026, with ``tests/test_frameworks.py`` and ``tests/test_validation_frameworks.py``) found no test
holding: each test names the mutant it was seen to fail on. These run in the normal environment;
the adapters' calls into the installed frameworks are tested by ``tests_frameworks/``."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import sys
from pathlib import Path

import pytest
from _validation_table import Case, check_refusal

from refimpl import frameworks as fw
from refimpl.frameworks._matrix import MATRIX_PATH, load_matrix, render_markdown

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    # mutant: the message's "be one of " + names made "-" (a TypeError instead of the refusal)
    Case(
        "adapters-unknown-framework",
        lambda: fw.adapters(framework="nope"),
        ValueError,
        r"framework must be one of 'verl', 'trl', 'areal', 'skyrl', 'openrlhf'; "
        r"got framework='nope'\. Pass one of these names, or None for every adapter\.",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)


def test_the_page_s_verdict_cell_links_a_divergence_and_states_a_clean_verdict() -> None:
    # an entry with divergences links to its section and names their kinds; any other shows its
    # verdict as recorded (mutant: the `if e["divergences"]` of render_markdown negated, which
    # swapped the two; the committed matrix has entries of both kinds)
    matrix = load_matrix(ROOT / MATRIX_PATH)
    page = render_markdown(matrix)
    weights_table = page.split("## Weights, masks, penalties and staleness")[1].split("\n## ")[0]
    rows = {
        line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1]
        for line in weights_table.splitlines()
        if line.startswith("| `")
    }
    weights = [e for e in matrix["entries"] if e["level"] == "weights"]
    kinds_seen = {bool(e["divergences"]) for e in weights}
    assert kinds_seen == {True, False}
    for e in weights:
        cell = rows[f"`{e['key']}`"]
        if e["divergences"]:
            anchor = e["key"].replace(".", "-").replace("_", "-")
            kinds = ", ".join(sorted({d["classification"] for d in e["divergences"]}))
            assert cell == f"[divergence](#{anchor}) ({kinds})"
        else:
            assert cell == e["verdict"]
    assert rows["`trl.off_policy_mask`"] == "[divergence](#trl-off-policy-mask) (convention)"


def test_a_staleness_bound_of_zero_is_on_policy_and_minus_one_is_refused() -> None:
    # 0 is the smallest setting (strictly on-policy), accepted as η = 0 (mutant: skyrl's minimum
    # of 0 made 1, which refused it)
    skyrl = fw.skyrl_staleness_bound(max_staleness_steps=0)
    assert (skyrl.eta, skyrl.value) == (0, 0.0)
    assert fw.trl_staleness_bound(max_staleness=0).eta == 0
    check_refusal(
        Case(
            "skyrl-negative",
            lambda: fw.skyrl_staleness_bound(max_staleness_steps=-1),
            ValueError,
            r"max_staleness_steps must be >= 0 \(SkyRL's staleness bound in versions\); "
            r"got max_staleness_steps=-1",
        )
    )


def test_a_stub_skips_a_broken_package_init_and_keeps_its_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # install_stubs on a made-up framework whose subpackage __init__ cannot be imported: the stub
    # replaces that __init__ only, a module under it loads from its file, and a second call keeps
    # the stub in place (mutant: `stub.package in sys.modules` negated, so no stub was installed)
    from refimpl.frameworks import _stubs

    package = tmp_path / "fakefw_h15a"
    (package / "backends").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "backends" / "__init__.py").write_text("raise ImportError('broken __init__')\n")
    (package / "backends" / "inner.py").write_text("VALUE = 41 + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stub = _stubs.Stub(framework="fakefw_h15a", package="fakefw_h15a.backends", reason="test")
    monkeypatch.setattr(_stubs, "STUBS", (stub,))
    try:
        _stubs.install_stubs()
        first = sys.modules["fakefw_h15a.backends"]
        assert first.__path__ == [str(package / "backends")]
        inner = importlib.import_module("fakefw_h15a.backends.inner")
        assert inner.VALUE == 42
        _stubs.install_stubs()
        assert sys.modules["fakefw_h15a.backends"] is first
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "fakefw_h15a"]:
            del sys.modules[name]


def test_load_from_source_runs_the_named_classes_of_an_unimportable_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a made-up framework whose module imports something missing: the listed class is executed
    # from the installed file (mutants: `spec.origin is None` made `is not None`, which said the
    # package is not installed; `entry is None` negated)
    from refimpl.frameworks import _stubs

    package = tmp_path / "fakefw_h15a_src"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trainer.py").write_text(
        "import not_a_module_h15a\n\n\n@dataclass\nclass Counter:\n    n: int = 0\n\n"
        "    def step(self) -> int:\n        return self.n + 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = _stubs.SourceLoad(
        framework="fakefw_h15a_src",
        source="fakefw_h15a_src.trainer",
        names=("Counter",),
        imports="from dataclasses import dataclass",
        reason="test",
    )
    missing = dataclasses.replace(entry, source="not_installed_h15a.trainer")
    monkeypatch.setattr(_stubs, "SOURCE_LOADS", (entry, missing))
    try:
        loaded = _stubs.load_from_source("fakefw_h15a_src.trainer")
        assert list(loaded) == ["Counter"]
        assert loaded["Counter"](n=41).step() == 42
        with pytest.raises(ModuleNotFoundError, match="not_installed_h15a is not installed"):
            _stubs.load_from_source("not_installed_h15a.trainer")
    finally:
        for name in [m for m in sys.modules if "fakefw_h15a_src" in m]:
            del sys.modules[name]
    check_refusal(
        Case(
            "load_from_source-unlisted",
            lambda: _stubs.load_from_source("fakefw_h15a_src.other"),
            ValueError,
            r"module must have an entry in refimpl\.frameworks\.SOURCE_LOADS; "
            r"got module='fakefw_h15a_src\.other'\. List it there",
        )
    )


def test_conformance_check_and_write_on_a_stand_in_fresh_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `refimpl conformance` with the matrix run replaced by the committed TRL entries (no framework
    # needed): --check exits 0 when nothing changed and 1 when a verdict did, --write writes the
    # merged matrix as indented JSON ending in a newline (mutants: the exit condition negated,
    # `if args.write` negated, the trailing "\n" made "-" "\n")
    from refimpl.cli import main
    from refimpl.frameworks import _matrix, _registry

    committed = load_matrix(ROOT / MATRIX_PATH)
    trl = [e for e in committed["entries"] if e["framework"] == "trl"]
    fresh = {**committed, "entries": copy.deepcopy(trl)}
    monkeypatch.setattr(_matrix, "run_matrix", lambda names, **kw: copy.deepcopy(fresh))
    monkeypatch.setattr(
        _registry, "installed_version", lambda name: "1.16.0" if name == "trl" else None
    )
    path = tmp_path / "matrix.json"
    path.write_text((ROOT / MATRIX_PATH).read_text())
    args = ["conformance", "--framework", "trl", "--matrix", str(path)]
    assert main([*args, "--check"]) == 0
    assert "no change against" in capsys.readouterr().out
    fresh["entries"][0]["verdict"] = "fail"
    assert main([*args, "--check"]) == 1
    assert "1 change(s) against" in capsys.readouterr().out
    assert path.read_text() == (ROOT / MATRIX_PATH).read_text()  # --check alone writes nothing
    assert main([*args, "--write"]) == 0
    written = path.read_text()
    merged = {**committed, "entries": sorted(
        [e for e in committed["entries"] if e["framework"] != "trl"] + fresh["entries"],
        key=lambda e: e["key"],
    )}  # fmt: skip
    assert written == json.dumps(merged, indent=1) + "\n"


def test_the_committed_matrix_is_of_the_layout_this_code_writes() -> None:
    # run_matrix stamps "schema": SCHEMA; the committed file must carry the same layout version
    # (mutant: SCHEMA = 1 made 0; the losses level made it 2)
    from refimpl.frameworks._matrix import SCHEMA

    assert SCHEMA == 2
    assert load_matrix(ROOT / MATRIX_PATH)["schema"] == SCHEMA


def test_the_import_check_exits_1_on_a_missing_framework_or_a_failed_import(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # python -m refimpl.frameworks.imports: exit 1, naming the framework or the function
    # (mutants: either `return 1` made 0 or 2)
    import refimpl.frameworks as package
    from refimpl.frameworks import imports

    monkeypatch.setattr(package, "installed_version", lambda name: None)
    assert imports.main() == 1
    assert "verl: verl is not installed (tested: " in capsys.readouterr().err
    monkeypatch.setattr(package, "installed_version", lambda name: package.TESTED_VERSIONS[name][1])

    def refuse(function: str) -> None:
        raise ImportError(f"no {function}")

    monkeypatch.setattr(package, "load_function", refuse)
    assert imports.main() == 1
    assert "cannot import verl.trainer.ppo.rollout_corr_helper" in capsys.readouterr().err
