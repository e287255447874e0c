"""The conventions the importance-weight specs declare (TIS, masked IS / IcePop, decoupled-PPO
behaviour weights), as verl, AReaL, TRL and SkyRL differ by them, and which ones each family and
level declares."""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._engine import Convention

Family = Literal["tis", "mis", "ppo"]
Level = Literal["token", "sequence", "geometric"]
Array = NDArray[np.float64]

# ---------------------------------------------------------------------------------------------
# conventions
# ---------------------------------------------------------------------------------------------

PADDING = Convention(
    "padding",
    "zero",
    ("zero", "one", "ignored"),
    "the value at padding positions (and of an all-padding row): 0, 1, or not compared",
    who="zero: verl, AReaL; one: SkyRL's token mask; ignored: SkyRL's token TIS",
)
CLAMP = Convention(
    "log_ratio_clamp",
    None,
    (None,),
    "c > 0: the log-ratio of the level (per token, the sequence sum or mean) is clipped to [−c, c] "
    "before exp",
    number=True,
    who="20: verl (SAFETY_BOUND), SkyRL (safe_exp_delta)",
)
NONFINITE = Convention(
    "nonfinite",
    "error",
    ("error", "one"),
    "'one': a non-finite log-ratio (NaN, an infinite log-probability) counts as ratio 1; "
    "'error': such inputs are not drawn",
    who="one: AReaL (apply_rejection_sampling), TRL (get_off_policy_mask)",
)
EMPTY_ROWS = Convention(
    "empty_rows",
    "padding",
    ("padding", "excluded"),
    "an all-padding row: drawn, and its weight is the padding value; or never drawn (the "
    "candidate requires a real token per row, as refimpl's sequence levels and verl's rejection "
    "mask do)",
    who="excluded: verl's compute_rollout_rejection_mask (raises on an all-padding mask)",
)
EMPTY_BATCH = Convention(
    "empty_batch",
    "drawn",
    ("drawn", "excluded"),
    "a batch that is padding everywhere: drawn, or never drawn (every batch keeps a real token; "
    "single all-padding rows are still drawn unless empty_rows='excluded')",
    who="excluded: verl 0.9.1 (raises 'response_mask must contain at least one valid token')",
)
INPUTS = Convention(
    "inputs",
    "logprobs",
    ("logprobs", "log_ratio"),
    "'logprobs': the candidate gets (logp_target, logp_behavior); 'log_ratio': one array "
    "log π − log μ",
    who="log_ratio: verl's compute_rollout_correction_weights",
)
LAYOUT = Convention(
    "layout",
    "padded",
    ("padded", "packed"),
    "'padded': (B, T) arrays and mask=; 'packed': 1-D arrays of the valid tokens and "
    "cu_seqlens= (B + 1 offsets)",
    who="packed: AReaL",
)
OUTPUT = Convention(
    "output",
    "B",
    ("B", "B1", "BT"),
    "a sequence weight as (B,), (B, 1), or broadcast to every token (B, T) (packed: (N,))",
    who="BT: verl, AReaL; B1: SkyRL",
)
COMPUTE = Convention(
    "compute_dtype",
    None,
    (None, "float32", "bfloat16", "float16"),
    "the dtype the candidate computes in when it is coarser than its inputs (tolerances follow)",
    who="float32: SkyRL (safe_exp_delta), AReaL (upcasts bf16 to float32: leave it None)",
)
LOWER = Convention(
    "lower",
    None,
    (None,),
    "two-sided truncation clip(ρ, lower, C), 0 < lower <= 1",
    number=True,
    who="AReaL (action='clamp'), TRL's vLLM correction",
)
BAND_ON = Convention(
    "band_on",
    "ratio",
    ("ratio", "reciprocal"),
    "the band [low, high] applies to π/μ, or to its reciprocal μ/π (the k1 statistic −log ρ)",
    who="reciprocal: verl's rejection mask with token_k1 / seq_sum_k1 / seq_mean_k1",
)
WEIGHT = Convention(
    "weight",
    "ratio",
    ("ratio", "indicator", "token", "geometric"),
    "a kept entry's weight: the filtered ratio, 1 (a 0/1 mask), the token ratio, or the "
    "sequence's geometric-mean ratio (the last two shaped like the tokens)",
    who="indicator: verl's rejection mask, SkyRL's masks; geometric: AReaL's sequence level",
)
AGGREGATE = Convention(
    "aggregate",
    "sum",
    ("sum", "mean"),
    "a sequence's log-ratio: the sum (product of ratios) or the mean (geometric mean)",
    who="mean: AReaL agg='mean', SkyRL geometric, verl seq_mean_*",
)
CLAMP_AT = Convention(
    "clamp_at",
    "level",
    ("level", "token"),
    "where log_ratio_clamp applies at a sequence level: the sum or mean, or each token first",
    who="token: verl's seq_sum_k1 / seq_mean_k1 rejection; level: SkyRL, verl's IS weights",
)
ABOVE_CAP = Convention(
    "above_cap",
    "mask",
    ("mask", "clip"),
    "a weight above the cap: set to 0 (masked), or clipped to the cap",
    who="mask: AReaL behave_imp_weight (action='mask'); clip: action='clamp'",
)


def _conventions(family: Family, level: Level) -> tuple[Convention, ...]:
    common = (PADDING, CLAMP, NONFINITE, INPUTS, LAYOUT, COMPUTE, EMPTY_ROWS, EMPTY_BATCH)
    if family == "tis":
        own: tuple[Convention, ...] = (LOWER,)
    elif family == "mis":
        own = (BAND_ON, WEIGHT)
    else:
        own = (ABOVE_CAP, LOWER)
    if level != "token":
        default = "mean" if level == "geometric" else "sum"
        own = (
            *own,
            Convention(
                AGGREGATE.key, default, AGGREGATE.choices, AGGREGATE.meaning, who=AGGREGATE.who
            ),
            OUTPUT,
            CLAMP_AT,
        )
    return common + own
