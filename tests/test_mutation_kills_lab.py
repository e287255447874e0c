"""Pinned behaviours of refimpl.lab that a sampled mutation run (``tools/mutate.py refimpl/lab``,
seed 3103, ``_plot.py`` and ``gallery.py`` left out) found no test holding: each test names the
mutant it was seen to fail on. Small functions are called directly, so the file runs in seconds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from refimpl.lab._common import Z_TOL, block_mean_and_se
from refimpl.lab._html import th as _th
from refimpl.lab.effort import MIX, kimi_points
from refimpl.lab.learning import _cond_check
from refimpl.lab.report import NOISE_NOTE, Section, _jsonable, _md_table


def _section(tmp_path: Path) -> Section:
    return Section(key="t", number=1, title="t", docs=(), figures_dir=tmp_path)


def test_block_mean_and_se_is_the_spread_of_the_block_means_over_root_blocks() -> None:
    # 9 values in 4 blocks: the last value is left out of the blocks (not of the mean); the block
    # means 0.5, 2.5, 4.5, 6.5 have sd sqrt(20/3), so se = sqrt(20/3) / 2
    # (mutant: a constant 1 of the reshape/mean line off by one, e.g. mean(axis=2))
    m, se = block_mean_and_se(np.arange(9.0), blocks=4)
    assert m == 4.0
    assert math.isclose(se, math.sqrt(20.0 / 3.0) / 2.0, rel_tol=1e-14)


def test_cond_check_tolerance_is_z_times_the_standard_error(tmp_path: Path) -> None:
    # var = (4, 9), norm = 2: se = (2, 3), tolerance Z se / norm = (4.5, 6.75)
    # (mutant: Z_TOL / se, a tolerance that shrinks as the noise grows: 1.125 and 0.75)
    s = _section(tmp_path)
    pairs = _cond_check(
        s,
        "k",
        "q",
        np.array([1.0, 2.0]),
        np.array([1.0, 2.0]),
        np.array([4.0, 9.0]),
        2.0,
        None,
        "x",
    )
    assert [c.tolerance for c in s.checks] == [Z_TOL * 2.0 / 2.0, Z_TOL * 3.0 / 2.0]
    assert [p[3] for p in pairs] == [1.0, 1.5]


def test_jsonable_names_non_finite_floats_by_sign_inside_dicts() -> None:
    # mutants: `v < 0` -> `v > 0` (-inf written as "nan"); `isinstance(value, dict)` negated
    got = _jsonable({1: [np.float64(-np.inf), math.inf, math.nan, np.int64(3), np.bool_(True)]})
    assert got == {"1": ["-inf", "inf", "nan", 3, True]}


def test_md_table_has_a_separator_row_per_column() -> None:
    # mutant: "|" - "---|" * n (a TypeError)
    assert _md_table(("a", "b|c"), [("1", "2")]) == "| a | b\\|c |\n|---|---|\n| 1 | 2 |"


def test_a_table_with_a_noise_cell_says_so_in_its_note(tmp_path: Path) -> None:
    # mutant: NOISE_NOTE[0].upper() - NOISE_NOTE[1:] (a TypeError, only where a cell is noise)
    s = _section(tmp_path)
    s.table("t", "c", ("x",), [(1e-15,)])
    assert s.blocks[-1].note == NOISE_NOTE[0].upper() + NOISE_NOTE[1:] + "."  # type: ignore[union-attr]


def test_th_width_follows_the_longest_pair_of_adjacent_words() -> None:
    # pairs "a bb" (4), "bb cccc" (7), "cccc dddddd" (11): width 0.62 * 11 = 6.8 em
    # (mutant: max -> min, 0.62 * 4 = 2.5 em: headers broken one word per line)
    assert 'style="width:6.8em"' in _th("a bb cccc dddddd")


def test_kimi_training_lands_where_seed_0_put_it() -> None:
    # seeded regression: kimi_points(MIX, rng=default_rng(0), steps=30, snapshots=(30,),
    # problems=8), computed once on 2 December 2026 (mutant: params - size * ..., Adam descending
    # the objective instead of ascending it, which moves every point)
    pts = kimi_points(MIX, rng=np.random.default_rng(0), steps=30, snapshots=(30,), problems=8)
    got = [(p.cost, p.quality) for p in pts]
    want = [
        (197.60694391301558, 0.7290548917477887),
        (193.98905481981996, 0.7243737037588521),
        (191.405244128795, 0.7183381372254293),
    ]
    assert np.allclose(got, want, rtol=1e-9, atol=0.0)
