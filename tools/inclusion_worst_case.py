"""Search for the worst float64 relative error of ``inclusion_probability_pmf``.

The accuracy claim in the docstring of :func:`refimpl.inclusion_probability_pmf` has to hold for the
inputs that users pass, not only for the cases its tests were written around. This script draws
length laws of several shapes (uniform, geometric, discretised log-normal, Dirichlet draws with
tiny masses mixed in, two-point laws), support sizes up to ``10^5``, ``n`` up to ``10^4`` and every
``k``; evaluates the function at the support points where it is hardest (both ends, the points
where ``F`` crosses ``k/n`` and where each evaluation branch takes over, and random ones); and
compares with the test suite's reference (``reference_pi`` of ``tests/test_dispatch_accuracy.py``:
the tie-interval closed form of claim LB2 in mpmath at 360 digits or more, from the float64 pmf
exactly as given). The worst cases found are
then refined by a local search over ``k`` and ``n``.

Usage (outside the CI gate; minutes)::

    .venv/bin/python tools/inclusion_worst_case.py --budget 600 --seed 1

It prints every case whose error exceeds the running worst, then the worst case as a Python literal
ready to paste into ``tests/test_dispatch_accuracy.py``. Values of ``π`` below ``1e-280`` are not
compared (the function may underflow there, as documented).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mpmath as mp
import numpy as np

import refimpl

SMALLEST_COMPARED = mp.mpf(10) ** -280


def _load_reference() -> Callable[[np.ndarray, int, int, list[int]], list[mp.mpf]]:
    """The test suite's 360-digit reference (``tests/test_dispatch_accuracy.py``), by path."""
    path = Path(__file__).resolve().parent.parent / "tests" / "test_dispatch_accuracy.py"
    spec = importlib.util.spec_from_file_location("_accuracy_reference", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_pi  # type: ignore[no-any-return]


reference = _load_reference()


@dataclass
class Case:
    family: str
    pmf: np.ndarray
    n: int
    k: int


def _draw(rng: np.random.Generator) -> Case:
    m = round(math.exp(rng.uniform(math.log(2), math.log(1e5))))
    n = round(math.exp(rng.uniform(0, math.log(1e4))))
    k = int(rng.integers(1, n + 1))
    family = str(rng.choice(["uniform", "geometric", "lognormal", "dirichlet", "two-point"]))
    if family == "uniform":
        pmf = np.full(m, 1.0 / m)
    elif family == "geometric":
        q = float(rng.uniform(1e-4, 0.5)) * (1 if m > 10 else 10)
        pmf = np.exp(-np.arange(m) * min(q, 5.0))
    elif family == "lognormal":
        ell = np.arange(1, m + 1, dtype=np.float64)
        mu = rng.uniform(0, math.log(m))
        sigma = rng.uniform(0.1, 2.0)
        pmf = np.exp(-((np.log(ell) - mu) ** 2) / (2 * sigma**2)) / ell
    elif family == "dirichlet":
        m = min(m, 2_000)
        pmf = rng.dirichlet(np.full(m, rng.uniform(0.05, 2.0)))
        tiny = rng.random(m) < 0.1
        pmf[tiny] *= 10.0 ** rng.uniform(-14, -6, size=int(tiny.sum()))
    else:
        m = 2
        a = rng.uniform(0.5, 1.0)
        pmf = np.array([a, 1 - a])
    pmf = np.asarray(pmf, dtype=np.float64)
    pmf = pmf[pmf > 0]
    pmf = pmf / pmf.sum()
    return Case(family, pmf, n, k)


def _indices(case: Case, rng: np.random.Generator, count: int) -> list[int]:
    m = case.pmf.size
    cdf = np.cumsum(case.pmf)
    picks = {0, m - 1}
    cross = int(np.searchsorted(cdf, case.k / case.n))
    picks.update(i for i in (cross - 1, cross, cross + 1) if 0 <= i < m)
    # the upper tail, where π ∝ S^(n-k) is small and cancellation is worst
    for target in (1e-3, 1e-8, 1e-30, 1e-100):
        s = 1 - cdf
        j = int(np.searchsorted(-s, -(target ** (1 / max(case.n - case.k, 1)))))
        if 0 <= j < m:
            picks.add(j)
    while len(picks) < count and len(picks) < m:
        picks.add(int(rng.integers(0, m)))
    return sorted(picks)


def _worst(case: Case, indices: list[int]) -> tuple[float, int]:
    try:
        found = refimpl.inclusion_probability_pmf(case.pmf, n=case.n, k=case.k)
    except Exception:  # a valid law that raises is a defect: show it and stop
        np.save("inclusion-raised.npy", case.pmf)
        print(
            f"RAISED on {case.family} M={case.pmf.size} n={case.n} k={case.k} "
            "(pmf saved to inclusion-raised.npy)",
            flush=True,
        )
        raise
    worst, where = 0.0, -1
    for i, want in zip(indices, reference(case.pmf, case.n, case.k, indices), strict=True):
        if want > SMALLEST_COMPARED:
            rel = float(abs((mp.mpf(float(found[i])) - want) / want))
            if rel > worst:
                worst, where = rel, i
    return worst, where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds of search")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--points", type=int, default=8, help="support points per case")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.monotonic()
    best: tuple[float, Case, int] | None = None
    cases = 0
    while time.monotonic() - start < args.budget * 0.7:
        case = _draw(rng)
        err, where = _worst(case, _indices(case, rng, args.points))
        cases += 1
        if best is None or err > best[0]:
            best = (err, case, where)
            print(
                f"[{time.monotonic() - start:6.0f} s] {err:.2e}  {case.family} M={case.pmf.size} "
                f"n={case.n} k={case.k} at index {where}",
                flush=True,
            )
    assert best is not None
    # local refinement of the worst case over k and n
    err, case, where = best
    while time.monotonic() - start < args.budget:
        step = max(1, int(abs(rng.normal(0, max(case.n, 2) * 0.02))))
        n = int(np.clip(case.n + rng.choice([-step, 0, step]), 1, 10_000))
        k = int(np.clip(case.k + rng.choice([-step, step]), 1, n))
        trial = Case(case.family, case.pmf, n, k)
        t_err, t_where = _worst(trial, _indices(trial, rng, args.points))
        cases += 1
        if t_err > err:
            err, case, where = t_err, trial, t_where
            print(f"  refined: {err:.2e}  n={n} k={k} at index {where}", flush=True)
    print(
        f"\n{cases} cases; worst relative error {err:.3e}: {case.family}, M={case.pmf.size}, "
        f"n={case.n}, k={case.k}, index {where}"
    )


if __name__ == "__main__":
    main()
