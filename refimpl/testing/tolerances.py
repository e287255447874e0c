r"""Documented tolerances for comparing an implementation with the reference.

The conformance suite (:func:`refimpl.testing.check_conformance`, the pytest plugin) and
``refimpl check --dtype`` derive each comparison's tolerance from the candidate's dtype and the
operation: ``|ŷ − y| <= SAFETY·u·condition + tiny``, with ``u`` the unit roundoff of the dtype
(:data:`UNIT_ROUNDOFF`), the condition of the operation on these inputs (the derivation of each is
in the API reference, "Derived tolerances"), and ``tiny`` the dtype's smallest normal number
(:func:`smallest_normal`). The tables below are fixed tolerances:

- :data:`FUNCTION`: float64 values compared in-process by downstream tests. Another correct
  float64 formula (``exp(a)/exp(b)`` for ``exp(a − b)``, a binomial sum for a regularised
  incomplete beta, another summation order in V-trace) differs from the reference by a few ulp to
  ``~1e-12``; a real bug differs by far more.
- :data:`TRACE`: the default of ``refimpl check`` without ``--dtype``: values a trainer *logged*,
  typically computed in float32 on an accelerator and written with 7–9 significant digits. Masks
  and staleness are integers and compared exactly.

A value ``found`` agrees with ``expected`` under a :class:`Tolerance` when

.. math::

    |\text{found} - \text{expected}| \le \text{atol} + \text{rtol}\,|\text{expected}|,

with NaN never agreeing and an infinity agreeing only with the same infinity (:func:`agree`).
``refimpl check --rtol/--atol`` overrides :data:`TRACE` (e.g. for bf16 logging: ``--rtol 1e-2``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "EXACT",
    "FUNCTION",
    "SAFETY",
    "TRACE",
    "UNIT_ROUNDOFF",
    "Tolerance",
    "agree",
    "largest_finite",
    "smallest_normal",
    "summation_factor",
    "unit_roundoff",
]

#: Unit roundoff ``u = 2^-p`` (``p`` significand bits, the implicit one included) by dtype: the
#: largest relative error of rounding one real number to the dtype.
UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}

#: The derived tolerances are first-order error bounds ``c·u·(condition)``; this factor covers the
#: second-order terms and the freedom of a correct implementation (``exp(a)/exp(b)`` for
#: ``exp(a − b)``, another summation order, a fused multiply-add, the output cast).
SAFETY = 8.0


def unit_roundoff(dtype: str) -> float:
    """The unit roundoff of ``dtype`` (:data:`UNIT_ROUNDOFF`).

    Examples
    --------
    >>> from refimpl.testing.tolerances import unit_roundoff
    >>> unit_roundoff("bfloat16")
    0.00390625
    """
    return UNIT_ROUNDOFF[dtype]


#: The smallest positive normal number and the largest finite number of each dtype: a correct
#: candidate's result below the first may flush to 0, beyond the second it is ±inf.
_RANGE: dict[str, tuple[float, float]] = {
    "float64": (2.0**-1022, float(np.finfo(np.float64).max)),
    "float32": (2.0**-126, float(np.finfo(np.float32).max)),
    "float16": (2.0**-14, 65504.0),
    "bfloat16": (2.0**-126, 3.3895313892515355e38),
}


def smallest_normal(dtype: str) -> float:
    """The smallest positive normal number of ``dtype`` (an absolute floor of every tolerance).

    Examples
    --------
    >>> from refimpl.testing.tolerances import smallest_normal
    >>> smallest_normal("float16")
    6.103515625e-05
    """
    return _RANGE[dtype][0]


def largest_finite(dtype: str) -> float:
    """The largest finite number of ``dtype``.

    Examples
    --------
    >>> from refimpl.testing.tolerances import largest_finite
    >>> largest_finite("float16")
    65504.0
    """
    return _RANGE[dtype][1]


def summation_factor(n: int) -> float:
    r"""The factor :math:`\lceil\log_2 n\rceil + 1` of the error bound of a pairwise (tree) sum.

    A sum of ``n`` terms computed by pairwise summation (numpy, torch, every GPU reduction) has an
    absolute error at most :math:`(\lceil\log_2 n\rceil + 1)\,u \sum_i |x_i|` to first order
    (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2).

    Examples
    --------
    >>> from refimpl.testing.tolerances import summation_factor
    >>> summation_factor(1), summation_factor(4096)
    (1.0, 13.0)
    """
    return float(math.ceil(math.log2(max(n, 1)))) + 1.0


class Tolerance(NamedTuple):
    """Relative and absolute tolerance: ``|found − expected| <= atol + rtol·|expected|``.

    Attributes
    ----------
    rtol : float
        Relative tolerance, ``>= 0``.
    atol : float
        Absolute tolerance, ``>= 0``.

    Examples
    --------
    >>> from refimpl.testing.tolerances import FUNCTION
    >>> FUNCTION["staleness_mask"]
    Tolerance(rtol=0.0, atol=0.0)
    """

    rtol: float
    atol: float


#: Exact agreement (integer-valued quantities: masks, staleness).
EXACT = Tolerance(rtol=0.0, atol=0.0)

#: In-process float64 candidates (conformance checks, the pytest plugin), by spec name.
FUNCTION: dict[str, Tolerance] = {
    "effort_penalty": Tolerance(rtol=1e-9, atol=1e-300),
    "inclusion_probability": Tolerance(rtol=1e-9, atol=1e-12),
    "staleness_mask": EXACT,
    "staleness": EXACT,
    "tis": Tolerance(rtol=1e-9, atol=0.0),
    "masked_is": Tolerance(rtol=1e-9, atol=0.0),
    "vtrace": Tolerance(rtol=1e-9, atol=1e-9),
    **{
        name: Tolerance(rtol=1e-9, atol=1e-12)
        for name in (
            "tis_sequence",
            "tis_geometric",
            "masked_is_sequence",
            "masked_is_geometric",
            "decoupled_ppo",
            "staleness_decay",
            "effective_sample_size",
            "masking_diagnostics",
            "shaped_reward",
            "dapo_overlong",
            "kimi_length_reward",
            "cosine_length_reward",
            "l1_exact",
            "l1_max",
        )
    },
    "admission_capacity": EXACT,
    # a loss logged in float32 needs --dtype float32: its terms cancel (zero-mean advantages), so
    # its rounding scales with the sum of the absolute terms, not with the loss (the how-to says so)
    "policy_loss": Tolerance(rtol=1e-5, atol=1e-8),
}

#: Logged traces checked by ``refimpl check`` (float32 accelerator arithmetic), by spec name.
TRACE: dict[str, Tolerance] = {
    "effort_penalty": Tolerance(rtol=1e-5, atol=1e-8),
    "inclusion_probability": Tolerance(rtol=1e-5, atol=1e-8),
    "staleness_mask": EXACT,
    "staleness": EXACT,
    "tis": Tolerance(rtol=1e-5, atol=1e-8),
    "masked_is": Tolerance(rtol=1e-5, atol=1e-8),
    **{
        name: Tolerance(rtol=1e-5, atol=1e-8)
        for name in (
            "tis_sequence",
            "tis_geometric",
            "masked_is_sequence",
            "masked_is_geometric",
            "decoupled_ppo",
            "staleness_decay",
            "effective_sample_size",
            "masking_diagnostics",
            "vtrace",
            "shaped_reward",
            "dapo_overlong",
            "kimi_length_reward",
            "cosine_length_reward",
            "l1_exact",
            "l1_max",
        )
    },
    "admission_capacity": EXACT,
    # a loss logged in float32 needs --dtype float32: its terms cancel (zero-mean advantages), so
    # its rounding scales with the sum of the absolute terms, not with the loss (the how-to says so)
    "policy_loss": Tolerance(rtol=1e-5, atol=1e-8),
}


def agree(found: ArrayLike, expected: ArrayLike, tolerance: Tolerance) -> NDArray[np.bool_]:
    """Elementwise agreement within ``tolerance``; NaN never agrees, infinities only with themselves.

    Parameters
    ----------
    found, expected : array_like
        Values to compare (broadcast together).
    tolerance : Tolerance
        The tolerance to apply.

    Returns
    -------
    ndarray of bool
        True where ``found`` agrees with ``expected``.

    Examples
    --------
    >>> from refimpl.testing.tolerances import Tolerance, agree
    >>> inf, nan = float("inf"), float("nan")
    >>> agree([1.0, 1.1, nan, inf, 1e308], [1.0, 1.0, nan, inf, inf], Tolerance(1e-6, 0.0))
    array([ True, False, False,  True, False])
    """
    f = np.asarray(found, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(f - e) <= tolerance.atol + tolerance.rtol * np.abs(e)
    finite = np.isfinite(f) & np.isfinite(e)
    same_inf = np.isinf(f) & (f == e)
    return np.asarray((finite & close) | same_inf, dtype=np.bool_)
