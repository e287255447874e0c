"""Time ``inclusion_probability_pmf`` against the direct multinomial sum of conventions §first-k-of-n.

Both are run in the same process on the same inputs, and the ratio is printed (so the figure does not
depend on how busy the machine is). The direct sum is

    π(ℓ) = Σ_{A+E ≤ n-1} Multinomial(n-1; A, E, ·) F(ℓ-1)^A p(ℓ)^E S(ℓ)^(n-1-A-E) clip((k-A)/(E+1), 0, 1),

vectorised over ``(A, E)`` with log-space multinomial coefficients: O(n²) work per support point,
against O(1) special-function calls for the tie-interval closed form. The sizes are chosen so that
the direct sum finishes in seconds; the 10^5-point / n = 10^4 case is timed for the closed form alone.

Run: ``python benchmarks/bench_inclusion.py``.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import special

import refimpl


def direct_multinomial(pmf: np.ndarray, *, n: int, k: int) -> np.ndarray:
    """The multinomial sum, one support point at a time, vectorised over (A, E)."""
    pmf = pmf / pmf.sum()
    cdf_hi = np.cumsum(pmf)
    cdf_lo = np.concatenate(([0.0], cdf_hi[:-1]))
    surv = np.concatenate((np.cumsum(pmf[::-1])[::-1][1:], [0.0]))
    m = n - 1
    a = np.arange(m + 1)[:, None]
    e = np.arange(m + 1)[None, :]
    valid = a + e <= m
    rest = np.where(valid, m - a - e, 0)
    log_coef = special.gammaln(m + 1) - special.gammaln(a + 1) - special.gammaln(e + 1)
    log_coef = log_coef - special.gammaln(rest + 1)
    share = np.clip((k - a) / (e + 1.0), 0.0, 1.0)
    out = np.empty(pmf.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(pmf.size):
            logs = (
                log_coef
                + special.xlogy(a, cdf_lo[i])
                + special.xlogy(e, pmf[i])
                + special.xlogy(rest, surv[i])
            )
            out[i] = float(np.sum(np.where(valid, np.exp(logs), 0.0) * share))
    return out


def best_of(fn: object, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    print("inclusion_probability_pmf (tie-interval closed form) vs the direct multinomial sum")
    print(
        f"{'support':>8} {'n':>6} {'k':>6} {'closed [s]':>11} {'direct [s]':>11} {'ratio':>9}"
        f" {'max rel diff':>13}"
    )
    for size, n, k in [(200, 50, 10), (200, 200, 100), (1000, 100, 30), (50, 1000, 500)]:
        pmf = rng.random(size) + 0.05
        pmf /= pmf.sum()
        fast = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
        slow = direct_multinomial(pmf, n=n, k=k)
        t_fast = best_of(lambda pmf=pmf, n=n, k=k: refimpl.inclusion_probability_pmf(pmf, n=n, k=k))
        t_slow = best_of(lambda pmf=pmf, n=n, k=k: direct_multinomial(pmf, n=n, k=k), repeat=1)
        keep = slow > 1e-250
        diff = float(np.max(np.abs(fast[keep] - slow[keep]) / slow[keep]))
        print(
            f"{size:>8} {n:>6} {k:>6} {t_fast:>11.5f} {t_slow:>11.3f} {t_slow / t_fast:>9.0f}"
            f" {diff:>13.1e}"
        )
    print()
    print("closed form alone, support 10^5, n = 10^4:")
    for k in (10, 5_000, 9_990):
        pmf = rng.random(100_000)
        pmf /= pmf.sum()
        t = best_of(lambda pmf=pmf, k=k: refimpl.inclusion_probability_pmf(pmf, n=10_000, k=k))
        print(f"  k = {k:>5}: {t:.3f} s (uniform-ish pmf)")
        pmf = np.exp(-np.arange(100_000) / 3_000.0)
        pmf /= pmf.sum()
        t = best_of(lambda pmf=pmf, k=k: refimpl.inclusion_probability_pmf(pmf, n=10_000, k=k))
        print(f"  k = {k:>5}: {t:.3f} s (geometric tail, many tiny p)")


if __name__ == "__main__":
    main()
