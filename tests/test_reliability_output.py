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
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from numpy.typing import ArrayLike

from refimpl import sweep
from refimpl._io import DescriptorOutput, captured_descriptors, descriptors
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


# --- from any thread -------------------------------------------------------------------------------


def _in_a_thread(work: Any) -> Any:
    """``work()`` run in a new thread; its result, or its exception re-raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


@contextlib.contextmanager
def _main_thread_only(**kwargs: Any) -> Iterator[DescriptorOutput]:
    """The wrong variant: only the main thread redirects (as before the fix)."""
    if threading.current_thread() is not threading.main_thread():
        yield DescriptorOutput()
        return
    with captured_descriptors(**kwargs) as seen:
        yield seen


def check_a_candidate_run_from_a_thread_is_capped(capfd: pytest.CaptureFixture[str]) -> None:
    report = _in_a_thread(lambda: _one_check(writes_to_fd_1))
    out, err = capfd.readouterr()
    assert "n" * 1000 not in out + err, "a candidate run from a thread flooded the terminal"
    (result,) = report.results
    assert result.status == "failed", result.render()
    assert f"wrote {_BIG} bytes to file descriptors 1 and 2 in one call" in result.message


def test_a_candidate_checked_from_a_thread_writing_past_the_limit_fails(
    capfd: pytest.CaptureFixture[str],
) -> None:
    check_a_candidate_run_from_a_thread_is_capped(capfd)


def test_the_thread_check_rejects_a_capture_of_the_main_thread_only(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "captured_descriptors", _main_thread_only)
    rejects(check_a_candidate_run_from_a_thread_is_capped, capfd)


def test_a_sweep_run_from_a_thread_caps_a_cell_s_native_output(
    capfd: pytest.CaptureFixture[str],
) -> None:
    grid = {"sweep": {"kind": f"{_HERE}:writer"}, "axes": {"how": ["fd_big", "fd_small"]}}
    table = _in_a_thread(lambda: sweep.run(grid, engine="serial"))
    rows = {r["how"]: r for r in table.to_pylist()}
    out, err = capfd.readouterr()
    assert "n" * 1000 not in out + err
    assert rows["fd_big"]["status"] == "error", rows["fd_big"]
    assert f"{_BIG} bytes of it to file descriptors 1 and 2" in rows["fd_big"]["error"]
    assert (rows["fd_small"]["status"], "native note" in err) == ("ok", True)


def test_a_capture_in_one_thread_holds_off_another_thread_s() -> None:
    with captured_descriptors() as seen:
        os.write(1, b"mine")
        others = _in_a_thread(lambda: descriptors._CAPTURE.acquire(blocking=False))
    assert others is False, "a second thread could start a capture during this one"
    assert seen.sizes == {1: 4, 2: 0}

    # released afterwards: another thread captures, nested captures in it measure their own
    def nested() -> tuple[dict[int, int], dict[int, int]]:
        with captured_descriptors() as outer:
            os.write(1, b"outer")
            with captured_descriptors() as inner:
                os.write(1, b"inner!")
        return outer.sizes, inner.sizes

    assert _in_a_thread(nested) == ({1: 5, 2: 0}, {1: 6, 2: 0})


# --- the disk stays bounded during the call --------------------------------------------------------

_CHUNK = 4 << 20
_CHUNKS = 16  # 64 MiB in all
_KEEP = 4096


def check_the_capture_file_stays_bounded_during_the_call() -> None:
    largest = 0
    with captured_descriptors(keep=_KEEP) as seen:
        for i in range(_CHUNKS):
            os.write(1, (b"%02d" % i) * (_CHUNK // 2))
            descriptors._WATCHER.wait_pass()  # the watcher has looked since this write
            largest = max(largest, os.fstat(1).st_blocks * 512)
    assert largest <= 64 << 10, f"the capture file held {largest} bytes of disk during the call"
    assert seen.sizes == {1: _CHUNK * _CHUNKS, 2: 0}, "the size reported is exact, cut or not"
    assert seen.head().startswith("000000"), "the first bytes are kept for the message"


def test_a_call_writing_64_mib_holds_a_bounded_file_and_reports_its_exact_size() -> None:
    check_the_capture_file_stays_bounded_during_the_call()


def test_the_bound_check_rejects_a_capture_that_cuts_only_after_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(descriptors, "_cut", lambda tmp, keep: None)
    rejects(check_the_capture_file_stays_bounded_during_the_call)


def test_a_child_process_flood_is_cut_and_measured_exactly() -> None:
    with captured_descriptors(keep=_KEEP) as seen:
        _child_writes(8 << 20)
        descriptors._WATCHER.wait_pass()
        held = os.fstat(1).st_blocks * 512
    assert held <= 64 << 10
    assert seen.sizes[1] == 8 << 20
    assert seen.head() == "c" * 200


# --- a thread the capture's holder waits for --------------------------------------------------------


def check_a_check_run_in_a_thread_the_candidate_waits_for_ends(wait: float) -> None:
    """A candidate that runs check_conformance in a thread and joins it (as a sweep cell that
    checks candidates in a thread pool does): the inner check must not wait for the outer
    capture, which waits for it. ``wait`` bounds the join, so a regression fails, not hangs."""
    inner: dict[str, Any] = {}

    def candidate(s: ArrayLike, *, eta: int) -> Any:
        thread = threading.Thread(target=lambda: inner.update(report=_one_check(writes_to_fd_1)))
        thread.start()
        thread.join(timeout=wait)
        inner.setdefault("ended in time", not thread.is_alive())
        inner["thread"] = thread
        return _mask(s, eta)

    outer = _one_check(candidate)
    inner["thread"].join()  # the wrong variant's inner check runs once the outer one let go
    assert inner["ended in time"], "the inner check waited for the capture of the outer one"
    (result,) = inner["report"].results
    assert result.status == "failed", "the inner candidate's flood counts in its own check"
    assert f"wrote {_BIG} bytes to file descriptors 1 and 2" in result.message, result.message
    (outer_result,) = outer.results
    assert outer_result.status == "failed", "the flood also went to the outer candidate's files"


def test_a_check_run_in_a_thread_that_the_candidate_waits_for_shares_its_capture() -> None:
    check_a_check_run_in_a_thread_the_candidate_waits_for_ends(wait=600)


def test_the_sharing_check_rejects_captures_that_always_wait_for_the_holder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(descriptors, "_holder_waits", lambda: None)
    rejects(check_a_check_run_in_a_thread_the_candidate_waits_for_ends, wait=0.5)


def check_a_check_run_in_a_thread_the_candidate_polls_ends(wait: float) -> None:
    """As above, but the candidate polls the thread with ``time.sleep`` instead of joining it
    (no ``threading`` wait in its frames): the inner check must still not wait for the outer
    capture. ``wait`` bounds the poll, so a regression fails, not hangs."""
    import time

    inner: dict[str, Any] = {}

    def candidate(s: ArrayLike, *, eta: int) -> Any:
        thread = threading.Thread(target=lambda: inner.update(report=_one_check(writes_to_fd_1)))
        thread.start()
        deadline = time.monotonic() + wait
        while thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        inner.setdefault("ended in time", not thread.is_alive())
        inner["thread"] = thread
        return _mask(s, eta)

    _one_check(candidate)
    inner["thread"].join()
    assert inner["ended in time"], "the inner check waited for the capture of the polling one"
    (result,) = inner["report"].results
    assert result.status == "failed", "the inner candidate's flood counts in its own check"


def test_a_check_run_in_a_thread_that_the_candidate_polls_shares_its_capture() -> None:
    check_a_check_run_in_a_thread_the_candidate_polls_ends(wait=600)


def test_the_polling_check_rejects_sharing_only_with_a_holder_in_a_threading_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = descriptors._holder_waits

    def threading_waits_only() -> tuple[int, int, int] | None:
        place = real()
        if place is None:
            return None
        frame = sys._current_frames().get(place[0])
        return (
            place if frame is not None and frame.f_code.co_filename == threading.__file__ else None
        )

    monkeypatch.setattr(descriptors, "_holder_waits", threading_waits_only)
    rejects(check_a_check_run_in_a_thread_the_candidate_polls_ends, wait=0.5)
