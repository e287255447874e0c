"""Argument validation shared by every public function.

Every public function validates its inputs first, in a fixed order (convert, shape, domain), and
raises :class:`~refimpl.errors.InvalidArgumentType` (a ``TypeError``) or
:class:`~refimpl.errors.InvalidArgument` (a ``ValueError``) whose message names the parameter, the
rule, the value received and how to fix the call, e.g.::

    tau must be > 0 (decay length in effort units); got tau=0.0. Pass a positive tau.

The builders come in two layers: :func:`invalid`, :func:`wrong_type` and :func:`mismatch` build an
exception from its parts (for a rule that only one function has); the ``as_*`` converters and the
``require_*`` checks apply a common rule (an integer ``>= minimum``, a real in an interval, entries
in a range, two parameters in order, a value among choices) and raise with the standard message.
Nothing here is public API; the messages are (the tests/test_validation_*.py tables pin them).
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl.errors import InvalidArgument, InvalidArgumentType

__all__: list[str] = []

_MAX_SHOWN = 60


def _show(value: Any) -> str:
    """``repr`` of a received value, shortened for messages (never more than ~60 characters)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 180:
        # repr of an int past 4300 digits raises; past ~55 digits it would be cut anyway
        sign = "-" if value < 0 else ""
        return f"{sign}an integer of {value.bit_length()} bits"
    try:
        if isinstance(value, np.ndarray):
            text = np.array2string(value, threshold=8, edgeitems=3)
            text = f"array of shape {value.shape}: {text}"
        else:
            text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the refusal with its own error
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def invalid(name: str, rule: str, value: Any, fix: str) -> InvalidArgument:
    """Build the standard refusal: ``{name} must {rule}; got {name}={value}. {fix}``."""
    return InvalidArgument(f"{name} must {rule}; got {name}={_show(value)}. {fix}")


def wrong_type(name: str, expected: str, value: Any, fix: str) -> InvalidArgumentType:
    """Build the standard refusal of an argument of the wrong kind."""
    return InvalidArgumentType(
        f"{name} must be {expected}; got {name}={_show(value)} "
        f"of type {type(value).__name__}. {fix}"
    )


#: The largest integer parameter accepted: past float64's range no count, step or size is meant,
#: and a function that computes in floats would fail with OverflowError.
_MAX_INT_MAGNITUDE = 2**1023

#: Beyond this magnitude a float64 is no longer a trustworthy integer: 2^53 + 1 has no float.
_EXACT_FLOAT_INT = 2**53


def _integer_kind_problem(value: Any) -> str | None:
    """Why ``value`` is not an integer parameter (``None`` when it is one), in a few words."""
    if isinstance(value, (bool, np.bool_)):
        return "a boolean is not a count: True would silently mean 1"
    if isinstance(value, (np.timedelta64, np.datetime64, dt.timedelta, dt.datetime, dt.date)):
        return "a date or a duration is not a count"
    if isinstance(value, (complex, np.complexfloating)):
        return "a complex number is not a count"
    if isinstance(value, (str, bytes)):
        return "text is not a number"
    if isinstance(value, numbers.Integral):
        return None
    if isinstance(value, (Fraction, Decimal)):
        if isinstance(value, Decimal) and not value.is_finite():
            return "it is not finite"
        return None if value == int(value) else "it is not a whole number"
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isfinite(f) and f == math.floor(f):
            return "a float is not exact beyond 2^53"
        return "it is not a whole number"
    return "it is not a number"


def as_int(
    value: Any,
    *,
    name: str,
    minimum: int | None = None,
    maximum: int | None = None,
    meaning: str = "",
) -> int:
    """An exact integer parameter, optionally in ``[minimum, maximum]``; a Python ``int`` out.

    Exact at any size up to ``2^1023`` in magnitude (float64's range: no count, step or size is
    larger, and a larger one would overflow the functions that compute in floats).

    Accepts ``int``, numpy integers, a 0-d integer array, and a ``Fraction`` or ``Decimal`` that
    is a whole number (all exact at any size). Refuses, with a ``TypeError`` naming the reason:
    booleans (``True`` is not a count), floats (even ``3.0``: a float past ``2^53`` is not the
    integer it prints as; pass ``int(x)``), complex numbers, dates and durations (numpy's
    ``timedelta64`` is an integer subclass), text, and anything else.
    """
    if type(value) is not int:  # the common case needs no look-alike checks
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        _refuse_look_alike(value, name=name)
    result = int(value)
    what = f" ({meaning})" if meaning else ""
    if abs(result) > _MAX_INT_MAGNITUDE:
        raise invalid(
            name,
            f"be at most 2^1023 in magnitude (beyond float64's range){what}",
            value,
            f"No count is that large: pass a smaller {name}.",
        )
    if minimum is not None and result < minimum:
        raise invalid(name, f"be >= {minimum}{what}", value, f"Pass {name} >= {minimum}.")
    if maximum is not None and result > maximum:
        raise invalid(name, f"be <= {maximum}{what}", value, f"Pass {name} <= {maximum}.")
    return result


def _refuse_look_alike(value: Any, *, name: str) -> None:
    """Raise the ``TypeError`` of :func:`as_int` when ``value`` only looks like an integer."""
    problem = _integer_kind_problem(value)
    if problem is None:
        return
    fix = f"Pass {name} as an int ({problem})."
    if isinstance(value, (float, np.floating)) and np.isfinite(value) and value == int(value):
        fix = f"Pass {name}={int(value)} as an int, not a float ({problem})."
    raise wrong_type(name, "an integer", value, fix)


def _exact_entry(x: Any) -> int | None:
    """The exact integer an entry of an integer array stands for (None if it stands for none)."""
    if isinstance(x, (float, np.floating)):
        f = float(x)
        whole = math.isfinite(f) and f == math.floor(f) and abs(f) <= _EXACT_FLOAT_INT
        return int(f) if whole else None
    return int(x) if _integer_kind_problem(x) is None else None


def as_int_array(
    value: ArrayLike,
    *,
    name: str,
    ndim: int | tuple[int, ...] | None = None,
    minimum: int | None = None,
    meaning: str = "",
) -> NDArray[np.int64] | NDArray[np.object_]:
    """An array of exact integers: int64 when every entry fits, else an object array of ``int``.

    Entries may be integers of any size (Python ints past ``2^63`` stay exact in an object
    array), or floats that are whole numbers of magnitude ``<= 2^53`` (where a float is still
    the integer it prints as). Refused: booleans, complex, dates and durations, text, a
    non-integral or non-finite float, a float past ``2^53`` (which integer was meant is lost),
    and a ``Fraction``/``Decimal`` that is not a whole number. Never converts through float.
    """
    arr = _raw_array(value, name=name, expected="an array of integers")
    if arr.dtype.kind == "f" and not isinstance(value, np.ndarray):
        # numpy turns [0, 2**63] into float64: look at the entries as they were given
        arr = _raw_array(_as_objects(value), name=name, expected="an array of integers")
    if arr.dtype.kind == "b":
        raise wrong_type(
            name, "an array of integers", value, f"Pass {name} as integers, not booleans."
        )
    if arr.dtype.kind in "iu":
        exact: NDArray[Any] = arr
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            exact = np.array([int(x) for x in arr.ravel()], dtype=object).reshape(arr.shape)
        else:
            exact = arr.astype(np.int64)
    else:
        exact = _exact_entries(arr, value, name=name)
    _require_ndim(exact, name=name, ndim=ndim)
    if minimum is not None and exact.size:
        low = exact < minimum
        if np.any(low):
            i = int(np.flatnonzero(np.asarray(low, dtype=bool).ravel())[0])
            what = f" ({meaning})" if meaning else ""
            raise invalid(
                name,
                f"be >= {minimum}{what}",
                exact,
                f"Entry {i} is {_show(int(exact.ravel()[i]))}; pass values >= {minimum}.",
            )
    return exact


def _exact_entries(arr: NDArray[Any], value: Any, *, name: str) -> NDArray[Any]:
    """Entries of a float or object array as exact ints (see :func:`as_int_array`)."""
    if arr.dtype.kind not in "fO":
        raise wrong_type(
            name,
            "an array of integers",
            value,
            f"Pass {name} as integers (got dtype {arr.dtype}).",
        )
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(arr) & (arr == np.floor(arr)) & (np.abs(arr) <= _EXACT_FLOAT_INT)
        if np.all(whole):
            return arr.astype(np.int64)
        i = int(np.flatnonzero(~whole.ravel())[0])
        raise _not_an_integer_entry(name, arr, i, float(arr.ravel()[i]))
    flat = arr.ravel()
    out: list[int] = []
    for i, x in enumerate(flat):
        n = _exact_entry(x)
        if n is None:
            raise _not_an_integer_entry(name, arr, i, x)
        out.append(n)
    fits = all(-(2**63) <= n < 2**63 for n in out)
    result = np.array(out, dtype=np.int64 if fits else object)
    if not fits:  # np.array of big ints already holds Python ints; keep the exact objects
        result = np.empty(len(out), dtype=object)
        result[:] = out
    return result.reshape(arr.shape)


def _as_objects(value: Any) -> NDArray[np.object_]:
    """``value`` as an object array: its entries as given (Python ints stay exact)."""
    try:
        return np.asarray(value, dtype=object)
    except (TypeError, ValueError, RecursionError):
        return np.asarray(value)  # the same refusal as the first conversion


def _not_an_integer_entry(name: str, arr: NDArray[Any], i: int, x: Any) -> InvalidArgumentType:
    if isinstance(x, (float, np.floating)) and np.isfinite(x) and x == np.floor(x):
        why = "a float past 2^53 is not exact: pass Python ints or int64"
    elif isinstance(x, (float, np.floating)):
        why = "not a whole number"
    else:
        why = _integer_kind_problem(x) or "not an integer"
    return wrong_type(
        name,
        "an array of integers",
        arr,
        f"Entry {i} is {_show(x)}: {why}.",
    )


def _raw_array(value: Any, *, name: str, expected: str) -> NDArray[Any]:
    """``np.asarray(value)`` with numpy's own refusals turned into refimpl's."""
    try:
        raw = value if isinstance(value, np.ndarray) else np.asarray(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        raise wrong_type(
            name, expected, value, f"Pass {name} as a rectangular numeric array."
        ) from None
    kind = raw.dtype.kind
    textual = kind in "USV" or (
        kind == "O" and any(isinstance(x, (str, bytes)) for x in raw.ravel())
    )
    if textual:  # numpy would parse "1" as 1.0: a string is a wrong call, not a number
        raise wrong_type(name, expected, value, f"Pass {name} as a numeric array, not text.")
    if kind in "mM":
        raise wrong_type(
            name,
            expected,
            value,
            f"Pass {name} as numbers, not dates or durations (convert them to counts yourself).",
        )
    complex_entries = kind == "c" or (
        kind == "O" and any(isinstance(x, (complex, np.complexfloating)) for x in raw.ravel())
    )
    if complex_entries:
        raise wrong_type(
            name, expected, value, f"Pass {name} as real numbers (an imaginary part is lost)."
        )
    return raw


def _require_ndim(arr: NDArray[Any], *, name: str, ndim: int | tuple[int, ...] | None) -> None:
    if ndim is None:
        return
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if arr.ndim not in allowed:
        dims = " or ".join(f"{d}-D" for d in allowed)
        raise invalid(name, f"be {dims}", arr, f"Pass a {dims} array (got shape {arr.shape}).")


def as_real(
    value: Any,
    *,
    name: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    meaning: str = "",
) -> float:
    """A finite real scalar parameter in an optional interval."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value[()]
    if isinstance(value, (bool, np.bool_, np.timedelta64)) or not isinstance(value, numbers.Real):
        raise wrong_type(name, "a real number", value, f"Pass {name} as a float.")
    what = f" ({meaning})" if meaning else ""
    try:
        result = float(value)
    except OverflowError:  # an int or Fraction beyond float64's range
        raise invalid(
            name, f"be finite in float64{what}", value, f"Pass a smaller {name}."
        ) from None
    if not np.isfinite(result):
        raise invalid(name, f"be finite{what}", value, f"Pass a finite {name}.")
    if low is not None and (result <= low if low_open else result < low):
        op = ">" if low_open else ">="
        raise invalid(name, f"be {op} {low:g}{what}", value, f"Pass {name} {op} {low:g}.")
    if high is not None and (result >= high if high_open else result > high):
        op = "<" if high_open else "<="
        raise invalid(name, f"be {op} {high:g}{what}", value, f"Pass {name} {op} {high:g}.")
    return result


def as_float_array(
    value: ArrayLike, *, name: str, ndim: int | tuple[int, ...] | None = None
) -> NDArray[np.float64]:
    """Convert to a float64 array; reject non-numeric input, a wrong ``ndim``, NaN and infinity.

    Refused with a ``TypeError``: text, complex numbers (numpy would drop the imaginary part
    with a ``ComplexWarning``), dates and durations (numpy would count days silently), ragged
    nesting. An integer beyond float64's range is refused as non-finite.
    """
    raw = _raw_array(value, name=name, expected="an array of real numbers")
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except OverflowError:  # a Python int beyond float64's range
        raise invalid(
            name,
            "contain only finite values (no NaN or infinity)",
            value,
            "An entry is too large for float64; rescale it.",
        ) from None
    except (TypeError, ValueError):
        raise wrong_type(
            name, "an array of real numbers", value, f"Pass {name} as a numeric array."
        ) from None
    _require_ndim(arr, name=name, ndim=ndim)
    if not np.all(np.isfinite(arr)):
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))
        raise invalid(
            name,
            "contain only finite values (no NaN or infinity)",
            arr,
            f"Remove or replace the non-finite entries (first at flat index {int(bad[0])}).",
        )
    return arr


def mismatch(names: tuple[str, str], rule: str, got: str, fix: str) -> InvalidArgument:
    """Build the refusal of a rule between two parameters: ``{a} and {b} must {rule}; got {got}. {fix}``.

    ``got`` shows both values (or both shapes), e.g. ``"low=2.0 and high=1.0"``.
    """
    return InvalidArgument(f"{names[0]} and {names[1]} must {rule}; got {got}. {fix}")


def require_same_shape(
    a: NDArray[Any],
    b: NDArray[Any],
    *,
    names: tuple[str, str],
    fix: str = "Pass arrays of matching shape (one entry per token).",
) -> None:
    """Both arrays must have one shape; the message shows both shapes."""
    if a.shape != b.shape:
        raise mismatch(
            names,
            "have the same shape",
            f"{names[0]}.shape={a.shape} and {names[1]}.shape={b.shape}",
            fix,
        )


def require_ordered(
    low: float,
    high: float,
    *,
    names: tuple[str, str],
    meaning: str = "",
    strict: bool = False,
    fix: str = "Swap them.",
) -> None:
    """Two parameters in order: ``low <= high`` (``low < high`` when ``strict``).

    The message is ``{low} must be <= {high} ({meaning}); got low=... and high=.... {fix}``.
    """
    if low < high or (low == high and not strict):
        return
    op = "<" if strict else "<="
    what = f" ({meaning})" if meaning else ""
    raise InvalidArgument(
        f"{names[0]} must be {op} {names[1]}{what}; got {names[0]}={low!r} and "
        f"{names[1]}={high!r}. {fix}"
    )


def require_one_of(value: Any, choices: tuple[Any, ...], *, name: str, fix: str = "") -> None:
    """``value`` must be one of ``choices`` (same type and equal: ``True`` is not ``1``)."""
    if any(type(value) is type(c) and value == c for c in choices):
        return
    shown = ", ".join(repr(c) for c in choices)
    raise invalid(name, f"be one of {shown}", value, fix or f"Pass {name} as one of {shown}.")


def first_bad(arr: NDArray[Any], bad: NDArray[np.bool_]) -> tuple[int, float]:
    """The flat index and the value of the first entry where ``bad`` holds (``bad.any()`` must)."""
    first = int(np.flatnonzero(bad.ravel())[0])
    return first, float(arr.ravel()[first])


def require_entries(
    arr: NDArray[Any], bad: NDArray[np.bool_], *, name: str, rule: str, fix: str
) -> None:
    """No entry of ``arr`` may be ``bad``; the message shows the first offending entry.

    The message is ``{name} must {rule}; got {name}=array(...). Entry {i} is {x!r}{fix}``: ``fix``
    starts with its own separator (``"; pass values in [0, 1]."`` or ``"."``).
    """
    if np.any(bad):
        first, value = first_bad(arr, bad)
        raise invalid(name, rule, arr, f"Entry {first} is {value!r}{fix}")


def require_in_range(
    arr: NDArray[np.float64],
    *,
    name: str,
    low: float | None = None,
    high: float | None = None,
    meaning: str = "",
    fix: str | None = None,
) -> None:
    """Every entry of ``arr`` lies in the closed range ``[low, high]`` (either end may be open-ended).

    The rule reads ``lie in [low, high]`` for two ends, ``be >= low`` or ``be <= high`` for one; the
    default fix is ``; pass values in [low, high].`` (resp. ``>= low``, ``<= high``).
    """
    bad = np.zeros(arr.shape, dtype=bool)
    if low is not None:
        bad |= arr < low
    if high is not None:
        bad |= arr > high
    if not np.any(bad):
        return
    if low is not None and high is not None:
        rule, want = f"lie in [{low:g}, {high:g}]", f"values in [{low:g}, {high:g}]"
    elif low is not None:
        rule, want = f"be >= {low:g}", f"values >= {low:g}"
    else:
        rule, want = f"be <= {high:g}", f"values <= {high:g}"
    what = f" ({meaning})" if meaning else ""
    require_entries(
        arr, bad, name=name, rule=f"{rule}{what}", fix=f"; pass {want}." if fix is None else fix
    )


def require_in_unit_interval(
    arr: NDArray[np.float64], *, name: str, meaning: str, fix: str | None = None
) -> None:
    """Every entry of ``arr`` must lie in [0, 1]."""
    require_in_range(arr, name=name, low=0.0, high=1.0, meaning=meaning, fix=fix)


def require_frozen_distribution(dist: Any, *, name: str = "dist") -> None:
    """``dist`` must be a frozen ``scipy.stats`` distribution (has cdf, sf, ppf and mean)."""
    needed = ("cdf", "sf", "ppf", "mean", "pdf", "support")
    if callable(getattr(dist, "freeze", None)):  # a distribution family, e.g. scipy.stats.expon
        raise wrong_type(
            name,
            "a frozen scipy.stats continuous distribution (parameters given)",
            dist,
            "Give the parameters to freeze it, e.g. scipy.stats.expon(scale=100.0).",
        )
    if not all(callable(getattr(dist, attr, None)) for attr in needed):
        raise wrong_type(
            name,
            "a frozen scipy.stats continuous distribution",
            dist,
            "Pass e.g. scipy.stats.lognorm(s=1.0, scale=np.exp(6.0)) (frozen: parameters given).",
        )


def as_pmf(pmf: Any, *, name: str = "pmf") -> tuple[NDArray[np.float64] | list[Fraction], bool]:
    """Validate a pmf over lengths ``1..M``.

    Returns ``(values, exact)``: a list of ``Fraction`` (``exact=True``) when every entry is a
    ``Fraction`` or an ``int``, else a float64 array. Rejects an empty pmf, negative or non-finite
    entries, and a pmf that does not sum to one (exactly for Fractions; within ``1e-9`` otherwise).
    """
    items = _items(pmf)
    if (
        items is not None
        and items
        and all(isinstance(x, (Fraction, int)) and not isinstance(x, bool) for x in items)
        and any(isinstance(x, Fraction) for x in items)
    ):
        fracs = [Fraction(x) for x in items]
        if any(x < 0 for x in fracs):
            i = next(i for i, x in enumerate(fracs) if x < 0)
            raise invalid(
                name, "be non-negative", pmf, f"Entry {i} is {fracs[i]}; probabilities are >= 0."
            )
        total = sum(fracs, Fraction(0))
        if total != 1:
            raise invalid(
                name,
                "sum to 1 exactly (Fraction mode)",
                pmf,
                f"It sums to {total}; divide every entry by the total.",
            )
        return fracs, True
    arr = as_float_array(pmf if items is None else items, name=name, ndim=1)
    if arr.size == 0:
        raise invalid(name, "be non-empty", arr, "Pass at least one probability (lengths 1..M).")
    if np.any(arr < 0):
        i = int(np.flatnonzero(arr < 0)[0])
        raise invalid(name, "be non-negative", arr, f"Entry {i} is {float(arr[i])!r}; use >= 0.")
    float_total = float(arr.sum())
    if abs(float_total - 1.0) > 1e-9:
        raise invalid(
            name,
            "sum to 1 (within 1e-9)",
            arr,
            f"It sums to {float_total!r}; divide every entry by the total.",
        )
    return arr, False


def _items(value: Any) -> list[Any] | None:
    """The entries of a sequence given as one (``None`` for an array, text or a non-iterable)."""
    if isinstance(value, (np.ndarray, str, bytes)):
        return None
    try:
        return list(value)
    except TypeError:  # not iterable (a bool, a number): the float conversion refuses it
        return None


def exact_list(value: Any) -> list[Fraction] | None:
    """Exact mode: the entries as Fractions when ``value`` is a sequence of Fraction/int with a Fraction."""
    if isinstance(value, (np.ndarray, str, bytes)):
        return None
    try:
        items = list(value)
    except TypeError:
        return None
    if (
        items
        and all(isinstance(x, (Fraction, int)) and not isinstance(x, bool) for x in items)
        and any(isinstance(x, Fraction) for x in items)
    ):
        return [Fraction(x) for x in items]
    return None
