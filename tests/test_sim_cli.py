"""``refimpl simulate`` gives every input a clear answer: a run, or one line on stderr and exit 2.

Each refusal names the option the user typed, the rule, the value received and the fix; no traceback,
no numpy or scipy warning and no internal field name or object repr reaches the user.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects

import refimpl.sim.cli as sim_cli
from refimpl.cli import main
from refimpl.sim import SimConfig, _simulate_any
from refimpl.sim._cliopts import small_pages

_RUN = ["simulate", "--no-progress", "--slots", "8", "--batch", "8"]


def _refused(capsys: pytest.CaptureFixture[str], options: str, tmp_path: Path | None = None) -> str:
    """Run ``refimpl simulate`` with ``options``; assert exit 2 with one clean line; return it."""
    extra = shlex.split(options.format(tmp=tmp_path))
    if "--rollouts" not in extra and "--steps" not in extra:
        extra += ["--steps", "2"]
    assert main([*_RUN, *extra]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith("refimpl simulate: "), out.err
    for leak in ("Traceback", "Warning", "<scipy", "object at 0x", "<function", "_frozen"):
        assert leak not in out.err, out.err
    return lines[0]


def _ran(capsys: pytest.CaptureFixture[str], options: str) -> tuple[dict[str, object], str]:
    extra = shlex.split(options)
    if "--rollouts" not in extra and "--steps" not in extra:
        extra += ["--steps", "2"]
    assert main([*_RUN, *extra, "--json"]) == 0, capsys.readouterr().err
    out = capsys.readouterr()
    return json.loads(out.out), out.err


# ---------------------------------------------------------------------------------------------
# 1. values that are valid in form but that float64 cannot simulate meaningfully
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("--mu 50", "--mu and --sigma must give a lognormal mean exp(--mu + --sigma^2/2) <= 2^53"),
        ("--mu 45", "got --mu=45.0 and --sigma=1.0 (--mu + --sigma^2/2 = 45.5)"),
        ("--mu 40", "--mu + --sigma^2/2 <= 36.74"),
        ("--sigma 30", "got --mu=6.0 and --sigma=30.0"),
        ("--sigma 1e10", "--mu and --sigma must give a lognormal mean"),
        ("--mu -800", "--mu must be >= -36.74"),
        ("--mu nan", "--mu must be finite"),
        ("--mu inf", "--mu must be finite"),
        ("--sigma nan", "--sigma must be finite"),
        ("--token-time 1e308", "--token-time must lie in [2^-53, 2^53]"),
        ("--token-time 1e-320", "--token-time must lie in [2^-53, 2^53]"),
        ("--token-time nan", "--token-time must be finite"),
        ("--prefill-time 1e300", "--prefill-time must lie in [0, 2^53"),
        ("--trainer-time 1e308", "--trainer-time must lie in [0, 2^53"),
        ("--trainer-time 1e308 --trainer-time-random", "--trainer-time must be in (0, 2^53]"),
        ("--trainer-time -inf", "--trainer-time must be finite"),
        ("--mu -1e3", "--mu must be >= -36.74"),  # argparse read -1e3 as an option
        ("--sigma -0.0", "--sigma must be > 0"),
        ("--lengths-pmf -0.1,1.1", "--lengths-pmf must be non-negative"),
        ("--slowdown-per-slot 1e308", "--slowdown-per-slot must keep the decode slowdown factor"),
        ("--slowdown-per-slot nan", "--slowdown-per-slot must keep the decode slowdown factor"),
        ("--preempt-rate 1e300 --preempt-duration 1", "--preempt-rate must lie in [0, 2^53"),
        ("--preempt-rate 0.1 --preempt-duration 1e300", "--preempt-duration must lie in [0, 2^53"),
        (  # 6.7e5 preemption events per rollout: the run did not end
            "--preempt-rate 1000 --preempt-duration 1",
            "--preempt-rate must expect at most 1024 preemptions per rollout",
        ),
        ("--lengths-npy {tmp}/huge.npy", "--lengths-npy must be <= 2^53"),
        ("--rollouts 99999999999999999999", "--rollouts must keep the run to at most 5e+07"),
        ("--slots 99999999999999999999 --steps 1", "the run does not fit in memory"),
        ("--slots 1 --batch 99999999999999 --steps 3", "--steps must keep the run to at most"),
        (  # the factor was tabulated for 2^31 busy counts in a Python loop (found by the fuzzer)
            "--slots 2147483648 --slowdown-per-slot 0",
            "--slots must be <= 2^20 = 1048576 with a slowdown",
        ),
        (  # 6.4e7 tool calls, each an event and a trace row (found by the fuzzer: it hung)
            "--tool-turns 1_000_000 --batch 64 --steps 1",
            "--tool-turns must keep the run to at most 5e+07 rollouts and tool calls",
        ),
        (  # the slots keep generating while the trainer works: 1.6e11 rollouts queued (it hung)
            "--trainer-time 2147483648",
            "the 8 slots generate about 5.17e+07 more rollouts, queued",
        ),
    ],
)
def test_meaningless_numbers_are_refused_with_the_range_that_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, says: str
) -> None:
    np.save(tmp_path / "huge.npy", np.full((8, 40), 1e300))
    line = _refused(capsys, options, tmp_path)
    assert says in line, line
    for field in ("lognormal_", "token_time", "trainer_time", "slowdown must", "preempt_"):
        assert field not in line, line


def test_the_lognormal_bound_is_in_the_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "-36.74 <= mu and mu + sigma^2/2 <= 36.74" in text
    assert "decode time per token, in [2^-53, 2^53]" in text


@pytest.mark.parametrize(
    "fields",
    [
        {"lognormal_mu": -800.0},  # every draw underflows to 0 tokens (the run never ended)
        {"lognormal_mu": -40.0, "lognormal_sigma": 5.0},
        {"lognormal_sigma": 1e10},
        {"token_time": 1e308},
        {"trainer_time": 1e308},  # the clock overflowed (the run never ended)
        {"preempt_rate": 1e300, "preempt_duration": 1.0},
        {"kv_restore_time": 1e300},
        {"lengths": np.full((2, 4), 2.0**60)},
        {"slowdown": lambda busy: 1e300},
    ],
)
def test_sim_config_refuses_what_float64_cannot_simulate(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"2\^-?53"):
        SimConfig(slots=2, batch=2, steps=2, **fields)  # type: ignore[arg-type]


def test_negative_zero_times_read_as_zero() -> None:
    cfg = SimConfig(slots=2, batch=2, steps=2, prefill_time=-0.0, trainer_time=-0.0)
    assert np.copysign(1.0, cfg.prefill_time) == 1.0
    assert np.copysign(1.0, cfg.trainer_time) == 1.0


def test_the_largest_lengths_within_range_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # whole-number lengths of 1e15 tokens: the length-bias histogram counted 1e15 bins before
    np.save(tmp_path / "big.npy", np.full((8, 40), 1e15))
    out, err = _ran(capsys, f"--lengths-npy {tmp_path / 'big.npy'}")
    assert out["length_mean"] == 1e15
    assert err == ""
    out, _ = _ran(capsys, "--mu 36 --sigma 0.5 --token-time 9e15")
    assert out["trained_rollouts"] == 16


# ---------------------------------------------------------------------------------------------
# 2. --eta without --over-bound drop
# ---------------------------------------------------------------------------------------------


def test_an_eta_that_acts_on_nothing_says_so_on_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plain, err = _ran(capsys, "--steps 4")
    bounded, err = _ran(capsys, "--steps 4 --eta 0")
    assert bounded["staleness_hist"] == plain["staleness_hist"]  # nothing dropped: keep
    assert err.count("\n") == 1, err
    assert err.startswith("refimpl simulate: note: --eta 0 changes nothing here"), err
    assert "--over-bound drop" in err
    for acting in ("--eta 0 --over-bound drop", "--mode admission --eta 0"):
        _, err = _ran(capsys, f"--steps 4 {acting}")
        assert err == "", err
    _, err = _ran(capsys, "--steps 4 --tool-turns 1 --eta 0")
    assert "note: --eta 0 changes nothing here" in err, err


def test_the_help_says_what_eta_does_with_keep(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "with the default --over-bound keep in the other modes it changes nothing" in text


# ---------------------------------------------------------------------------------------------
# 3. options that the chosen mode does not read
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("--leftovers carry", "--leftovers applies only to --mode first_k"),
        ("--mode sync --leftovers drop", "got --leftovers drop without it. Pass --mode first_k"),
        ("--tool-shards 2", "--tool-shards applies only to agent rollouts"),
        ("--tool-latency 5", "Add --tool-turns N"),
        ("--tool-admission queue", "--tool-admission applies only to agent rollouts"),
        ("--tool-timeout 3", "--tool-timeout applies only to agent rollouts"),
        ("--agent-lengths expon", "--agent-lengths applies only to agent rollouts"),
        ("--reprefill-token-time 2", "--reprefill-token-time applies only when generated tokens"),
        ("--partial keep_kv --reprefill-token-time 2", "with --partial recompute"),
        ("--kv-restore-time 1", "--kv-restore-time applies only with preemption"),
        ("--preempt-duration 3", "--preempt-duration applies only with preemption"),
        ("--no-persist-kv", "--no-persist-kv applies only with preemption"),
        (
            "--preempt-rate 0.01 --preempt-duration 1 --no-persist-kv --kv-restore-time 1",
            "which --no-persist-kv turns off",
        ),
        ("--lengths-pmf 1 --mu 3", "--mu applies only to the default lognormal length law"),
        ("--lengths-pmf 1 --sigma 2", "which --lengths-pmf replaces; got --sigma 2.0 with"),
        ("--tool-turns 1 --partial restart", "--partial applies only to the plain simulator"),
        ("--tool-turns 1 --engine event", "--engine applies only to the plain simulator"),
        ("--tool-turns 1 --trainer-time 2", "--trainer-time applies only to the plain simulator"),
        ("--tool-turns 1 --prefill-time 2", "--prefill-time applies only to the plain simulator"),
        ("--tool-turns 1 --preempt-rate 0.1", "--preempt-rate applies only to the plain"),
        ("--tool-turns 1 --slowdown-per-slot 0.1", "--slowdown-per-slot applies only"),
        ("--tool-turns 1 --mode sync", "--mode must be async (or not given) with --tool-turns"),
        ("--tool-turns 1 --tool-max-redirects 1", "applies only with --tool-admission redirect"),
        (
            "--tool-turns 1 --tool-recovery reexecute --tool-replay-cost 1",
            "--tool-replay-cost applies only with --tool-recovery replay",
        ),
        ("--tool-turns 1 --agent-lengths expon --lengths-pmf 1", "must not be combined with"),
        ("--tool-turns 1 --agent-lengths expon --mu 3", "which --agent-lengths replaces"),
        ("--tool-turns 1 --rollouts 16 --steps 2", "--rollouts and --steps must not both"),
        ("--tool-turns 1 --closed-form", "--closed-form applies only to the plain simulator"),
    ],
)
def test_an_option_the_mode_does_not_read_is_refused(
    capsys: pytest.CaptureFixture[str], options: str, says: str
) -> None:
    line = _refused(capsys, options)
    assert says in line, line
    first = options.split()[-2] if options.split()[-1][0] != "-" else options.split()[-1]
    assert line.startswith("refimpl simulate: --"), line
    assert first in line or "--mode" in line or "--rollouts" in line, line


@pytest.mark.parametrize(
    "options",
    [
        "--mode first_k --leftovers carry",
        "--partial recompute --reprefill-token-time 2",
        "--preempt-rate 0.001 --preempt-duration 1 --kv-restore-time 1",
        "--preempt-rate 0.001 --preempt-duration 1 --no-persist-kv --reprefill-token-time 1",
        "--lengths-pmf 0.5,0.5",
        "--tool-turns 1 --mode async --tool-admission redirect --tool-max-redirects 1",
        "--tool-turns 1 --tool-recovery replay --tool-replay-cost 1 --tool-latency 2",
    ],
)
def test_options_that_apply_still_run(capsys: pytest.CaptureFixture[str], options: str) -> None:
    out, err = _ran(capsys, options)
    assert err == ""
    assert out["length_mean"] is not None


#: The one-time costs every mode reports apart from its rate (seconds).
ONE_TIME = ("startup_s", "lengths_s", "kernel_s", "memory_s", "total_wall_s")


def check_one_time_costs(out: dict[str, object]) -> None:
    """Each one-time cost is reported, as seconds (a finite float >= 0), and the call's whole wall
    time covers its start-up and its run."""
    for key in ONE_TIME:
        value = out.get(key)
        assert isinstance(value, float), (key, value)
        assert 0.0 <= value < 3600.0, (key, value)
    total, startup = out["total_wall_s"], out["startup_s"]
    assert isinstance(total, float)
    assert isinstance(startup, float)
    assert total >= startup, out


@pytest.mark.parametrize(
    "options",
    [
        "",
        "--partial recompute",
        "--engine-model qwen2.5-7b-h100 --prompt-tokens 16 --engine event",
        "--tool-turns 1",
    ],
    ids=["async", "partial", "engine-mode", "agent"],
)
def test_every_mode_reports_its_one_time_costs_apart(
    capsys: pytest.CaptureFixture[str], options: str
) -> None:
    out, _ = _ran(capsys, options)
    check_one_time_costs(out)
    rate = out["rollouts_per_s"]
    assert isinstance(rate, float)
    assert rate > 0.0


def test_the_one_time_cost_check_rejects_a_mode_that_omits_them() -> None:
    # the agent path's JSON before it reported them: the rate alone
    rejects(check_one_time_costs, {"rollouts_per_s": 1.0, "wall_s": 0.1})
    rejects(check_one_time_costs, dict.fromkeys(ONE_TIME, 1.0) | {"startup_s": 2.0})


def test_the_closed_form_is_printed_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    # without --closed-form the command loads no scipy.stats (tests/test_sim_startup.py)
    out, _ = _ran(capsys, "--rollouts 64")
    assert out["closed_form"] is None
    out, _ = _ran(capsys, "--rollouts 64 --closed-form")
    closed = out["closed_form"]
    assert isinstance(closed, dict)
    assert closed["formula"] == "D2 fluid"
    assert closed["staleness_mean"] == 1.0  # N / B without a mask: 8 / 8
    out, _ = _ran(capsys, "--rollouts 64 --closed-form --mode admission --eta 1")
    assert out["closed_form"] is None  # no closed form for admission control


# ---------------------------------------------------------------------------------------------
# 4. --trace names what it writes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "agent", "says"),
    [
        ("{tmp}/out.csv", False, r"--trace must name a \.parquet file .*ending in \.csv"),
        ("{tmp}/out.jsonl", False, r"ending in \.jsonl\. Pass e\.g\. --trace .*/out\.parquet"),
        ("{tmp}/out", False, r"without the \.parquet suffix"),
        ("/dev/null", False, r"without the \.parquet suffix"),
        ("", False, r"got an empty --trace=''"),
        ("{tmp}/run.parquet", True, r"must name a directory for agent runs .*ending in \.parquet"),
    ],
)
def test_a_trace_name_says_what_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, agent: bool, says: str
) -> None:
    import re

    options = f"--trace '{where}'" + (" --tool-turns 1" if agent else "")
    line = _refused(capsys, options, tmp_path)
    assert re.search(says, line), line
    assert not any(tmp_path.iterdir())  # refused before the run: nothing written


# ---------------------------------------------------------------------------------------------
# 5. agent rollouts: errors name the options
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("--agent-lengths lognorm:s=-1", "--agent-lengths must give parameters that scipy"),
        ("--agent-lengths norm:loc=nan", "--agent-lengths must give finite parameters"),
        ("--agent-lengths norm:loc=5", "--agent-lengths must be supported on [0, inf)"),
        ("--agent-lengths nosuchdist:x=1", "--agent-lengths must name a scipy.stats distribution"),
        ("--agent-lengths lognorm:s=1,scale=", "--agent-lengths must give parameters as KEY="),
        ("--agent-lengths lognorm:s=1,s=2", "--agent-lengths must give each parameter once"),
        ("--agent-lengths ''", "--agent-lengths must be a number or NAME:KEY=VALUE"),
        ("--agent-lengths poisson:mu=3", "--agent-lengths must put no mass on 0 tokens"),
        ("--agent-lengths pareto:b=0.5", "--agent-lengths must have a finite mean"),
        ("--mu 1000", "--mu and --sigma must give a lognormal mean"),
        ("--lengths-pmf 0.5,0.6", "--lengths-pmf must sum to 1 (within 1e-9); got --lengths-pmf"),
        ("--lengths-npy {tmp}/huge.npy", "--lengths-npy must hold lengths <= 2^53"),
        ("--tool-latency -1", "--tool-latency must be a number in [0, 2^53]"),
        ("--tool-latency nan", "got --tool-latency=nan"),
        ("--tool-latency expon:scale=-1", "--tool-latency must give parameters that scipy"),
        ("--tool-shards 0", "--tool-shards must be >= 1 (pool shards); got --tool-shards=0."),
        ("--tool-shards -1", "--tool-shards must be >= 1"),
        ("--tool-capacity 0", "--tool-capacity must be >= 1"),
        ("--tool-refresh nan", "Pass a finite --tool-refresh."),
        ("--tool-keepalive 0", "--tool-keepalive must be > 0"),
        ("--tool-keepalive nan", "Pass a finite --tool-keepalive."),
        ("--tool-crash-rate inf", "--tool-crash-rate must be finite"),
        ("--tool-cold-start -1", "--tool-cold-start must be >= 0"),
        ("--tool-timeout 0", "--tool-timeout must be > 0"),
        ("--tool-timeout nan", "Pass a finite --tool-timeout."),
        ("--tool-max-attempts 0", "--tool-max-attempts must be >= 1"),
        ("--tool-retry-delay -0.5", "--tool-retry-delay must be >= 0"),
        ("--token-time 1e300", "--token-time must be <= 2^53"),
        ("--seed -1", "--seed must be >= 0"),
    ],
)
def test_agent_mode_errors_name_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, says: str
) -> None:
    np.save(tmp_path / "huge.npy", np.full((8, 40), 1e300))
    line = _refused(capsys, f"--tool-turns 1 {options}", tmp_path)
    assert says in line, line
    assert "starts at nan" not in line, line
    for field in ("tool_latency", "max_attempts", "crash_rate", "cold_start", "got lengths"):
        assert field not in line, line


@pytest.mark.parametrize(
    ("turns", "says"),
    [
        ("-1", "--tool-turns must be an integer in [0, 2^20]"),
        ("99999999999999999999", "--tool-turns must be an integer in [0, 2^20]"),
        ("''", "--tool-turns must be an integer or NAME:KEY=VALUE,... naming a scipy.stats law"),
        ("expon:scale=1", "--tool-turns must be an integer or a discrete scipy.stats law"),
    ],
)
def test_bad_tool_turns_name_the_option(
    capsys: pytest.CaptureFixture[str], turns: str, says: str
) -> None:
    line = _refused(capsys, f"--tool-turns {turns}")
    assert says in line, line


# ---------------------------------------------------------------------------------------------
# 6. --lengths-npy messages cite nothing outside the package
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", [False, True])
def test_a_bad_lengths_npy_says_how_to_write_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], agent: bool
) -> None:
    (tmp_path / "x.npy").write_text("not numpy")
    line = _refused(capsys, f"--lengths-npy {tmp_path / 'x.npy'}" + " --tool-turns 1" * agent)
    assert "numpy.save(FILE, lengths)" in line, line
    assert "shape (slots, K)" in line, line
    assert "shared" + "/" not in line, line  # split: this line must not cite it either
    assert "peers" not in line, line


# ---------------------------------------------------------------------------------------------
# 7. argparse errors: one short usage line and the error
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("--slots abc", "argument --slots: invalid int value: 'abc'"),
        ("--seed 1.5", "argument --seed: invalid int value: '1.5'"),
        ("--eta inf", "argument --eta: invalid int value: 'inf'"),
        ("--mode nope", "argument --mode: invalid choice: 'nope'"),
        ("--mu", "argument --mu: expected one argument"),
    ],
)
def test_an_argparse_error_prints_one_usage_line(
    capsys: pytest.CaptureFixture[str], options: str, says: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", *shlex.split(options)])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "usage: refimpl simulate [options]   (refimpl simulate --help lists them)",
        f"refimpl simulate: error: {says}" + lines[-1][len(f"refimpl simulate: error: {says}") :],
    ], lines
    assert says in lines[1]


# ---------------------------------------------------------------------------------------------
# 8. --help shows every default
# ---------------------------------------------------------------------------------------------


def test_the_help_shows_the_default_of_every_option() -> None:
    from refimpl.cli import _parser

    root = _parser("simulate")
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices["simulate"]
    formatter = parser._get_formatter()
    seen = 0
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        text = formatter._expand_help(action)
        assert "default" in text, (action.option_strings, text)
        assert "None" not in text, (action.option_strings, text)
        assert "default: False" not in text, (action.option_strings, text)
        seen += 1
    assert seen > 40


# ---------------------------------------------------------------------------------------------
# the warm-up step makes ready the kernels of the whole run
# ---------------------------------------------------------------------------------------------


def _warm_up_compiles(monkeypatch: pytest.MonkeyPatch, *, like_the_run: bool) -> bool:
    """Whether a one-step warm-up of a run that ``auto`` compiles runs the compiled loop.

    ``worth_compiling`` is made to answer yes for the whole run only (as for a long run with no
    kernel cached yet), and the compiled loop is replaced by a recorder of its calls."""
    import refimpl.sim as sim
    from refimpl.sim import _compiled
    from refimpl.sim._event import run_events

    run = SimConfig(slots=4, batch=4, steps=5, partial="recompute")
    one_step = SimConfig(slots=4, batch=4, steps=1, partial="recompute")
    calls: list[int] = []

    def compiled_stand_in(cfg: SimConfig, *args: object, **kw: object) -> object:
        calls.append(cfg.steps)
        return run_events(cfg, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_compiled, "worth_compiling", lambda cfg: cfg.steps > 1)
    monkeypatch.setattr(_compiled, "run_compiled", compiled_stand_in)
    sim._simulate_any(one_step, engine="auto", progress=None, like=run if like_the_run else None)
    return calls == [1]


def check_warm_up_compiles(monkeypatch: pytest.MonkeyPatch, like_the_run: bool) -> None:
    """The property: the warm-up step ran the compiled loop the whole run will run."""
    assert _warm_up_compiles(monkeypatch, like_the_run=like_the_run)


def test_the_warm_up_step_runs_the_engine_of_the_whole_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_warm_up_compiles(monkeypatch, True)
    # the wrong variant: the one step decides for itself (short: the reference engine), and the
    # whole run then compiles inside its timed part
    rejects(check_warm_up_compiles, monkeypatch, False)


# --- the run's arrays on small pages -------------------------------------------------------------

_MULTIARRAY = importlib.import_module("numpy._core.multiarray")


def _huge_pages() -> bool:
    return bool(_MULTIARRAY._get_madvise_hugepage())


def check_small_pages_within_and_restored(pages: Callable[[], Any]) -> None:
    """numpy asks for no huge pages within the block, and its setting is back after it."""
    before = _MULTIARRAY._set_madvise_hugepage(True)
    try:
        with pages():
            inside = _huge_pages()
        assert not inside
        assert _huge_pages()
    finally:
        _MULTIARRAY._set_madvise_hugepage(before)


@contextlib.contextmanager
def _leaky_pages() -> Iterator[None]:
    """The wrong variant: switches huge pages off and never back on."""
    _MULTIARRAY._set_madvise_hugepage(False)
    yield


def test_small_pages_switch_numpys_huge_pages_off_and_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    check_small_pages_within_and_restored(small_pages)
    rejects(check_small_pages_within_and_restored, _leaky_pages)


def test_a_users_numpy_huge_page_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    before = _MULTIARRAY._set_madvise_hugepage(True)
    try:
        with small_pages():
            assert _huge_pages()
    finally:
        _MULTIARRAY._set_madvise_hugepage(before)


def test_the_command_runs_on_small_pages(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    seen: list[bool] = []
    run_any = _simulate_any

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(_huge_pages())
        return run_any(*args, **kwargs)

    monkeypatch.setattr(sim_cli, "_simulate_any", spy)
    before = _MULTIARRAY._set_madvise_hugepage(True)
    try:
        out, _ = _ran(capsys, "--slots 4 --batch 4 --rollouts 40")
        assert _huge_pages()  # numpy's setting is back after the command
    finally:
        _MULTIARRAY._set_madvise_hugepage(before)
    assert out["trained_rollouts"] == 40
    assert seen  # the warm-up step and the run
    assert not any(seen)
