"""Output written below ``sys.stdout``: by compiled code, by a child process, or as bytes.

A sweep cell and a candidate under test are user code. What they print through ``sys.stdout`` was
capped already; what they write straight to file descriptors 1 and 2 (``os.write(1, ...)``, C's
``printf``, a subprocess that inherits the descriptors) reached the terminal whatever its size, and
bytes written to ``sys.stdout.buffer`` raised ``AttributeError`` (the stand-in had no ``buffer``).
Now the descriptors point at temporary files during the call: a cell or a candidate past the
limit fails with a message, the terminal stays clean, and a little output of a cell is passed on.

The tests read the terminal through pytest's ``capfd`` (temporary files too: nothing depends on a
pipe's buffer or on timing). Each property also runs against the wrong variant (no descriptor
capture, as before) and must reject it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from numpy.typing import ArrayLike

from refimpl import sweep
from refimpl._io import DescriptorOutput, captured_descriptors
from refimpl.sweep import cells
from refimpl.testing import _conformance_guard as guard
from refimpl.testing import check_conformance

_HERE = __name__
_LIMIT = cells.OUTPUT_LIMIT
_BIG = _LIMIT + 4096  # one write past the limit


def _child_writes(size: int) -> None:
    """A child process that inherits fd 1 and writes ``size`` bytes to it."""
    code = f"import os\nos.write(1, b'c' * {size})"
    subprocess.run([sys.executable, "-c", code], check=True)


def writer(params: dict[str, Any], seed: int) -> dict[str, float]:
    """A cell kind that writes below ``sys.stdout`` as its ``how`` parameter says."""
    how = params["how"]
    if how == "fd_big":
        os.write(1, b"n" * _BIG)
    if how == "fd_small":
        os.write(2, b"native note\n")
    if how == "buffer_small":
        sys.stdout.buffer.write("bytes note \u00e9\n".encode())
    if how == "buffer_big":
        sys.stdout.buffer.write(b"b" * _BIG)
    if how == "child_big":
        _child_writes(_BIG)
    return {"ok": 1.0}


@contextlib.contextmanager
def _nothing_captured(**kwargs: Any) -> Iterator[DescriptorOutput]:
    """The wrong variant: the descriptors are left alone (as before the fix)."""
    yield DescriptorOutput()


# --- sweep cells ----------------------------------------------------------------------------------


def check_a_cell_s_native_output_is_capped(capfd: pytest.CaptureFixture[str]) -> None:
    hows = ["fd_big", "buffer_big", "child_big", "fd_small", "buffer_small"]
    grid = {"sweep": {"kind": f"{_HERE}:writer"}, "axes": {"how": hows}}
    rows = {r["how"]: r for r in sweep.run(grid, engine="serial").to_pylist()}
    out, err = capfd.readouterr()
    assert "n" * 1000 not in out + err, "a cell's megabytes written to fd 1 reached the terminal"
    assert "c" * 1000 not in out + err, "a child process's megabytes reached the terminal"
    for how in ("fd_big", "buffer_big", "child_big"):
        assert rows[how]["status"] == "error", (how, rows[how])
        assert f"more than the limit of {_LIMIT}" in rows[how]["error"], rows[how]["error"]
    for how in ("fd_small", "buffer_small"):
        assert rows[how]["status"] == "ok", (how, rows[how]["error"])
    assert "native note" in err, "a little native output of a cell is passed on"
    assert "bytes note \u00e9" in out, "bytes written to sys.stdout.buffer are passed on"


def test_a_cell_writing_past_the_limit_below_sys_stdout_fails(
    capfd: pytest.CaptureFixture[str],
) -> None:
    check_a_cell_s_native_output_is_capped(capfd)


def test_the_cell_output_check_rejects_a_cell_runner_that_leaves_the_descriptors_alone(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cells, "captured_descriptors", _nothing_captured)
    rejects(check_a_cell_s_native_output_is_capped, capfd)


def test_a_cell_that_writes_natively_past_the_limit_says_how_much_went_to_the_descriptors() -> None:
    grid = {"sweep": {"kind": f"{_HERE}:writer"}, "axes": {"how": ["fd_big"]}}
    (row,) = sweep.run(grid, engine="serial").to_pylist()
    assert f"{_BIG} bytes of it to file descriptors 1 and 2" in row["error"], row["error"]
    assert "'nnnn" in row["error"]
    assert len(row["error"]) < 1000


# --- candidates ----------------------------------------------------------------------------------


def _mask(s: ArrayLike, eta: int) -> Any:
    return (np.asarray(s) <= eta).astype(np.float64)


def writes_to_fd_1(s: ArrayLike, *, eta: int) -> Any:
    os.write(1, b"n" * _BIG)
    return _mask(s, eta)


def writes_through_a_child(s: ArrayLike, *, eta: int) -> Any:
    _child_writes(_BIG)
    return _mask(s, eta)


def writes_bytes_to_stdout(s: ArrayLike, *, eta: int) -> Any:
    sys.stdout.buffer.write(b"debugging\n")
    os.write(2, b"native debugging\n")
    return _mask(s, eta)


def _one_check(candidate: Any) -> Any:
    example = [((np.array([0, 1, 2, 3]),), {"eta": 1})]
    return check_conformance(
        candidate,
        spec="staleness_mask",
        checks=["agrees_with_reference"],
        examples=[example],
        max_examples=1,
    )


def check_a_candidate_s_native_output_is_capped(capfd: pytest.CaptureFixture[str]) -> None:
    for candidate in (writes_to_fd_1, writes_through_a_child):
        report = _one_check(candidate)
        out, err = capfd.readouterr()
        flooded = "n" * 1000 in out + err or "c" * 1000 in out + err
        assert not flooded, f"{candidate.__name__}: megabytes written to fd 1 reached the terminal"
        (result,) = report.results
        assert result.status == "failed", (candidate.__name__, result.render())
        assert "bytes to file descriptors 1 and 2 in one call" in result.message, result.message
        assert f"more than the limit of {guard.OUTPUT_LIMIT}" in result.message
        assert len(result.message) < 1500, result.message


def test_a_candidate_writing_past_the_limit_below_sys_stdout_fails(
    capfd: pytest.CaptureFixture[str],
) -> None:
    check_a_candidate_s_native_output_is_capped(capfd)


def test_the_candidate_output_check_rejects_a_guard_that_leaves_the_descriptors_alone(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "captured_descriptors", _nothing_captured)
    rejects(check_a_candidate_s_native_output_is_capped, capfd)


def test_a_candidate_writing_bytes_to_sys_stdout_buffer_passes_and_prints_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    report = _one_check(writes_bytes_to_stdout)
    assert report.ok, report.summary()  # was: AttributeError, reported as a raise
    out, err = capfd.readouterr()
    assert "debugging" not in out + err


# --- the capture itself ------------------------------------------------------------------------------


def test_captured_descriptors_measures_each_descriptor_and_restores_it(
    capfd: pytest.CaptureFixture[str],
) -> None:
    before = (os.fstat(1).st_ino, os.fstat(2).st_ino)
    with captured_descriptors() as seen:
        os.write(1, b"one")
        os.write(2, b"three")
    assert (seen.sizes, seen.head()) == ({1: 3, 2: 5}, "one")
    assert (os.fstat(1).st_ino, os.fstat(2).st_ino) == before
    with captured_descriptors(replay=lambda s: s.total <= 8) as seen:
        os.write(1, b"passed on")  # 9 bytes: dropped
    with captured_descriptors(replay=lambda s: s.total <= 8) as seen:
        os.write(2, b"kept\n")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "kept\n")
