"""Depth tests of refimpl.losses and refimpl.staleness: every per-sequence argument is checked
against the batch axis, never the token axis.

A function that takes ``(B, T)`` token arrays and a per-sequence array of shape ``(B,)``
(advantages, rewards, group ids, a rejection flag per row) must refuse one of shape ``(T,)``. On a
square batch the two axes cannot be told apart, so a check that reads ``shape[1]`` for ``shape[0]``
goes unseen; the valid calls of ``tests/_valid_calls.py`` are not square (``B = 2``, ``T = 3``),
and every per-sequence argument of every call is tried here with the token axis' length.

Likewise a mask of another shape is refused with a message naming the array it must match (the
call's first token array): a refusal naming the wrong one sends the user to the wrong argument.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from _rules import bind, call_with, public_function
from _valid_calls import VALID_CALLS, Call
from _wrong_variants import rejects

PACKAGES = ("refimpl.losses", "refimpl.staleness")


#: Calls with a per-sequence argument and a ``(B, T)`` mask for functions whose valid calls have
#: none (or a square batch).
_MASK = [[1, 1, 1], [1, 1, 0]]
EXTRA_CALLS = {
    "refimpl.losses aggregation_weights": (
        Call((_MASK,), {"mode": "token_mean", "rejection": [1.0, 0.0]}),
        Call((_MASK,), {"mode": "group_mean", "group": [4, 7]}),
    ),
    "refimpl.losses reinforce_pp_advantages": (Call(([0.5, 1.5],), {"mask": _MASK}),),
    "refimpl.losses gdpo_advantages": (
        Call(([[1.0, 0.25], [0.0, 0.5]],), {"group": [0, 0], "mask": _MASK}),
    ),
    "refimpl.losses optimal_token_baseline_advantages": (
        Call(
            (
                [[0.0, 1.0, 0.5], [0.5, 0.0, 0.0]],
                [[-1.0, -2.0, -0.5], [-0.5, -1.5, -1.0]],
                [[0.25, 0.5, 0.75], [0.75, 0.125, 0.5]],
            ),
            {"group": [0, 0], "mask": _MASK},
        ),
    ),
}


def _calls() -> dict[str, tuple[Call, ...]]:
    out = {key: tuple(calls) for key, calls in VALID_CALLS.items() if key.startswith(PACKAGES)}
    for key, extra in EXTRA_CALLS.items():
        out[key] = out[key] + extra
    return out


CALLS = _calls()


def _batch_shape(arguments: dict[str, Any]) -> tuple[int, int] | None:
    """``(B, T)`` of the call's token arrays (the mask, else the first 2-D numeric argument)."""
    ordered = sorted(arguments.items(), key=lambda item: item[0] != "mask")
    for _, value in ordered:
        if isinstance(value, (str, bool)) or value is None:
            continue
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            continue
        if arr.ndim == 2:
            return int(arr.shape[0]), int(arr.shape[1])
    return None


def _per_sequence_arguments() -> list[tuple[str, int, str]]:
    """``(function key, call index, parameter)`` of every 1-D argument of length ``B`` (!= T)."""
    out = []
    for key, calls in sorted(CALLS.items()):
        fn = public_function(key)
        for i, call in enumerate(calls):
            arguments = bind(fn, call.args, call.kwargs)
            shape = _batch_shape(arguments)
            if shape is None or shape[0] == shape[1]:
                continue
            for name, value in arguments.items():
                if isinstance(value, (str, bool, tuple)) or value is None:
                    continue  # a tuple is a pair of bounds, never one entry per sequence
                if np.ndim(value) == 1 and len(value) == shape[0]:
                    out.append((key, i, name))
    return out


CASES = _per_sequence_arguments()


def _with_token_length(fn: Any, key: str, i: int, name: str) -> dict[str, Any]:
    arguments = bind(fn, CALLS[key][i].args, CALLS[key][i].kwargs)
    shape = _batch_shape(arguments)
    assert shape is not None
    value = np.asarray(arguments[name])
    moved = dict(arguments)
    moved[name] = np.resize(value, shape[1])  # the row's values repeated: length T
    return moved


def check_refused(fn: Any, key: str, i: int, name: str) -> None:
    """The call is valid as it is; with ``name`` of the token axis' length it is refused, and the
    refusal names ``name``."""
    call_with(fn, bind(fn, CALLS[key][i].args, CALLS[key][i].kwargs))
    moved = _with_token_length(fn, key, i, name)
    try:
        call_with(fn, moved)
    except ValueError as error:
        message = str(error)
    else:
        raise AssertionError(f"{key} call {i}: {name} of length T = {len(moved[name])} accepted")
    assert name in message, (key, name, message)


def test_the_cases_are_found() -> None:
    found = {(key, name) for key, _, name in CASES}
    assert ("refimpl.losses off_policy_sequence_mask", "advantages") in found
    assert ("refimpl.losses gspo_loss", "advantages") in found
    for key, calls in EXTRA_CALLS.items():  # each extra call adds a case
        assert sum(k == key for k, _, _ in CASES) >= len(calls), key
    assert len({key for key, _ in found}) >= 10, sorted(found)


@pytest.mark.parametrize(("key", "i", "name"), CASES, ids=[f"{k} #{i} {n}" for k, i, n in CASES])
def test_a_per_sequence_argument_of_the_token_axis_length_is_refused(
    key: str, i: int, name: str
) -> None:
    check_refused(public_function(key), key, i, name)


def test_the_check_rejects_a_function_reading_the_token_axis() -> None:
    """``off_policy_sequence_mask`` checking advantages against ``shape[1]``: a length-T array
    goes through (and is broadcast over the rows' tokens)."""
    import refimpl.losses.rejection as rj

    def token_axis(lt: Any, lb: Any, advantages: Any, **kw: Any) -> Any:
        a = np.asarray(advantages, dtype=np.float64)
        return rj.off_policy_sequence_mask(lt, lb, a[: np.shape(lt)[0]], **kw)

    key = "refimpl.losses off_policy_sequence_mask"
    rejects(check_refused, token_axis, key, 0, "advantages")


# --- a mask of another shape is refused naming the array it is compared with ------------------


def _masked_calls() -> list[tuple[str, int]]:
    """Every call with a mask that is not the function's first argument and has the shape of
    another argument (a per-sequence function's mask only weighs rows: its T is free)."""
    out = []
    for key, calls in sorted(CALLS.items()):
        fn = public_function(key)
        if next(iter(inspect.signature(fn).parameters)) == "mask":
            continue
        for i, call in enumerate(calls):
            arguments = bind(fn, call.args, call.kwargs)
            mask = arguments.get("mask")
            if mask is None or np.ndim(mask) < 1:
                continue
            shape = np.shape(mask)
            if any(
                np.shape(v)[: len(shape)] == shape
                for n, v in arguments.items()
                if n != "mask" and not isinstance(v, (str, bool, tuple)) and v is not None
            ):
                out.append((key, i))
    return out


MASKED = _masked_calls()


def _compared_with(fn: Any, arguments: dict[str, Any], ndim: int) -> str:
    """The array a mask is compared with: the first positional array argument of the mask's
    number of dimensions, else the first positional one with more (e.g. logits); among the
    keyword-only arguments (an optional cotangent) only when no positional array qualifies."""
    kinds = {n: p.kind for n, p in inspect.signature(fn).parameters.items()}
    arrays = [
        (name, np.ndim(value), kinds.get(name) != inspect.Parameter.KEYWORD_ONLY)
        for name, value in arguments.items()
        if name != "mask" and not isinstance(value, (str, bool, tuple)) and value is not None
    ]
    for positional in (True, False):
        for more in (False, True):
            names = [
                n for n, d, p in arrays if p == positional and (d > ndim if more else d == ndim)
            ]
            if names:
                return names[0]
    raise AssertionError(f"no array to compare a mask with among {sorted(arguments)}")


def check_mask_refusal(fn: Any, key: str, i: int) -> None:
    """A mask with one more token is refused: ``mask and <first token array> must ...``."""
    arguments = bind(fn, CALLS[key][i].args, CALLS[key][i].kwargs)
    mask = np.asarray(arguments["mask"], dtype=np.float64)
    moved = dict(arguments)
    moved["mask"] = np.concatenate([mask, np.ones((*mask.shape[:-1], 1))], axis=-1)
    try:
        call_with(fn, moved)
    except ValueError as error:
        message = str(error)
    else:
        raise AssertionError(f"{key} call {i}: a mask of shape {moved['mask'].shape} accepted")
    other = _compared_with(fn, arguments, mask.ndim)
    assert message.startswith(f"mask and {other}"), (key, i, message)


@pytest.mark.parametrize(("key", "i"), MASKED, ids=[f"{k} #{i}" for k, i in MASKED])
def test_a_mask_of_another_shape_is_refused_naming_the_array_it_must_match(
    key: str, i: int
) -> None:
    check_mask_refusal(public_function(key), key, i)


def test_the_masked_calls_are_found() -> None:
    keys = {key for key, _ in MASKED}
    assert "refimpl.staleness decoupled_ppo_weights" in keys
    assert "refimpl.staleness truncated_is_weights" in keys
    assert len(keys) >= 30, sorted(keys)


def test_the_mask_check_rejects_a_refusal_naming_the_other_array() -> None:
    """decoupled_ppo_weights naming logp_behavior (its second array) in the mask's refusal."""
    import refimpl.staleness as st_

    def other_name(logp_prox: Any, logp_behavior: Any, **kw: Any) -> Any:
        try:
            return st_.decoupled_ppo_weights(logp_prox, logp_behavior, **kw)
        except ValueError as error:
            raise ValueError(str(error).replace("logp_prox", "logp_behavior")) from None

    rejects(check_mask_refusal, other_name, "refimpl.staleness decoupled_ppo_weights", 0)


# --- an empty batch (B = 0) or an empty token axis (T = 0) is refused, not computed -----------
# (optimal_token_baseline_advantages returned an empty array for both, where every other loss
# refuses them by name)


def _emptied(arguments: dict[str, Any], shape: tuple[int, int], axis: int) -> dict[str, Any]:
    """The call with every ``(B, T)`` array cut to length 0 along ``axis`` (and, for ``B = 0``,
    every per-sequence ``(B,)`` array cut to length 0)."""
    out = dict(arguments)
    for name, value in arguments.items():
        if isinstance(value, (str, bool, tuple)) or value is None:
            continue
        arr = np.asarray(value)
        if arr.dtype == object:
            continue
        if arr.shape[:2] == shape:  # token arrays, and logits (B, T, V)
            out[name] = arr[:0] if axis == 0 else arr[:, :0]
        elif axis == 0 and arr.shape == (shape[0],):
            out[name] = arr[:0]
    return out


EMPTY_CASES = [
    (key, i, axis)
    for key, calls in sorted(CALLS.items())
    if key.startswith("refimpl.losses")
    for i, call in enumerate(calls)
    if _batch_shape(bind(public_function(key), call.args, call.kwargs)) is not None
    for axis in (0, 1)
]


def check_empty_refused(fn: Any, key: str, i: int, axis: int) -> None:
    arguments = bind(fn, CALLS[key][i].args, CALLS[key][i].kwargs)
    shape = _batch_shape(arguments)
    assert shape is not None
    with pytest.raises(ValueError, match=r"(?i)pass") as refused:  # a refusal, with its fix
        call_with(fn, _emptied(arguments, shape, axis))
    assert "shape (" in str(refused.value) or "got" in str(refused.value), str(refused.value)


@pytest.mark.parametrize(
    ("key", "i", "axis"), EMPTY_CASES, ids=[f"{k} #{i} axis {a}" for k, i, a in EMPTY_CASES]
)
def test_an_empty_batch_or_token_axis_is_refused(key: str, i: int, axis: int) -> None:
    check_empty_refused(public_function(key), key, i, axis)
