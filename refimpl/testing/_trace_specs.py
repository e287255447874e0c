"""The table of ``refimpl check``'s specs: for each, its reference, columns, parameters and
tolerance rule (see :mod:`refimpl.testing.check_cli` for the command)."""

from __future__ import annotations

import importlib
import math
from types import ModuleType

import numpy as np

from refimpl.testing import _trace_batches as batches
from refimpl.testing import _trace_loss_params as loss_params
from refimpl.testing import _trace_loss_rows as loss_rows
from refimpl.testing._trace_lists import sequence_band_probe, sequence_condition, sequence_weights
from refimpl.testing._trace_spec import (
    _correct,
    _effort_condition,
    _elementwise,
    _l1_condition,
    _mis_edge,
    _ratio_condition,
    _scaled_lengths,
    _staleness_expected,
    _TraceSpec,
)


def _losses() -> ModuleType:
    """:mod:`refimpl.testing._trace_losses`, loaded when a ``policy_loss`` trace is checked (the
    other specs' checks start faster without it)."""
    return importlib.import_module("refimpl.testing._trace_losses")


SPECS: dict[str, _TraceSpec] = {
    s.name: s
    for s in (
        _TraceSpec(
            name="staleness_mask",
            reference="staleness_mask",
            inputs=("staleness",),
            found="weight",
            params={"eta": int},
            expected=lambda r, c, p: r.staleness_mask(c["staleness"], **p),
            probe=lambda r, p: r.staleness_mask([0], **p),
            options={"staleness_count": str},
            rowwise=True,
        ),
        _TraceSpec(
            name="tis",
            reference="truncated_is_weights",
            inputs=("logp_target", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: r.truncated_is_weights(
                c["logp_target"], c["logp_behavior"], **p
            ),
            probe=lambda r, p: r.truncated_is_weights([0.0], [0.0], **p),
            options={"lower": float, "log_ratio_clamp": float},
            condition=_ratio_condition,
            notes="token level: one row per token",
            rowwise=True,
        ),
        _TraceSpec(
            name="masked_is",
            reference="masked_is_weights",
            inputs=("logp_target", "logp_behavior"),
            found="weight",
            params={"low": float, "high": float},
            expected=lambda r, c, p: r.masked_is_weights(c["logp_target"], c["logp_behavior"], **p),
            probe=lambda r, p: r.masked_is_weights([0.0], [0.0], **p),
            options={"band_on": str, "weight": str, "log_ratio_clamp": float},
            condition=_ratio_condition,
            either=_mis_edge,
            notes="token level; a ratio at a band edge (to 1e-9) may be kept or dropped",
        ),
        _TraceSpec(
            name="effort_penalty",
            reference="effort_penalty",
            inputs=("b",),
            found="penalty",
            params={"k0": float, "b_min": float, "tau": float},
            expected=lambda r, c, p: r.effort_penalty(c["b"], **p),
            probe=lambda r, p: r.effort_penalty([p["b_min"]], **p),
            condition=_effort_condition,
        ),
        _TraceSpec(
            name="inclusion_probability",
            reference="inclusion_probability",
            inputs=("cdf",),
            found="pi",
            params={"n": int, "k": int},
            expected=lambda r, c, p: r.inclusion_probability(c["cdf"], **p),
            probe=lambda r, p: r.inclusion_probability([0.5], **p),
            condition=lambda c, p, e: p["n"] * (np.abs(e) + 1e-3),
        ),
        _TraceSpec(
            name="staleness",
            reference="sample_staleness",
            inputs=("trained_step", "min_version"),
            found="staleness",
            params={},
            expected=_staleness_expected,
            probe=lambda r, p: None,
            notes="s = trained_step − oldest token version; versions may be a list per row",
            exact=True,
        ),
        _TraceSpec(
            name="decoupled_ppo",
            reference="decoupled_ppo_weights",
            inputs=("logp_prox", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: r.decoupled_ppo_weights(
                c["logp_prox"], c["logp_behavior"], **p
            ),
            probe=lambda r, p: r.decoupled_ppo_weights([0.0], [0.0], **p),
            options={"above_cap": str, "lower": float, "log_ratio_clamp": float},
            condition=_ratio_condition,
            notes="token level: one row per token (AReaL's behaviour weight)",
        ),
        _TraceSpec(
            name="tis_sequence",
            reference="truncated_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: sequence_weights(r, c, p, "truncated_is_weights", "sequence"),
            probe=lambda r, p: r.truncated_is_weights([0.0], [0.0], **p),
            options={"lower": float, "log_ratio_clamp": float},
            condition=sequence_condition(mean=False),
            notes="one row per sequence: lists of its valid tokens' log-probabilities",
        ),
        _TraceSpec(
            name="tis_geometric",
            reference="truncated_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: sequence_weights(r, c, p, "truncated_is_weights", "geometric"),
            probe=lambda r, p: r.truncated_is_weights([0.0], [0.0], **p),
            options={"lower": float, "log_ratio_clamp": float},
            condition=sequence_condition(mean=True),
            notes="one row per sequence: lists of its valid tokens' log-probabilities",
        ),
        _TraceSpec(
            name="masked_is_sequence",
            reference="masked_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"low": float, "high": float},
            expected=lambda r, c, p: sequence_weights(r, c, p, "masked_is_weights", "sequence"),
            probe=sequence_band_probe,
            options={"band_on": str, "weight": str, "log_ratio_clamp": float},
            condition=sequence_condition(mean=False),
            notes="one row per sequence; a ratio at a band edge (to rounding) may be kept or dropped",
        ),
        _TraceSpec(
            name="masked_is_geometric",
            reference="masked_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"low": float, "high": float},
            expected=lambda r, c, p: sequence_weights(r, c, p, "masked_is_weights", "geometric"),
            probe=sequence_band_probe,
            options={"band_on": str, "weight": str, "log_ratio_clamp": float},
            condition=sequence_condition(mean=True),
            notes="one row per sequence; a ratio at a band edge (to rounding) may be kept or dropped",
        ),
        _TraceSpec(
            name="staleness_decay",
            reference="staleness_decay",
            inputs=("staleness",),
            found="weight",
            params={"gamma": float},
            expected=lambda r, c, p: r.staleness_decay(c["staleness"], **p),
            probe=lambda r, p: r.staleness_decay([0], **p),
            condition=lambda c, p, e: (
                (np.abs(c["staleness"] * math.log(p["gamma"])) + np.abs(c["staleness"]) + 3)
                * np.abs(e)
            ),
        ),
        _TraceSpec(
            name="admission_capacity",
            reference="admission_capacity",
            inputs=("version", "accepted", "running"),
            found="capacity",
            params={"eta": int, "batch": int, "max_concurrent": int},
            expected=lambda r, c, p: np.array(
                [
                    float(
                        r.admission_capacity(version=int(v), accepted=int(a), running=int(n), **p)
                    )
                    for v, a, n in zip(c["version"], c["accepted"], c["running"], strict=True)
                ]
            ),
            probe=lambda r, p: r.admission_capacity(version=0, accepted=0, running=0, **p),
            options={"staleness_count": str},
            notes="one row per admission decision; counts compared exactly",
        ),
        _TraceSpec(
            name="shaped_reward",
            reference="shaped_reward",
            inputs=("quality", "length", "b"),
            found="reward",
            params={"k0": float, "b_min": float, "tau": float},
            expected=lambda r, c, p: r.shaped_reward(c["quality"], c["length"], c["b"], **p),
            probe=lambda r, p: r.shaped_reward([0.0], [0.0], [p["b_min"]], **p),
            options={"length_scale": float},
            condition=_elementwise("quality", "length", "b"),
        ),
        _TraceSpec(
            name="dapo_overlong",
            reference="dapo_overlong_penalty",
            inputs=("length",),
            found="penalty",
            params={"max_length": float, "cache_length": float},
            expected=lambda r, c, p: r.dapo_overlong_penalty(
                c["length"], **{k: (bool(v) if k == "floor" else v) for k, v in p.items()}
            ),
            probe=lambda r, p: r.dapo_overlong_penalty(
                [0.0], **{k: (bool(v) if k == "floor" else v) for k, v in p.items()}
            ),
            options={"floor": int, "penalty_factor": float},
            condition=_scaled_lengths,
            notes="--param floor=0 for verl's and AReaL's unfloored ramp",
        ),
        _TraceSpec(
            name="cosine_length_reward",
            reference="cosine_length_reward",
            inputs=("length", "correct"),
            found="reward",
            params={"max_length": float},
            expected=lambda r, c, p: r.cosine_length_reward(c["length"], _correct(c), **p),
            probe=lambda r, p: r.cosine_length_reward([0.0], [True], **p),
            options={
                "min_value_wrong": float,
                "max_value_wrong": float,
                "min_value_correct": float,
                "max_value_correct": float,
            },
            condition=lambda c, p, e: (
                np.pi * (np.abs(c["length"]) / p["max_length"] + 1) + np.abs(e) + 2
            ),
        ),
        _TraceSpec(
            name="l1_exact",
            reference="l1_exact_reward",
            inputs=("length", "correct", "target_length"),
            found="reward",
            params={},
            expected=lambda r, c, p: r.l1_exact_reward(
                c["length"], _correct(c), c["target_length"], **p
            ),
            probe=lambda r, p: r.l1_exact_reward([0.0], [True], [1.0], **p),
            options={"alpha": float},
            condition=_l1_condition,
        ),
        _TraceSpec(
            name="l1_max",
            reference="l1_max_reward",
            inputs=("length", "correct", "target_length"),
            found="reward",
            params={},
            expected=lambda r, c, p: r.l1_max_reward(
                c["length"], _correct(c), c["target_length"], **p
            ),
            probe=lambda r, p: r.l1_max_reward([0.0], [True], [1.0], **p),
            options={"alpha": float, "delta": float},
            condition=_l1_condition,
        ),
        _TraceSpec(
            name="effective_sample_size",
            reference="effective_sample_size",
            inputs=(),
            lists=("weight",),
            found="ess",
            params={},
            expected=batches.ess_expected,
            probe=batches.probe_ess,
            options={"ess": str},
            condition=batches.ess_condition,
            notes="one row per batch: the list of its weights; ess=fraction for (Σw)²/(nΣw²)",
        ),
        _TraceSpec(
            name="masking_diagnostics",
            reference="masking_diagnostics",
            inputs=(),
            lists=("staleness", "weight"),
            found="kept_fraction",
            params={},
            expected=batches.diagnostics_expected,
            probe=batches.probe_diagnostics,
            options={"statistic": str, "ess": str},
            condition=batches.diagnostics_condition,
            found_from="statistic",
            found_choices=batches.DIAGNOSTIC_FIELDS,
            notes="one row per batch: lists of its staleness and weights; --param statistic= "
            "names the logged diagnostic (kept_fraction by default)",
        ),
        _TraceSpec(
            name="kimi_length_reward",
            reference="kimi_length_reward",
            inputs=(),
            lists=("length", "correct"),
            found="reward",
            params={},
            expected=batches.kimi_expected,
            probe=batches.probe_kimi,
            options={"scope": str},
            condition=batches.kimi_condition,
            found_list=True,
            notes="one row per problem: lists of its responses' lengths, correctness and rewards",
        ),
        _TraceSpec(
            name="vtrace",
            reference="vtrace",
            inputs=(),
            lists=batches.VTRACE_INPUTS,
            found="errors",
            params={},
            expected=batches.vtrace_expected,
            probe=batches.probe_vtrace,
            options={"output": str, **dict.fromkeys(batches.VTRACE_OPTIONS, float)},
            condition=batches.vtrace_condition,
            found_list=True,
            found_from="output",
            found_choices=batches.VTRACE_OUTPUTS,
            notes="one row per trajectory: lists over time; --param output= names the logged "
            "output (errors by default, pg_advantage, q_estimate)",
        ),
        _TraceSpec(
            name="policy_loss",
            reference="losses",
            inputs=(loss_rows.STEP, loss_rows.ADV),
            lists=(loss_rows.LOGP, loss_rows.OLD),
            optional=(loss_rows.MASK, loss_rows.MICRO, loss_rows.REF),
            found=loss_rows.LOSS,
            params=loss_params.PARAMS,
            options=loss_params.OPTIONS,
            expected=lambda r, c, p: _losses().policy_loss_expected(r, c, p),
            probe=lambda r, p: _losses().policy_loss_probe(r, p),
            condition=lambda c, p, e: _losses().policy_loss_condition(c, p, e),
            layout=lambda t, f, m, p: _losses().policy_loss_columns(t, f, m, p),
            regroup=lambda chunks, r, p: _losses().policy_loss_units(chunks, r, p),
            unit="logged losses",
            notes="one row per sequence (token lists); the loss of each step (or micro-batch) "
            "is recomputed with refimpl.losses and compared",
        ),
    )
}

#: The trace-only specs: those with no conformance spec of the same name in
#: :func:`refimpl.testing.spec_names` (every other spec has one). ``policy_loss`` checks a logged
#: scalar loss; the per-surrogate value and gradient it is built on are the loss conformance specs,
#: ``spec_names(losses=True)``.
TRACE_ONLY: tuple[str, ...] = ("policy_loss",)
