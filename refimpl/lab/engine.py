"""Section: what an inference engine does to length bias and staleness.

Simulation only (:func:`refimpl.sim.simulate_engine`): the same asynchronous runs with the slots
replaced by an engine under a KV-cache budget. Three effects: memory pressure preempts the long
rollouts more often (newest first, and a long rollout is in flight longer); prefix sharing within a
GRPO group frees memory, so fewer preemptions delay the long ones; a weight update that keeps or
recomputes the KV of rollouts in flight turns whole-sequence staleness into per-token staleness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import refimpl.sim as rsim
from refimpl.lab._common import discretized_lognormal, seed
from refimpl.lab._plot import COLORS, new_figure
from refimpl.lab.config import LabConfig
from refimpl.lab.report import Section

__all__ = ["build"]

STREAM = 8
EXACT = "exact: an accounting identity of the engine (tolerance 1e-9 relative)"


def _sizes(config: LabConfig) -> dict[str, Any]:
    if config.quick:  # the plain-Python engine: no compilation inside the quick lab
        return {"slots": 16, "batch": 32, "steps": 14, "median": 55.0, "engine": "event"}
    return {"slots": 64, "batch": 128, "steps": 60, "median": 148.0, "engine": "auto"}


def _run(config: LabConfig, model: Any, index: int, **kw: Any) -> Any:
    z = _sizes(config)
    cfg = rsim.SimConfig(
        slots=z["slots"],
        batch=z["batch"],
        steps=z["steps"],
        # a response cap (max_tokens) of 8 medians, as every engine has: a KV budget must hold the
        # longest rollout once
        lengths=discretized_lognormal(
            median=z["median"], sigma=1.0, max_length=8 * int(z["median"])
        ),
        seed=seed(config, STREAM, index),
        engine_model=model,
        **kw,
    )
    return rsim.simulate_engine(cfg, engine=z["engine"])


def _quartiles(trace: Any, values: Any) -> tuple[list[float], list[float]]:
    """Mean of ``values`` over the trained rollouts, by length quartile (and the quartiles' edges)."""
    order = trace.training_order()
    lengths = np.asarray(trace.length)[order]
    v = np.asarray(values, dtype=np.float64)[order]
    edges = np.quantile(lengths, [0.0, 0.25, 0.5, 0.75, 1.0])
    which = np.clip(np.searchsorted(edges, lengths, side="right") - 1, 0, 3)
    return [float(v[which == q].mean()) for q in range(4)], edges.tolist()


def _budget(config: LabConfig, tokens_per_slot: float) -> int:
    """Bytes of KV for ``tokens_per_slot`` tokens a slot (the default model's 57344 B a token)."""
    return int(tokens_per_slot * _sizes(config)["slots"] * 57344)


def _memory(section: Section, config: LabConfig, progress: Callable[[str], None], ax: Any) -> None:
    median = _sizes(config)["median"]
    progress("engine: unbounded memory and a tight KV budget")
    free = _run(config, rsim.EngineModel(), 0)
    tight = _run(config, rsim.EngineModel(kv_memory_bytes=_budget(config, median)), 1)
    slots = _sizes(config)["slots"]
    section.check(
        "unbounded-batch",
        "sequences per step, unbounded memory (every seat busy)",
        closed_form=float(slots),
        simulation=free.stats.batch_mean,
        tolerance=1e-9 * slots,
        rule=EXACT,
    )
    pre, edges = _quartiles(tight.trace, np.asarray(tight.trace.recomputed_tokens) > 0)
    stale_free, _ = _quartiles(free.trace, free.trace.staleness)
    stale_tight, _ = _quartiles(tight.trace, tight.trace.staleness)
    section.metric("preempted_by_quartile", pre)
    section.metric("staleness_by_quartile", {"unbounded": stale_free, "tight": stale_tight})
    s_free, s_tight = free.trace.summary(), tight.trace.summary()
    section.metric(
        "memory",
        {
            "batch_unbounded": free.stats.batch_mean,
            "batch_tight": tight.stats.batch_mean,
            "preemptions": tight.stats.preemptions,
            "length_ratio_unbounded": float(s_free.length_bias.ratio),
            "length_ratio_tight": float(s_tight.length_bias.ratio),
            "preempted_shortest": pre[0],
            "preempted_longest": pre[3],
        },
    )
    x = np.arange(4)
    ax.bar(x, pre, color=COLORS[1], label="preempted at least once (tight budget)")
    ax2 = ax.twinx()
    ax2.plot(x, stale_free, "o-", color=COLORS[0], label="staleness, unbounded")
    ax2.plot(x, stale_tight, "s--", color=COLORS[3], label="staleness, tight budget")
    ax2.set_ylabel("mean staleness (steps)")
    ax.set_xticks(x, [f"{edges[q]:.0f}–{edges[q + 1]:.0f}" for q in range(4)])
    ax.set_xlabel("length quartile (tokens)")
    ax.set_ylabel("fraction of trained rollouts")
    ax.set_title("Memory pressure preempts the long")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    _legend_under(ax, handles)


def _legend_under(ax: Any, handles: list[Any]) -> None:
    """The panel's legend under its axis label, where it cannot cover bars or lines."""
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


def _prefix(section: Section, config: LabConfig, progress: Callable[[str], None], ax: Any) -> None:
    median = _sizes(config)["median"]
    progress("engine: prefix sharing within GRPO groups")
    runs = {}
    for i, share in enumerate((True, False)):
        model = rsim.EngineModel(
            kv_memory_bytes=_budget(config, 3 * median),
            prompt_tokens=int(2 * median),
            group_size=8,
            prefix_sharing=share,
        )
        runs[share] = _run(config, model, 10 + i)
    rows = {}
    for share, run in runs.items():
        t = run.trace
        latency = np.asarray(t.finish_time) - np.asarray(t.launch_time)
        rows[share], edges = _quartiles(t, latency)
        ax.plot(
            np.arange(4),
            rows[share],
            "o-" if share else "s--",
            color=COLORS[0] if share else COLORS[1],
            label="prompt blocks shared in the group" if share else "each sample its own prompt",
        )
    on, off = runs[True], runs[False]
    section.metric(
        "prefix",
        {
            "blocks_saved_mean": on.stats.prefix_blocks_saved_mean,
            "prefill_tokens_saved": on.stats.prefix_hit_tokens_group,
            "preemptions_shared": on.stats.preemptions,
            "preemptions_unshared": off.stats.preemptions,
            "latency_longest_shared": rows[True][3],
            "latency_longest_unshared": rows[False][3],
            "throughput_shared": on.trace.summary().throughput,
            "throughput_unshared": off.trace.summary().throughput,
        },
    )
    ax.set_xticks(np.arange(4), [f"{edges[q]:.0f}–{edges[q + 1]:.0f}" for q in range(4)])
    ax.set_xlabel("length quartile (tokens)")
    ax.set_ylabel("launch to finish (steps)")
    ax.set_title("Prefix sharing: the long finish sooner")
    _legend_under(ax, ax.get_legend_handles_labels()[0])


def _interruption(section: Section, config: LabConfig, progress: Callable[[str], None], ax: Any) -> None:  # fmt: skip
    progress("engine: a weight update mid-rollout (restart, recompute, keep the KV)")
    median = _sizes(config)["median"]
    model = rsim.EngineModel(layers=48, moe_layers=48, top_k=8)  # Qwen3-30B-A3B's KV and routing
    bytes_per_token = model.kv_bytes_per_token + model.routing_bytes_per_token
    rows = []
    for i, policy in enumerate(("none", "restart", "recompute", "keep_kv")):
        run = _run(config, model, 20 + i, partial=policy, trainer_time=median)
        s, st = run.trace.summary(), run.stats
        moved = (
            st.interruption_bytes_discarded
            + st.interruption_bytes_recomputed
            + st.interruption_bytes_kept
        )
        order = run.trace.training_order()
        lengths = np.asarray(run.trace.length)[order]
        per_token = float(np.dot(lengths, run.trace.staleness[order]) / lengths.sum())
        rows.append(
            (policy, s.staleness_mean, per_token, s.token_staleness_mean, s.wasted_tokens, moved)
        )
        if policy == "none":
            section.check(
                "one-version-per-rollout",
                "token staleness without interruption (= its sequence's, token-weighted)",
                closed_form=per_token,
                simulation=s.token_staleness_mean,
                tolerance=1e-9 * max(per_token, 1.0),
                rule=EXACT,
            )
        else:
            section.check(
                f"bytes-{policy}",
                f"bytes {policy} handles (context tokens x (KV + routing bytes))",
                closed_form=st.interrupted_context_tokens * bytes_per_token,
                simulation=moved,
                tolerance=1e-9 * max(moved, 1.0),
                rule=EXACT,
            )
    section.table(
        "interruption",
        "A weight update reaching the rollouts in flight",
        (
            "policy",
            "sample staleness",
            "sequence staleness per token",
            "token staleness",
            "tokens wasted",
            "bytes handled",
        ),
        rows,
        note="sample staleness: per rollout, the oldest token decides; sequence staleness per "
        "token: each token charged its rollout's staleness (what a bound on sequences sees), "
        "weighted by tokens; token staleness: each token counts the version that produced it. "
        "Bytes handled: KV and expert routing of the interrupted rollouts, discarded (restart), "
        "rebuilt (recompute) or kept (keep_kv).",
    )
    keep = rows[3]
    section.metric("keep_kv", {"sequence": keep[2], "token": keep[3]})
    x = np.arange(4)
    seq = [r[2] for r in rows]
    ax.bar(x - 0.2, seq, width=0.4, color=COLORS[0], label="sequence staleness, per token")
    ax.bar(x + 0.2, [r[3] for r in rows], width=0.4, color=COLORS[2], label="token staleness")
    # two rows of tick labels: "recompute" and "keep_kv" run together on one at this width
    ax.set_xticks(x, [f"{r[0]}" if i % 2 == 0 else f"\n{r[0]}" for i, r in enumerate(rows)])
    ax.set_ylabel("mean staleness (steps)")
    ax.set_title("Interruption: sequence to token staleness")
    _legend_under(ax, ax.get_legend_handles_labels()[0])


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the engine section."""
    section.text(
        "The slot mode runs each rollout in a slot of its own; an inference engine runs as many "
        "as its KV cache holds, preempts the newest when memory runs out, shares a GRPO group's "
        "prompt blocks, and must decide what a weight update does to the rollouts in flight. "
        "Each panel runs the same asynchronous setting in the engine mode "
        "(`refimpl.sim.simulate_engine`)."
    )
    fig, (a1, a2, a3) = new_figure(3, height=5.2)
    _memory(section, config, progress, a1)
    _prefix(section, config, progress, a2)
    _interruption(section, config, progress, a3)
    m = section.metrics["memory"]
    section.headline(
        f"under a tight KV budget the longest quarter of rollouts is preempted "
        f"{100 * m['preempted_longest']:.0f}% of the time, the shortest "
        f"{100 * m['preempted_shortest']:.0f}%."
    )
    section.takeaway(
        "A tight KV budget preempts {memory.preempted_longest:%} of the longest quarter of the "
        "rollouts and {memory.preempted_shortest:%} of the shortest; sharing a group's prompt "
        "saves {prefix.blocks_saved_mean} blocks on average; keeping the KV at a weight update "
        "gives a token staleness of {keep_kv.token} where the sequences' staleness charges each "
        "token {keep_kv.sequence}.",
        "Under memory pressure the engine, not only the dispatch, decides which rollouts wait: "
        "the long ones are preempted most; and a staleness bound on sequences overstates how "
        "stale the tokens of interrupted rollouts are.",
    )
    section.figure(
        fig,
        "engine",
        "Left: the fraction of trained rollouts preempted at least once under a tight KV budget, "
        "by length quartile (bars), and their mean staleness with unbounded memory and under the "
        "budget (lines). Middle: launch-to-finish time by length quartile with the group's prompt "
        "blocks shared or not (sharing leaves more memory, so fewer preemptions). Right: without "
        "interruption each token carries its sequence's staleness; recomputing or keeping the KV "
        "gives the tokens generated after the update the new version, so token staleness falls "
        "below the sequences' (restart leaves one version per rollout, and wastes the tokens).",
    )
