"""The calls of the importance-weight specs: log-probabilities drawn padded (with the log-ratios
at the edges the weight changes at), handed to the candidate padded or packed, and read back."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refimpl.testing import strategies as rst
from refimpl.testing._engine import Call, Conventions
from refimpl.testing._specs_weights_conventions import Array, Family, Level

# ---------------------------------------------------------------------------------------------
# the calls: drawn padded, handed over padded or packed
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    family: Family
    level: Level

    def effective_level(self, conv: Conventions) -> Level:
        if self.level == "token":
            return "token"
        return "geometric" if conv["aggregate"] == "mean" else "sequence"

    def token_shaped(self, conv: Conventions) -> bool:
        if self.level == "token":
            return True
        if self.family == "mis" and conv["weight"] in ("token", "geometric"):
            return True
        return bool(conv["output"] == "BT")


def _params(family: Family, conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    if family == "tis":
        return rst.is_caps().map(lambda c: {"cap": c})
    if family == "mis":
        return rst.is_bands().map(lambda b: {"low": b[0], "high": b[1]})
    if conv["above_cap"] == "clip":  # clip(ρ, lower, C) needs C
        return rst.is_caps().map(lambda c: {"cap": c})
    return st.one_of(st.none(), rst.is_caps()).map(lambda c: {"cap": c})


def _edges(family: Family, params: dict[str, Any], conv: Conventions) -> list[float]:
    """Log-ratio values at the edges that the weight changes at."""
    out = [0.0]
    if family in ("tis", "ppo") and params.get("cap") is not None:
        out.append(math.log(params["cap"]))
    if family == "mis":
        sign = 1.0 if conv["band_on"] == "ratio" else -1.0
        out.append(sign * math.log(params["high"]))
        if params["low"] > 0:
            out.append(sign * math.log(params["low"]))
    if conv.get("lower") is not None:
        out.append(math.log(conv["lower"]))
    if conv.get("log_ratio_clamp") is not None:
        out += [conv["log_ratio_clamp"], -conv["log_ratio_clamp"]]
    return out


def _ulps(x: float, k: int) -> float:
    return float(x + k * math.ulp(x)) if x != 0.0 else float(k * 5e-324)


@st.composite
def _padded_draw(
    draw: st.DrawFn,
    family: Family,
    conv: Conventions,
    *,
    max_abs: float = 20.0,
    long: bool = False,
    padding: bool = True,
) -> tuple[Array, Array, Array, dict[str, Any]]:
    params = draw(_params(family, conv))
    edges = _edges(family, params, conv)
    if long:
        batch, time = draw(st.integers(1, 2)), 4096
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        behavior = -rng.exponential(2.0, (batch, time))
        noise = rng.normal(0.0, draw(st.sampled_from([0.0, 1e-3, 0.1, 1.0])), (batch, time))
        target = np.minimum(behavior + noise, 0.0)
        lengths = rng.integers(1, time + 1, batch)
        lengths[0] = time
    else:
        batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 8))
        logp = st.floats(-max_abs, 0.0, allow_nan=False, allow_subnormal=False)
        behavior = draw(hnp.arrays(np.float64, (batch, time), elements=logp))
        big = [25.0, -25.0, 50.0, -50.0, 89.0, 710.0, -710.0] if max_abs > 20 else [25.0, -25.0]
        offsets = st.one_of(
            st.just(0.0),  # on-policy
            st.floats(-max_abs, max_abs, allow_nan=False, allow_subnormal=False),
            st.sampled_from(big),  # log-ratios beyond ±20
            st.tuples(st.sampled_from(edges), st.integers(-1, 1)).map(lambda e: _ulps(*e)),
        )
        offset = draw(hnp.arrays(np.float64, (batch, time), elements=offsets))
        row_mode = draw(
            st.lists(
                st.sampled_from(["mixed", "on_policy", "all_edge", "one_edge", "rejected"]),
                min_size=batch,
                max_size=batch,
            )
        )
        for i, mode in enumerate(row_mode):
            if mode == "on_policy":
                offset[i] = 0.0
            elif mode == "all_edge":
                offset[i] = _ulps(draw(st.sampled_from(edges)), draw(st.integers(-1, 1)))
            elif mode == "one_edge":
                offset[i] = 0.0
                offset[i, 0] = _ulps(draw(st.sampled_from(edges)), draw(st.integers(-1, 1)))
            elif mode == "rejected":  # every token far outside any band or cap
                offset[i] = draw(st.sampled_from([30.0, -30.0]))
        target = behavior + offset
        low = time if not padding else (1 if conv["empty_rows"] == "excluded" else 0)
        lengths = np.asarray(
            draw(st.lists(st.integers(low, time), min_size=batch, max_size=batch)), dtype=np.int64
        )
        if conv["empty_batch"] == "excluded" and lengths.max() == 0:
            lengths[0] = 1
        if conv["nonfinite"] == "one":
            bad = draw(hnp.arrays(np.bool_, (batch, time)))
            which = draw(st.sampled_from([-np.inf, np.nan, np.inf]))
            side = draw(st.booleans())
            if side:
                target = np.where(bad, which, target)
            else:
                behavior = np.where(bad, which, behavior)
    mask = (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)
    if not padding:
        mask = np.ones_like(mask)
    return target, behavior, mask, params


def _to_call(
    target: Array, behavior: Array, mask: Array, params: dict[str, Any], conv: Conventions
) -> Call:
    if conv["inputs"] == "log_ratio":
        with np.errstate(invalid="ignore"):
            arrays: tuple[Array, ...] = (target - behavior,)
    else:
        arrays = (target, behavior)
    if conv["layout"] == "packed":
        valid = mask > 0
        lengths = valid.sum(axis=1).astype(np.int64)
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return tuple(a[valid] for a in arrays), {**params, "cu_seqlens": cu}
    return arrays, {**params, "mask": mask}


def _from_call(call: Call, conv: Conventions) -> tuple[Array, Array, Array, dict[str, Any]]:
    """The padded ``(target, behavior, mask, params)`` of a call (log-ratio inputs: behavior 0)."""
    args, kwargs = call
    params = {k: v for k, v in kwargs.items() if k not in ("mask", "cu_seqlens")}
    arrays = [np.asarray(a, dtype=np.float64) for a in args]
    if len(arrays) == 1:
        arrays.append(np.zeros_like(arrays[0]))
    if "cu_seqlens" in kwargs:
        cu = np.asarray(kwargs["cu_seqlens"], dtype=np.int64)
        lengths = np.diff(cu)
        time = max(int(lengths.max(initial=0)), 1)
        mask = (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)
        out = []
        for a in arrays:
            padded = np.zeros(mask.shape)
            padded[mask > 0] = a
            out.append(padded)
        return out[0], out[1], mask, params
    return arrays[0], arrays[1], np.asarray(kwargs["mask"], dtype=np.float64), params


def _calls(
    fam: _Family, *, max_abs: float = 20.0, long: bool = False, padding: bool = True
) -> Callable[[Conventions], st.SearchStrategy[list[Call]]]:
    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        draws = _padded_draw(fam.family, conv, max_abs=max_abs, long=long, padding=padding)
        return draws.map(lambda d: [_to_call(*d, conv)])

    return strategy


def _mixed_calls(fam: _Family) -> Callable[[Conventions], st.SearchStrategy[list[Call]]]:
    """Mostly short batches, sometimes T = 4096."""

    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        return st.one_of(
            _calls(fam)(conv), _calls(fam, max_abs=1000.0)(conv), _calls(fam, long=True)(conv)
        )

    return strategy
