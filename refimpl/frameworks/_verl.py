"""verl 0.9.1: rollout correction (TIS, IcePop, rejection masks), read from its installed sources.

Every adapter calls the installed function; its source is self-contained so that a reproduction can
paste it. ``verl/trainer/ppo/rollout_corr_helper.py``: the weights and masks take the log-ratio
``log π − log μ`` (``old_log_prob − rollout_log_prob``), clamp it to ±20 (``SAFETY_BOUND``) before
``exp`` and return ``(B, T)`` tensors that are 0 at padding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refimpl.frameworks._registry import Adapter, Divergence

_HELPER = "verl.trainer.ppo.rollout_corr_helper"
_LOG_RATIO = {
    "inputs": "log_ratio",
    "log_ratio_clamp": 20.0,
    "padding": "zero",
    "empty_rows": "excluded",  # verl raises on a batch with no valid token
}


def verl_token_tis(log_ratio: Any, *, cap: float, mask: Any) -> Any:
    """verl token TIS: ``rollout_is="token"``, ``rollout_is_threshold=cap``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    weights, _ = compute_rollout_correction_weights(
        log_ratio, mask, rollout_is="token", rollout_is_threshold=float(cap)
    )
    return weights


def verl_sequence_tis(log_ratio: Any, *, cap: float, mask: Any) -> Any:
    """verl sequence TIS: ``rollout_is="sequence"``, ``rollout_is_threshold=cap``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    weights, _ = compute_rollout_correction_weights(
        log_ratio, mask, rollout_is="sequence", rollout_is_threshold=float(cap)
    )
    return weights


def verl_token_icepop(log_ratio: Any, *, low: float, high: float, mask: Any) -> Any:
    """verl token IcePop: ``rollout_is="token"``, ``rollout_is_threshold="low_high"``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    # verl refuses lo = 0; after its clamp of log ρ to >= −20, 5e-324 keeps what 0 keeps.
    band = f"{float(max(low, 5e-324))!r}_{float(high)!r}"
    weights, _ = compute_rollout_correction_weights(
        log_ratio, mask, rollout_is="token", rollout_is_threshold=band
    )
    return weights


def verl_sequence_icepop(log_ratio: Any, *, low: float, high: float, mask: Any) -> Any:
    """verl sequence IcePop: ``rollout_is="sequence"``, ``rollout_is_threshold="low_high"``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    # verl refuses lo = 0; after its clamp of log ρ to >= −20, 5e-324 keeps what 0 keeps.
    band = f"{float(max(low, 5e-324))!r}_{float(high)!r}"
    weights, _ = compute_rollout_correction_weights(
        log_ratio, mask, rollout_is="sequence", rollout_is_threshold=band
    )
    return weights


def verl_token_k1_mask(log_ratio: Any, *, low: float, high: float, mask: Any) -> Any:
    """verl rejection mask ``rollout_rs="token_k1"``, ``rollout_rs_threshold="low_high"``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    # verl refuses lo = 0; after its clamp of log ρ to >= −20, 5e-324 keeps what 0 keeps.
    band = f"{float(max(low, 5e-324))!r}_{float(high)!r}"
    kept, _ = compute_rollout_rejection_mask(
        log_ratio, mask, rollout_rs="token_k1", rollout_rs_threshold=band
    )
    return kept


def verl_seq_mean_k1_mask(log_ratio: Any, *, low: float, high: float, mask: Any) -> Any:
    """verl rejection mask ``rollout_rs="seq_mean_k1"``, ``rollout_rs_threshold="low_high"``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    # verl refuses lo = 0; after its clamp of log ρ to >= −20, 5e-324 keeps what 0 keeps.
    band = f"{float(max(low, 5e-324))!r}_{float(high)!r}"
    kept, _ = compute_rollout_rejection_mask(
        log_ratio, mask, rollout_rs="seq_mean_k1", rollout_rs_threshold=band
    )
    return kept


def verl_seq_sum_k1_mask(log_ratio: Any, *, low: float, high: float, mask: Any) -> Any:
    """verl rejection mask ``rollout_rs="seq_sum_k1"``, ``rollout_rs_threshold="low_high"``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    # verl refuses lo = 0; after its clamp of log ρ to >= −20, 5e-324 keeps what 0 keeps.
    band = f"{float(max(low, 5e-324))!r}_{float(high)!r}"
    kept, _ = compute_rollout_rejection_mask(
        log_ratio, mask, rollout_rs="seq_sum_k1", rollout_rs_threshold=band
    )
    return kept


def verl_correction_sequence_tis(
    logp_target: Any, logp_behavior: Any, *, cap: float, mask: Any
) -> Any:
    """verl's entry point from log-probs: ``rollout_is="sequence"``, ``rollout_is_threshold=cap``."""
    from verl.trainer.ppo.rollout_corr_helper import (
        compute_rollout_correction_and_rejection_mask,
    )

    proto, _, _ = compute_rollout_correction_and_rejection_mask(
        logp_target, logp_behavior, mask, rollout_is="sequence", rollout_is_threshold=float(cap)
    )
    return proto.batch["rollout_is_weights"]


# The checks of the specs whose every check a verl defect fails, by name. Written out rather than
# read from refimpl.testing at import: refimpl.testing's specs load refimpl's flat namespace, which
# loads this package (tests/test_frameworks.py checks the lists against refimpl.testing.check_names).
SPEC_CHECKS: dict[str, tuple[str, ...]] = {
    "masked_is": (
        "agrees_with_reference",
        "on_policy_weight_is_one",
        "zero_outside_band",
        "equals_ratio_inside_band",
        "finite_and_non_negative",
        "zero_at_padding",
    ),
    "effective_sample_size": (
        "agrees_with_reference",
        "n_for_equal_weights",
        "invariant_to_scaling",
        "between_one_and_n",
    ),
}
SPEC_CHECKS["masked_is_sequence"] = SPEC_CHECKS["masked_is"]


def _every_check(spec: str, divergence: Divergence) -> dict[str, Divergence]:
    return dict.fromkeys(SPEC_CHECKS[spec], divergence)


_ESS_DIVIDES_BY_ZERO = Divergence(
    "defect",
    "With an IcePop band ('lo_hi'), a batch in which every valid token falls outside the band makes "
    "compute_is_metrics raise ZeroDivisionError: rollout_is_eff_sample_size is "
    "1.0 / masked_mean((w / (masked_mean(w) + 1e-8))**2) (rollout_corr_helper.py l.754-758), and "
    "the weights are all 0, so the training step fails instead of getting weight 0 (or an ESS of 0). "
    "The repository at commit b178a3c (0.8.0.dev) clamped the ESS weights at the band's lower "
    "bound, which kept the denominator positive; 0.9.1 clamps at 0.0.",
    draft_report=(
        "verl 0.9.1, verl/trainer/ppo/rollout_corr_helper.py, compute_is_metrics: with "
        "rollout_is_threshold='low_high' (IcePop), a batch in which every valid token's ratio "
        "falls outside [low, high] gets weights that are all 0, and the effective-sample-size "
        "metric 1.0 / masked_mean((w / (masked_mean(w) + 1e-8))**2) divides 1.0 by 0.0: the "
        "training step raises ZeroDivisionError instead of training the batch with weight 0. "
        "IcePop's masking is meant to drop such tokens, not the step; the ESS of an all-zero "
        "weight vector is 0 (or undefined, and could be reported as such). In 0.8.0.dev (commit "
        "b178a3c) the ESS weights were clamped at the band's lower bound, which kept the "
        "denominator positive; 0.9.1 clamps at 0.0. Failing input: one valid token with "
        "log-ratio 30 (clamped to 20, ρ = e^20) and the band [0, 1]."
    ),
)
_MASKED_MEAN_EPSILON = Divergence(
    "numerical limit",
    "verl_F.masked_mean divides by mask.sum() + 1e-8 (verl/utils/torch_functional.py l.308), so "
    "the mean k1 statistic of a sequence is shrunk towards 0 by a relative 1e-8/n: a geometric "
    "ratio just outside the band edge (here μ/π = 0.75 − 4e-15 for the band [0.75, 1]) is kept.",
)
_TOKEN_CLAMP_BEFORE_AGGREGATE = Divergence(
    "convention",
    "The sequence rejection statistics clamp each token's log-ratio to ±20 before they sum or "
    "average (rollout_corr_helper.py l.262-263, then _sequence_sum / _sequence_mean), so a token "
    "beyond ±20 counts as ±20 and a sequence whose true statistic is outside the band can be kept "
    "(or the reverse). refimpl's log_ratio_clamp clamps the aggregate once (as SkyRL does).",
)

#: Inputs that show the two divergences of the sequence k1 statistics in every run (tried before
#: each check's search): a token beyond −20 beside one at +20 (the per-token clamp hides it from
#: the sum and the mean), and a geometric ratio 4e-15 outside the band edge (the masked mean's
#: 1e-8). One is rarely drawn, and which check meets it first depended on the search's draws.
_CLAMP_CANCELS = [
    (
        (np.array([[20.0, -21.0]]),),
        {"low": 0.0, "high": 1.0, "mask": np.array([[1.0, 1.0]])},
    )
]
_CLAMP_OUTSIDE = [
    (
        (np.array([[0.0, 0.0, -20.0, 25.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),),
        {"low": 0.5, "high": 1.0, "mask": np.array([[1.0] * 4, [1.0, 0, 0, 0], [1.0, 0, 0, 0]])},
    )
]
_EDGE_BY_EPSILON = [
    (
        (np.array([[0.287682072451787, 0.2876820724517809], [0.0, 0.0], [0.0, 0.0]]),),
        {"low": 0.75, "high": 1.0, "mask": np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])},
    )
]

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="verl.rollout_is_token_tis",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_correction_weights",
        settings={"rollout_is": "token", "rollout_is_threshold": "cap"},
        spec="tis",
        conventions=_LOG_RATIO,
        candidate=verl_token_tis,
        note="Token TIS min(exp(clip(log ρ, ±20)), C), 0 at padding.",
    ),
    Adapter(
        key="verl.rollout_is_sequence_tis",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_correction_weights",
        settings={"rollout_is": "sequence", "rollout_is_threshold": "cap"},
        spec="tis_sequence",
        conventions={**_LOG_RATIO, "output": "BT"},
        candidate=verl_sequence_tis,
        note="Sequence TIS min(exp(clip(Σ log ρ, ±20)), C) broadcast to (B, T), 0 at padding.",
    ),
    Adapter(
        key="verl.rollout_is_token_icepop",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_correction_weights",
        settings={"rollout_is": "token", "rollout_is_threshold": "low_high"},
        spec="masked_is",
        conventions=_LOG_RATIO,
        candidate=verl_token_icepop,
        divergences=_every_check("masked_is", _ESS_DIVIDES_BY_ZERO),
        note="IcePop ρ·1[lo ≤ ρ ≤ hi] per token after the ±20 clamp; lo = 0 has no verl spelling "
        "and is passed as the smallest positive float (the same entries, given the clamp).",
    ),
    Adapter(
        key="verl.rollout_is_sequence_icepop",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_correction_weights",
        settings={"rollout_is": "sequence", "rollout_is_threshold": "low_high"},
        spec="masked_is_sequence",
        conventions={**_LOG_RATIO, "output": "BT"},
        candidate=verl_sequence_icepop,
        divergences=_every_check("masked_is_sequence", _ESS_DIVIDES_BY_ZERO),
        note="IcePop on the sequence product Πρ (clamped in log space), broadcast to (B, T).",
    ),
    Adapter(
        key="verl.rollout_rs_token_k1",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_rejection_mask",
        settings={"rollout_rs": "token_k1", "rollout_rs_threshold": "low_high"},
        spec="masked_is",
        conventions={**_LOG_RATIO, "band_on": "reciprocal", "weight": "indicator"},
        candidate=verl_token_k1_mask,
        note="A 0/1 mask keeping log lo ≤ −log ρ ≤ log hi: the band is on μ/π, although the "
        "docstring calls lo/hi 'lower/upper ratio bounds'.",
    ),
    Adapter(
        key="verl.rollout_rs_seq_mean_k1",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_rejection_mask",
        settings={"rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "low_high"},
        spec="masked_is_geometric",
        conventions={
            **_LOG_RATIO,
            "band_on": "reciprocal",
            "weight": "indicator",
            "output": "BT",
        },
        candidate=verl_seq_mean_k1_mask,
        # the epsilon's example fails both checks first; the per-token clamp (as for seq_sum_k1)
        # fails the same two checks on the clamp's examples
        divergences={
            "agrees_with_reference": _MASKED_MEAN_EPSILON,
            "zero_outside_band": _MASKED_MEAN_EPSILON,
        },
        max_examples=60,
        examples=(_EDGE_BY_EPSILON,),
        note="A sequence mask on the mean of −log ρ (a geometric band on μ/π), each token's log ρ "
        "clamped to ±20 before the mean, as for seq_sum_k1.",
    ),
    Adapter(
        key="verl.rollout_rs_seq_sum_k1",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_rejection_mask",
        settings={"rollout_rs": "seq_sum_k1", "rollout_rs_threshold": "low_high"},
        spec="masked_is_sequence",
        conventions={
            **_LOG_RATIO,
            "band_on": "reciprocal",
            "weight": "indicator",
            "output": "BT",
        },
        candidate=verl_seq_sum_k1_mask,
        divergences={
            "agrees_with_reference": _TOKEN_CLAMP_BEFORE_AGGREGATE,
            "zero_outside_band": _TOKEN_CLAMP_BEFORE_AGGREGATE,
        },
        max_examples=60,
        examples=(_CLAMP_CANCELS, _CLAMP_OUTSIDE),
        note="A sequence mask on Σ −log ρ (a band on Πμ/π), each token clamped to ±20 first.",
    ),
    Adapter(
        key="verl.rollout_correction_sequence_tis",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_correction_and_rejection_mask",
        settings={"rollout_is": "sequence", "rollout_is_threshold": "cap", "rollout_rs": None},
        spec="tis_sequence",
        conventions={
            "log_ratio_clamp": 20.0,
            "padding": "zero",
            "output": "BT",
            "empty_rows": "excluded",
        },
        candidate=verl_correction_sequence_tis,
        note="The trainer's entry point from the two log-probs; the weights come back in a "
        "DataProto under 'rollout_is_weights'.",
    ),
)


def verl_replay_buffer_mask(s: Any, *, eta: int) -> Any:
    """verl's ``ReplayBufferAsync(max_off_policy_threshold=eta, max_off_policy_strategy="drop")``: 1 = kept."""
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    buffer = ReplayBufferAsync(
        trainer_mode="async",
        trainer_config=OmegaConf.create({}),
        max_off_policy_threshold=int(eta),
        max_off_policy_strategy="drop",
        sampler_kwargs=OmegaConf.create({}),
    )
    stale = torch.as_tensor(s)
    values = [int(v) for v in stale.reshape(-1).tolist()]
    global_steps = max(values, default=0) + 1
    keys = [f"prompt{i}" for i in range(len(values))]
    buffer.finished_keys["train"] = set(keys)
    buffer.prompt_global_steps["train"] = {
        k: global_steps - v for k, v in zip(keys, values, strict=True)
    }
    dropped = buffer._stale_terminal_keys(global_steps, "train")
    flags = [0.0 if k in dropped else 1.0 for k in keys]
    return torch.tensor(flags, dtype=torch.float64).reshape(stale.shape)


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.max_off_policy_threshold",
        framework="verl",
        function="verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._stale_terminal_keys",
        settings={"max_off_policy_threshold": "eta", "max_off_policy_strategy": "drop"},
        spec="staleness_mask",
        conventions={"staleness_count": "versions_spanned"},
        candidate=verl_replay_buffer_mask,
        note="Finished groups dispatched s steps ago; dropped iff global_steps − "
        "prompt_global_steps + 1 > T: the threshold counts versions spanned.",
    ),
)


def verl_rollout_is_ess(w: Any) -> float:
    """verl's ``rollout_is_eff_sample_size`` metric of the token weights ``w`` (one row, no padding)."""
    import torch
    from verl.trainer.ppo.rollout_corr_helper import compute_is_metrics

    weights = torch.as_tensor(w).reshape(1, -1)
    mask = torch.ones_like(weights)
    metrics = compute_is_metrics(
        rollout_is_weights=weights,
        raw_rollout_is_weights=weights,
        log_ratio_for_metrics=torch.zeros_like(weights),
        response_mask=mask,
        rollout_is="token",
        rollout_is_threshold=float("inf"),  # the ESS is computed on w.clamp(0, threshold): no clip
        rollout_is_threshold_lower=None,
    )
    return float(metrics["rollout_is_eff_sample_size"])


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.rollout_is_ess",
        framework="verl",
        function=f"{_HELPER}:compute_is_metrics",
        settings={"metric": "rollout_is_eff_sample_size", "rollout_is": "token"},
        spec="effective_sample_size",
        conventions={"ess": "fraction"},
        candidate=verl_rollout_is_ess,
        divergences=_every_check(
            "effective_sample_size",
            Divergence(
                "numerical limit",
                "verl normalises by masked_mean(w) + 1e-8 (rollout_corr_helper.py l.756): equal "
                "weights give an ESS fraction of 1 + 1e-8·(1/w̄) instead of 1, slightly above its "
                "bound, and the ESS is not invariant to scaling the weights: for weights near 1e-3 "
                "(a batch that IS almost rejects) it is off by about 1e-5, for weights near 1e-8 by "
                "a factor of about 4.",
            ),
        ),
        note="1 / masked_mean((w / (masked_mean(w) + 1e-8))²): the ESS as a fraction of the tokens.",
    ),
)


def verl_dapo_overlong(
    lengths: Any, *, max_length: int, cache_length: int, penalty_factor: float
) -> Any:
    """verl's ``DAPORewardManager`` with ``overlong_buffer`` enabled, on responses of these lengths.

    The manager decodes each response with the tokenizer it is given and scores it with
    ``compute_score``; both are arguments, so a tokenizer that decodes to ``""`` and a score of 0
    leave the reward its overlong term alone (summed over the row: verl puts it on the last token).
    """
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.workers.reward_manager.dapo import DAPORewardManager

    class Tokenizer:  # the two members the reward manager reads
        eos_token = "</s>"

        def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
            return ""

    ell = [int(v) for v in torch.as_tensor(lengths).reshape(-1).tolist()]
    width = max([*ell, 1])
    prompt = torch.ones(len(ell), 1, dtype=torch.int64)  # one prompt token each
    attention = torch.tensor([[1] + [1] * n + [0] * (width - n) for n in ell], dtype=torch.int64)
    data = DataProto.from_dict(
        tensors={
            "prompts": prompt,
            "responses": torch.ones(len(ell), width, dtype=torch.int64),
            "attention_mask": attention,
        },
        non_tensors={
            "reward_model": np.array([{"ground_truth": ""} for _ in ell], dtype=object),
            "data_source": np.array(["refimpl"] * len(ell), dtype=object),
        },
    )
    manager = DAPORewardManager(
        tokenizer=Tokenizer(),
        num_examine=0,
        compute_score=lambda **_: 0.0,
        max_resp_len=int(max_length),
        overlong_buffer_cfg=OmegaConf.create(
            {
                "enable": True,
                "len": int(cache_length),
                "penalty_factor": float(penalty_factor),
                "log": False,
            }
        ),
    )
    return manager(data).sum(dim=-1).to(torch.float64)


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.dapo_overlong_reward",
        framework="verl",
        function="verl.workers.reward_manager.dapo:DAPORewardManager",
        settings={
            "reward_model.reward_manager": "dapo",
            "overlong_buffer.enable": True,
            "overlong_buffer.len": "cache_length",
            "overlong_buffer.penalty_factor": "penalty_factor",
            "max_response_length": "max_length",
        },
        spec="dapo_overlong",
        conventions={"floor": False},
        candidate=verl_dapo_overlong,
        divergences={
            "agrees_with_reference": Divergence(
                "numerical limit",
                "The reward manager writes each reward into a float32 tensor (reward_tensor = "
                "torch.zeros_like(responses, dtype=torch.float32), workers/reward_manager/dapo.py), "
                "so the overlong term is rounded to float32: off by about 1e-8 relative.",
            )
        },
        note="The reward manager itself, with a tokenizer object that decodes to '' and a score of "
        "0 passed as its arguments (no module stubbed): the reward is the overlong term "
        "min(−(ℓ − (L_max − L_buf))/L_buf · factor, 0), with no floor below −factor.",
    ),
)


# Rollout rejection on a k2/k3 statistic (rollout_corr_helper.py:compute_rollout_rejection_mask):
# log_ratio clamped to ±20, token_k2 = 0.5·lr², token_k3 = exp(lr) − 1 − lr, a sequence's masked
# sum / mean (÷ n + 1e-8) / max, kept iff statistic <= rollout_rs_threshold; the mask returned is
# response_mask × keep. Each candidate computes the log-ratio as the trainer does
# (compute_rollout_correction_and_rejection_mask: old_log_prob − rollout_log_prob).


def verl_rollout_rs_token_k2(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="token_k2"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior, mask, rollout_rs="token_k2", rollout_rs_threshold=float(upper)
    )
    return kept


def verl_rollout_rs_token_k3(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="token_k3"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior, mask, rollout_rs="token_k3", rollout_rs_threshold=float(upper)
    )
    return kept


def verl_rollout_rs_seq_sum_k2(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="seq_sum_k2"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior,
        mask,
        rollout_rs="seq_sum_k2",
        rollout_rs_threshold=float(upper),
    )
    return kept


def verl_rollout_rs_seq_sum_k3(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="seq_sum_k3"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior,
        mask,
        rollout_rs="seq_sum_k3",
        rollout_rs_threshold=float(upper),
    )
    return kept


def verl_rollout_rs_seq_mean_k2(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="seq_mean_k2"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior,
        mask,
        rollout_rs="seq_mean_k2",
        rollout_rs_threshold=float(upper),
    )
    return kept


def verl_rollout_rs_seq_mean_k3(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="seq_mean_k3"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior,
        mask,
        rollout_rs="seq_mean_k3",
        rollout_rs_threshold=float(upper),
    )
    return kept


def verl_rollout_rs_seq_max_k2(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="seq_max_k2"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior,
        mask,
        rollout_rs="seq_max_k2",
        rollout_rs_threshold=float(upper),
    )
    return kept


def verl_rollout_rs_seq_max_k3(
    logp_target: Any, logp_behavior: Any, *, upper: float, mask: Any
) -> Any:
    """verl ``rollout_rs="seq_max_k3"``, ``rollout_rs_threshold=upper``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    kept, _ = compute_rollout_rejection_mask(
        logp_target - logp_behavior,
        mask,
        rollout_rs="seq_max_k3",
        rollout_rs_threshold=float(upper),
    )
    return kept


_MEAN_EPSILON_KEEPS = Divergence(
    "numerical limit",
    "verl_F.masked_mean divides by mask.sum() + 1e-8 (verl/utils/torch_functional.py l.308), so a "
    "sequence's mean k2/k3 statistic is shrunk by a relative 1e-8/n: a sequence whose mean is "
    "above the threshold by less than that (here one token with log ρ = 1, the threshold 1e-10 "
    "below its statistic) is kept.",
)
#: One token with log ρ = 1 (k2 = 0.5, k3 = e − 2) and a threshold 1e-10 below its statistic:
#: rejected by the exact mean, kept by verl's mean over n + 1e-8. Rarely drawn, so pinned.
_MEAN_EDGE_K2 = [
    ((np.array([[-0.5]]), np.array([[-1.5]])), {"upper": 0.4999999999, "mask": np.array([[1.0]])})
]
_MEAN_EDGE_K3 = [
    ((np.array([[-0.5]]), np.array([[-1.5]])), {"upper": 0.7182818284, "mask": np.array([[1.0]])})
]
#: every check that compares the mask meets the pinned input first
_MEAN_DIVERGENCES = dict.fromkeys(("values", "padding_ignored", "empty_rows"), _MEAN_EPSILON_KEEPS)


def _rollout_rs(option: str, candidate: Any, **extra: Any) -> Adapter:
    """The adapter of one k2/k3 ``rollout_rs`` option (``token_k2``, ``seq_mean_k3``, …)."""
    level, estimator = option.rsplit("_", 1)
    reduce = "token" if level == "token" else level.removeprefix("seq_")
    statistic = "each token's" if reduce == "token" else f"the sequence's {reduce} of the token"
    return Adapter(
        key=f"verl.rollout_rs_{option}",
        framework="verl",
        function=f"{_HELPER}:compute_rollout_rejection_mask",
        settings={"rollout_rs": option, "rollout_rs_threshold": "upper"},
        spec="divergence_rejection_mask",
        conventions={"estimator": estimator, "reduce": reduce, "log_ratio_clamp": 20.0},
        candidate=candidate,
        note=f"A 0/1 mask keeping {statistic} {estimator} <= upper, each log ρ clamped to ±20.",
        **extra,
    )


ADAPTERS = (
    *ADAPTERS,
    _rollout_rs("token_k2", verl_rollout_rs_token_k2),
    _rollout_rs("token_k3", verl_rollout_rs_token_k3),
    _rollout_rs("seq_sum_k2", verl_rollout_rs_seq_sum_k2),
    _rollout_rs("seq_sum_k3", verl_rollout_rs_seq_sum_k3),
    _rollout_rs(
        "seq_mean_k2",
        verl_rollout_rs_seq_mean_k2,
        examples=(_MEAN_EDGE_K2,),
        divergences=_MEAN_DIVERGENCES,
    ),
    _rollout_rs(
        "seq_mean_k3",
        verl_rollout_rs_seq_mean_k3,
        examples=(_MEAN_EDGE_K3,),
        divergences=_MEAN_DIVERGENCES,
    ),
    _rollout_rs("seq_max_k2", verl_rollout_rs_seq_max_k2),
    _rollout_rs("seq_max_k3", verl_rollout_rs_seq_max_k3),
)
