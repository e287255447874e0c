r"""The ``aggregation`` spec: the loss statistic that turns per-token losses into a scalar.

``aggregation`` checks a candidate that turns a per-token loss matrix into the scalar a trainer
differentiates (:func:`refimpl.losses.aggregate_loss`): its value and its gradient with respect to
the loss matrix, which is exactly :func:`refimpl.losses.aggregation_weights`. The gradient comes
from the candidate's own autograd (:meth:`~refimpl.testing._arrays.ArrayBridge.value_and_vjp`,
cotangent 1 for the scalar); a numpy candidate returns ``(value, weights)`` itself
(``gradient='returned'``) or is checked on its value only (``gradient='none'``).

The advantage specs are in ``_specs_losses_stats_advantages.py``.

Derived tolerances
------------------
A sum of :math:`n` terms rounds by :math:`(\lceil\log_2 n\rceil + 1)\,u\sum|x|` (``summation_factor``).
The aggregated loss :math:`\sum w\ell` therefore has condition :math:`(f_N + 4)\sum|w\ell|` (the
weights :math:`1/(S L_b)` add two roundings, the product one) and its gradient :math:`4|w|`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.aggregation import AGGREGATION_MODES, aggregation_weights
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]
Strategy = Callable[[Conventions], st.SearchStrategy[list[Call]]]

__all__ = ["aggregation_spec", "padding_mask"]

# ---------------------------------------------------------------------------------------------
# aggregation: conventions
# ---------------------------------------------------------------------------------------------

MODE = Convention(
    "mode",
    "token_mean",
    AGGREGATION_MODES,
    "the aggregation the candidate implements (refimpl.losses.aggregation_weights' mode); "
    "token_sum_norm receives constant=H, group_mean receives group=",
    who="token_mean: verl 0.9.1 agg_loss 'token-mean', TRL 1.16.0 'dapo'/'bnpo', AReaL 1.0.4 "
    "ppo_actor_loss_fn; seq_mean_token_mean: verl 'seq-mean-token-mean', TRL 'grpo', SkyRL 0.3.0 "
    "'sequence_mean', OpenRLHF 0.11.2 token_level_loss=False; seq_mean_token_sum: verl "
    "'seq-mean-token-sum', TRL 'luspo'; token_sum_norm: verl 'seq-mean-token-sum-norm' "
    "(loss_scale_factor), TRL 'dr_grpo' (max_completion_length), SkyRL 'seq_mean_token_sum_norm'; "
    "group_mean: SkyRL 'prompt_mean'; token_sum: verl 'token-sum'",
)
AGG_EMPTY_ROWS = Convention(
    "empty_rows",
    "excluded",
    ("excluded", "counted"),
    "whether a row without a valid token counts in the sequence (or group) count S",
    who="excluded: verl 0.9.1 agg_loss (seq_mask), OpenRLHF 0.11.2; counted: TRL 1.16.0 'grpo' "
    "(mean over every row)",
)
AGG_EMPTY_BATCH = Convention(
    "empty_batch",
    "drawn",
    ("drawn", "excluded"),
    "a batch without any valid token: drawn (the aggregate must be 0, not 0/0), or never drawn",
    who="excluded: verl 0.9.1 agg_loss 'token-mean' (divides by loss_mask.sum())",
)
AGG_GRADIENT = Convention(
    "gradient",
    "autodiff",
    ("autodiff", "returned", "none"),
    "'autodiff': differentiated by torch or jax autograd; 'returned': the candidate returns "
    "(value, dJ/dloss) itself; 'none': the value only (no gradient check)",
    who="returned: refimpl (aggregate_loss with aggregation_weights); none: a numpy candidate",
)

HUGE = (1e30, -1e30, 3e37, -7e20)


# ---------------------------------------------------------------------------------------------
# aggregation: draws
# ---------------------------------------------------------------------------------------------


def _lengths(
    draw: st.DrawFn, batch: int, time: int, conv: Conventions, *, low: int = 0
) -> NDArray[np.int64]:
    lengths = np.asarray(
        draw(st.lists(st.integers(low, time), min_size=batch, max_size=batch)), dtype=np.int64
    )
    if conv.get("empty_batch") == "excluded" and lengths.max() == 0:
        lengths[0] = 1
    return lengths


def padding_mask(lengths: NDArray[np.int64], time: int) -> Array:
    return (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)


@st.composite
def _agg_call(
    draw: st.DrawFn,
    conv: Conventions,
    *,
    wide: bool = False,
    empty: bool = False,
    zero: bool = False,
    garbage: bool = False,
) -> list[Call]:
    batch = draw(st.integers(2 if empty else 1, 4))
    time = draw(st.integers(1, 8))
    if zero:
        lengths = np.zeros(batch, dtype=np.int64)
    else:
        lengths = _lengths(draw, batch, time, conv)
        if empty:
            j = draw(st.integers(0, batch - 1))
            lengths[j] = 0
            lengths[(j + 1) % batch] = max(int(lengths[(j + 1) % batch]), 1)
    longest = int(lengths.max(initial=0))
    if wide:  # padded wider than needed, and H different from the padded width
        time = max(time, longest) + draw(st.integers(1, 6))
    mask = padding_mask(lengths, time)
    # never 0: a shrunk counterexample then shows a wrong weight in the value too
    values = st.floats(0.25, 50.0) | st.floats(-50.0, -0.25)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1.0, 1e-3, 50.0]))
    loss = rng.normal(0.0, scale, (batch, time))
    loss[0, 0] = draw(values)
    pad = rng.choice(HUGE, (batch, time)) if garbage else rng.normal(0.0, 1e3, (batch, time))
    loss = np.where(mask > 0, loss, pad)
    kwargs: dict[str, Any] = {}
    if conv["mode"] == "token_sum_norm":
        h = float(draw(st.integers(max(longest, 1), max(longest, 1) + 12)))
        if wide and h == time:
            h += 1.0
        kwargs["constant"] = h
    if conv["mode"] == "group_mean":
        kwargs["group"] = np.asarray(
            draw(st.lists(st.integers(0, 2), min_size=batch, max_size=batch)), dtype=np.int64
        )
    calls: list[Call] = [((loss, mask), kwargs)]
    if garbage:  # the same valid entries, other garbage
        other = np.where(mask > 0, loss, -np.flip(pad))
        calls.append(((other, mask), dict(kwargs)))
    return calls


def _agg_strategy(**flags: bool) -> Strategy:
    return lambda conv: _agg_call(conv, **flags)


# ---------------------------------------------------------------------------------------------
# aggregation: reference, reading, conditions, checks
# ---------------------------------------------------------------------------------------------


def _weights(call: Call, conv: Conventions) -> Array:
    (_, mask), kwargs = call
    return aggregation_weights(
        np.asarray(mask), mode=conv["mode"], empty_rows=conv["empty_rows"], **kwargs
    )


def _agg_expected(call: Call, conv: Conventions) -> tuple[Array, Array]:
    (loss, mask), _ = call
    w = _weights(call, conv)
    value = np.asarray(np.sum(w * np.where(np.asarray(mask) > 0, loss, 0.0)), dtype=np.float64)
    return value, w


def _agg_condition(call: Call, conv: Conventions, expected: Any) -> tuple[Array, Array]:
    (loss, mask), _ = call
    w = expected[1]
    terms = np.abs(w * np.where(np.asarray(mask) > 0, loss, 0.0))
    n = int(np.count_nonzero(np.asarray(mask)))
    value = np.asarray((summation_factor(max(n, 1)) + 4.0) * terms.sum(), dtype=np.float64)
    return value, 4.0 * np.abs(w)


def _agg_read(raw: Any, call: Call, conv: Conventions) -> tuple[Array, Array | None]:
    if conv["gradient"] == "none":
        return ArrayBridge.to_numpy(raw), None
    value, grad = raw
    return ArrayBridge.to_numpy(value), ArrayBridge.to_numpy(grad)


def _agg_vjp(call: Call, conv: Conventions) -> tuple[Call, Any]:
    return call, (np.asarray(1.0) if conv["gradient"] == "autodiff" else None)


def _agg_value(case: Case, i: int) -> None:
    value, _ = case.found[i]
    expected = case.expected(i)
    case.show("found:", value, "expected:", expected[0])
    assert value.shape == (), f"the aggregate has shape {value.shape}, expected a scalar"
    case.assert_close(value, expected[0], case.condition(i)[0], "the aggregated losses")


def _agg_gradient(case: Case, i: int) -> None:
    _, grad = case.found[i]
    if grad is None:
        return
    expected = case.expected(i)
    case.show("gradient:", grad, "weights:", expected[1])
    case.assert_close(grad, expected[1], case.condition(i)[1], "the gradients (weights)")


def _agg_values(case: Case) -> None:
    for i in range(len(case.calls)):
        _agg_value(case, i)


def _agg_gradients(case: Case) -> None:
    for i in range(len(case.calls)):
        _agg_value(case, i)
        _agg_gradient(case, i)


def _agg_padding(case: Case) -> None:
    for i, ((_, mask), _) in enumerate(case.calls):
        _agg_value(case, i)
        _, grad = case.found[i]
        if grad is not None:
            at_pad = grad[np.asarray(mask) == 0]
            assert np.all(at_pad == 0), f"padding entries got gradients {at_pad[at_pad != 0][:5]}"


def _agg_zero(case: Case) -> None:
    for i in range(len(case.calls)):
        value, grad = case.found[i]
        assert np.all(np.isfinite(value)), f"no valid token gave {value}, expected 0"
        assert np.all(value == 0), f"no valid token gave {value}, expected 0"
        if grad is not None:
            assert np.all(grad == 0), f"no valid token gave gradients {grad.ravel()[:5]}"


def _gradient_applies(conv: Conventions) -> str | None:
    return "the candidate declares gradient='none'" if conv["gradient"] == "none" else None


def _norm_applies(conv: Conventions) -> str | None:
    if conv["mode"] != "token_sum_norm":
        return "only mode='token_sum_norm' divides by a declared constant"
    return None


def _zero_applies(conv: Conventions) -> str | None:
    return "empty_batch='excluded' is declared" if conv["empty_batch"] == "excluded" else None


def aggregation_spec() -> Spec:
    """The ``aggregation`` spec: value and gradient of an aggregated per-token loss."""
    return Spec(
        name="aggregation",
        reference="losses.aggregation.aggregate_loss",
        signature="candidate(loss, mask) -> scalar (mode declared; constant= for token_sum_norm, "
        "group= for group_mean)",
        read=_agg_read,
        expected=_agg_expected,
        condition=_agg_condition,
        conventions=(MODE, AGG_EMPTY_ROWS, AGG_EMPTY_BATCH, AGG_GRADIENT),
        vjp=_agg_vjp,
        checks=(
            Check(
                "values",
                "the aggregate agrees with refimpl.losses.aggregate_loss in the declared mode",
                _agg_strategy(),
                _agg_values,
            ),
            Check(
                "gradient",
                "the gradient with respect to the loss matrix is aggregation_weights(mask, mode)",
                _agg_strategy(),
                _agg_gradients,
                applies=_gradient_applies,
            ),
            Check(
                "padding_contributes_nothing",
                "padding holding huge finite garbage changes neither the value nor the gradient "
                "(which is 0 there)",
                _agg_strategy(garbage=True),
                _agg_padding,
            ),
            Check(
                "token_sum_norm_uses_the_constant",
                "token_sum_norm divides by the declared constant H, not by the padded width "
                "(batches padded wider than their longest row)",
                _agg_strategy(wide=True),
                _agg_gradients,
                applies=_norm_applies,
            ),
            Check(
                "empty_rows",
                "rows without a valid token contribute nothing and count in S as declared "
                "(empty_rows)",
                _agg_strategy(empty=True),
                _agg_gradients,
            ),
            Check(
                "no_valid_token_gives_zero",
                "a batch without any valid token aggregates to 0 (not 0/0) with zero gradient",
                _agg_strategy(zero=True),
                _agg_zero,
                applies=_zero_applies,
            ),
        ),
    )
