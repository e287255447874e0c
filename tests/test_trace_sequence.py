"""Sequence-level trace specs as segment reductions: the same weights as the reference, bit for bit.

``refimpl check`` computes ``tis_sequence`` and the like over a chunk's flat token arrays: each
sequence's log-ratio sum in numpy's order, then one reference call on the sums. The weights must
equal the reference called on each sequence alone, exactly, whatever the lengths, the parameters
or the chunking of the trace. A sequential segment
sum (``np.add.reduceat``), the obvious vectorisation, rounds differently and is rejected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl
from refimpl.cli import main
from refimpl.testing._trace_lists import by_length, sequence_log_ratios, sequence_weights
from refimpl.testing._traces import ListColumn

Weights = Callable[[dict[str, Any], dict[str, Any], str, str], NDArray[np.float64]]

#: spec -> (reference function, level)
SEQUENCE_SPECS = {
    "tis_sequence": ("truncated_is_weights", "sequence"),
    "tis_geometric": ("truncated_is_weights", "geometric"),
    "masked_is_sequence": ("masked_is_weights", "sequence"),
    "masked_is_geometric": ("masked_is_weights", "geometric"),
}


def row_by_row(
    cols: dict[str, Any], params: dict[str, Any], fn: str, level: str
) -> NDArray[np.float64]:
    """The reference called on each sequence alone (what the check must reproduce)."""
    out = [
        float(getattr(refimpl, fn)(a - b, np.zeros(a.size), level=level, **params))
        for a, b in zip(cols["logp_target"], cols["logp_behavior"], strict=True)
    ]
    return np.asarray(out, dtype=np.float64)


def vectorised(
    cols: dict[str, Any], params: dict[str, Any], fn: str, level: str
) -> NDArray[np.float64]:
    return sequence_weights(refimpl, cols, params, fn, level)


def sequential_sums(
    cols: dict[str, Any], params: dict[str, Any], fn: str, level: str
) -> NDArray[np.float64]:
    """Wrong: each sequence's log-ratio summed left to right by ``np.add.reduceat`` (not numpy's
    pairwise order), then the weight of that sum as a one-token sequence."""
    d = sequence_log_ratios(cols)
    total = np.add.reduceat(d.values, d.offsets[:-1])
    if level == "geometric":
        total = total / d.sizes()
    return np.asarray(getattr(refimpl, fn)(total, np.zeros_like(total), **params), dtype=np.float64)


def params_for(fn: str) -> st.SearchStrategy[dict[str, Any]]:
    if fn == "truncated_is_weights":
        return st.fixed_dictionaries(
            {"cap": st.sampled_from([1.0, 1.5, 2.0, 1e6])},
            optional={"lower": st.sampled_from([0.0, 0.5]), "log_ratio_clamp": st.just(20.0)},
        )
    return st.fixed_dictionaries(
        {"low": st.sampled_from([0.0, 0.5]), "high": st.sampled_from([1.0, 2.0, 1e6])},
        optional={
            "band_on": st.sampled_from(["ratio", "reciprocal"]),
            "weight": st.sampled_from(["ratio", "indicator"]),
            "log_ratio_clamp": st.just(0.05),
        },
    )


def traces(draw: st.DrawFn) -> dict[str, Any]:
    lengths = draw(st.lists(st.integers(1, 300), min_size=1, max_size=12))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows_b = [-rng.exponential(1.0, n) for n in lengths]
    rows_t = [b + rng.normal(0.0, 0.05, b.size) for b in rows_b]
    return {
        "logp_target": ListColumn.from_rows(rows_t),
        "logp_behavior": ListColumn.from_rows(rows_b),
    }


def equals_the_reference_bit_for_bit(weights: Weights) -> Callable[[], None]:
    @given(
        st.composite(traces)(),
        st.sampled_from(sorted(SEQUENCE_SPECS)),
        st.data(),
    )
    def prop(cols: dict[str, Any], spec: str, data: st.DataObject) -> None:
        fn, level = SEQUENCE_SPECS[spec]
        params = data.draw(params_for(fn))
        want = row_by_row(cols, params, fn, level)
        got = weights(cols, params, fn, level)
        assert got.tobytes() == want.tobytes(), (spec, params, got - want)

    return prop


def test_sequence_weights_equal_the_reference_called_per_sequence() -> None:
    run_property(equals_the_reference_bit_for_bit(vectorised))


def test_the_bitwise_property_rejects_a_sequential_segment_sum() -> None:
    rejects(equals_the_reference_bit_for_bit(sequential_sums))


def test_rows_are_grouped_by_length_without_padding() -> None:
    lists = ListColumn.from_rows([np.array([1.0, 2.0]), np.array([3.0]), np.array([4.0, 5.0])])
    groups = [(g.tolist(), v.tolist()) for g, v in by_length(lists)]
    assert groups == [([1], [[3.0]]), ([0, 2], [[1.0, 2.0], [4.0, 5.0]])]


@pytest.mark.parametrize("weight", ["token", "geometric"])
def test_a_weight_per_token_is_refused_with_the_token_level_spec_named(
    weight: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"logp_target": [-1, -2], "logp_behavior": [-1.1, -2], "weight": 1.1}\n')
    code = main(
        [
            *("check", str(trace), "--spec", "masked_is_sequence", "--no-progress"),
            *("--param", "low=0.5", "--param", "high=2", "--param", f"weight={weight}"),
        ]
    )
    assert code == 2
    assert "the token-level spec masked_is" in capsys.readouterr().err


def test_lists_of_different_lengths_name_the_row() -> None:
    cols = {
        "logp_target": ListColumn.from_rows([np.zeros(2), np.zeros(3)]),
        "logp_behavior": ListColumn.from_rows([np.zeros(2), np.zeros(2)]),
    }
    with pytest.raises(ValueError, match="row 1 has 3 and 2"):
        sequence_log_ratios(cols)


# --- through the command, in every format and chunking ----------------------------------------


def write(
    path: Path, fmt: str, target: list[list[float]], behavior: list[list[float]], w: list[float]
) -> None:
    if fmt == "parquet":
        pq.write_table(
            pa.table({"logp_target": target, "logp_behavior": behavior, "weight": w}),
            path,
            row_group_size=7,
        )
    elif fmt == "jsonl":
        rows = zip(target, behavior, w, strict=True)
        path.write_text(
            "".join(
                json.dumps({"logp_target": t, "logp_behavior": b, "weight": x}) + "\n"
                for t, b, x in rows
            )
        )
    else:
        text = "logp_target,logp_behavior,weight\n" + "".join(
            f'"[{", ".join(map(repr, t))}]",{" ".join(map(repr, b))},{x!r}\n'
            for t, b, x in zip(target, behavior, w, strict=True)
        )
        path.write_text(text)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("spec", sorted(SEQUENCE_SPECS))
def test_the_report_holds_the_reference_values_whatever_the_chunking(
    spec: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fn, level = SEQUENCE_SPECS[spec]
    params = {"cap": 2.0} if fn == "truncated_is_weights" else {"low": 0.5, "high": 2.0}
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 40, 50)
    behavior = [(-rng.exponential(1.0, n)).tolist() for n in lengths]
    target = [(np.array(b) + rng.normal(0, 0.05, len(b))).tolist() for b in behavior]
    cols = {
        "logp_target": [np.array(t) for t in target],
        "logp_behavior": [np.array(b) for b in behavior],
    }
    want = row_by_row(cols, params, fn, level)
    logged = want.copy()
    planted = [3, 17, 18, 49]
    logged[planted] = logged[planted] * 1.01 + 0.01
    trace = tmp_path / f"t.{fmt}"
    write(trace, fmt, target, behavior, logged.tolist())
    extra = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    reports = []
    for chunk_rows in (1, 3, 50, 1 << 18):
        report = tmp_path / f"r{chunk_rows}.json"
        code = main(
            [
                *("check", str(trace), "--spec", spec, "--no-progress", "--max-show", "10"),
                *extra,
                *("--chunk-rows", str(chunk_rows), "--report", str(report)),
            ]
        )
        assert code == 1
        reports.append(json.loads(report.read_text()))
    capsys.readouterr()
    assert all(r == reports[0] for r in reports[1:])
    got = reports[0]
    assert (got["rows"], got["mismatches"]) == (50, 4)
    assert [m["row"] for m in got["first_mismatches"]] == planted
    assert [m["expected"] for m in got["first_mismatches"]] == want[planted].tolist()
    worst = max(abs(logged[i] - want[i]) for i in planted)
    assert math.isclose(got["max_abs_error"], worst, rel_tol=0, abs_tol=0)
