"""The sections of the lab in report order, the library names each needs, and its docs pages."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from refimpl._imports import find_object, import_object
from refimpl.lab.config import LabConfig
from refimpl.lab.report import DocLink, Section

__all__ = ["SECTIONS", "SectionSpec", "missing_names"]

Progress = Callable[[str], None]
Build = Callable[[Section, LabConfig, Progress], None]


class SectionSpec(NamedTuple):
    """A section: its key (figure prefix, metrics key), title, module, requirements and docs."""

    key: str
    title: str
    module: str
    requires: tuple[str, ...]
    docs: tuple[DocLink, ...]

    def build_function(self) -> Build:
        # The section modules import matplotlib: loaded only when the lab runs that section.
        build: Build = import_object(f"{self.module}:build", what="lab section")
        return build


def missing_names(requires: tuple[str, ...]) -> list[str]:
    """The required ``module.name`` strings that this installation does not provide.

    Examples
    --------
    >>> missing_names(("refimpl.lab.config.lab_config", "refimpl.lab.config.nope"))
    ['refimpl.lab.config.nope']
    """
    return [dotted for dotted in requires if find_object(dotted) is None]


# the names that train the toy policy on the simulator's batches: async-worth's fair verdict
# calls these, and the learning section calls them with the rest of _LEARNING_REQUIRES
_TRAINING_REQUIRES = (
    "refimpl.learning.hazard_length_pmf",
    "refimpl.learning.length_features",
    "refimpl.learning.length_gradient",
    "refimpl.learning.mean_reward",
    "refimpl.learning.policy_gradient",
    "refimpl.learning.stop_hazard",
    "refimpl.learning.token_scores",
    "refimpl.learning.train_policy",
    "refimpl.sim.STATUS",
    "refimpl.sim.SimConfig",
    "refimpl.sim.simulate",
)
# the names the learning section calls
_LEARNING_REQUIRES = (
    "refimpl.fluid_keep_probability",
    "refimpl.inclusion_probability_pmf",
    "refimpl.learning.async_gradient",
    "refimpl.learning.corrected_scores",
    "refimpl.learning.async_gradient_exact",
    "refimpl.learning.estimator_bias",
    "refimpl.learning.estimator_status",
    "refimpl.learning.expected_length",
    "refimpl.learning.first_k_carry_gradient",
    "refimpl.learning.first_k_gradient",
    "refimpl.learning.fluid_staleness_pmf",
    "refimpl.learning.fluid_step_time",
    "refimpl.learning.gradient_bias",
    "refimpl.learning.hazard_length_pmf",
    "refimpl.learning.length_features",
    "refimpl.learning.length_gradient",
    "refimpl.learning.mean_reward",
    "refimpl.learning.policy_gradient",
    "refimpl.learning.stop_hazard",
    "refimpl.learning.token_scores",
    "refimpl.learning.train_policy",
    "refimpl.learning_async.chi_square_check",
    "refimpl.learning_async.continuous_dispatch_law",
    "refimpl.learning_async.simulated_dispatch_cells",
    "refimpl.sim.STATUS",
    "refimpl.sim.SimConfig",
    "refimpl.sim.simulate",
)


_WALK = DocLink("howto/lab-walkthrough", "Lab walkthrough")

SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec(
        key="length-bias",
        title="Length bias of dispatch",
        module="refimpl.lab.length_bias",
        requires=(
            "refimpl.fluid_steady_state",
            "refimpl.length_bias",
            "refimpl.selected_pmf",
            "refimpl.sim.SimConfig",
            "refimpl.sim.simulate",
        ),
        docs=(
            DocLink("concepts/length-bias", "The length bias of dispatch"),
            DocLink("derivations/length_bias", "Length-bias derivations (first k of n)"),
            DocLink("derivations/fluid", "Fluid model of continuous dispatch"),
            DocLink("concepts/sim-sync-first-k", "Simulating synchronous and first-k dispatch"),
            DocLink(
                "concepts/sim-async-admission",
                "Simulating asynchronous dispatch and admission control",
            ),
            _WALK,
        ),
    ),
    SectionSpec(
        key="staleness",
        title="Staleness masking and its corrections",
        module="refimpl.lab.staleness_masking",
        requires=(
            "refimpl.clipped_ipw_estimate",
            "refimpl.fluid_keep_probability",
            "refimpl.fluid_steady_state",
            "refimpl.hajek_estimate",
            "refimpl.horvitz_thompson_estimate",
            "refimpl.inclusion_probability_pmf",
            "refimpl.ipw_estimator_moments",
            "refimpl.ipw_weights",
            "refimpl.selected_pmf",
            "refimpl.sim.STATUS",
            "refimpl.sim.SimConfig",
            "refimpl.sim.simulate",
        ),
        docs=(
            DocLink("concepts/staleness", "Staleness, masks and importance weights"),
            DocLink(
                "concepts/sim-staleness-partial",
                "Simulating the staleness bound, partial rollouts and preemption",
            ),
            DocLink("derivations/importance", "Importance-weight derivations"),
            DocLink(
                "concepts/length-bias",
                "The length bias of dispatch: masking turns staleness into length bias",
            ),
            DocLink("derivations/fluid", "Fluid model of continuous dispatch"),
            _WALK,
        ),
    ),
    SectionSpec(
        key="effort",
        title="Effort conditioning: k(b), L*(b), the frontier, and a mix of problems",
        module="refimpl.lab.effort",
        requires=(
            "refimpl.adaptive_gap",
            "refimpl.budget_frontier",
            "refimpl.cosine_length_reward",
            "refimpl.dapo_overlong_penalty",
            "refimpl.difficulty_mix",
            "refimpl.effort_frontier",
            "refimpl.effort_penalty",
            "refimpl.frontier_quality",
            "refimpl.kimi_length_reward",
            "refimpl.l1_exact_reward",
            "refimpl.l1_max_reward",
            "refimpl.optimal_length",
            "refimpl.pareto_front",
            "refimpl.saturating_quality",
            "refimpl.shaped_reward",
            "refimpl.train_conditioned_policy",
            "refimpl.train_effort_policy",
        ),
        docs=(
            DocLink("concepts/effort", "Effort conditioning"),
            DocLink("derivations/effort", "Effort conditioning derivations (EF1–EF9)"),
            DocLink("derivations/effort_mix", "Effort on a mix of problems (EM1–EM6)"),
            DocLink("derivations/penalties", "Published length penalties (PEN1–PEN7)"),
            _WALK,
        ),
    ),
    SectionSpec(
        key="debugging",
        title="Debugging over-masking",
        module="refimpl.lab.debugging",
        requires=(
            "refimpl.fluid_keep_probability",
            "refimpl.fluid_steady_state",
            "refimpl.masking_diagnostics",
            "refimpl.over_masking_scenarios",
            "refimpl.sample_staleness",
            "refimpl.staleness_mask",
            "refimpl.sim.SimConfig",
            "refimpl.sim.simulate",
        ),
        docs=(
            DocLink(
                "concepts/staleness",
                "Staleness, masks and importance weights: the over-masking bug",
            ),
            DocLink("derivations/staleness", "Staleness derivations"),
            _WALK,
        ),
    ),
    SectionSpec(
        key="async-worth",
        title="When asynchrony is not worth it",
        module="refimpl.lab.async_worth",
        requires=tuple(
            sorted(
                {
                    "refimpl.async_speedup",
                    "refimpl.fluid_steady_state",
                    "refimpl.staleness_decay",
                    *_TRAINING_REQUIRES,
                }
            )
        ),
        docs=(
            DocLink("concepts/length-bias", "The length bias of dispatch: when asynchrony pays"),
            DocLink(
                "derivations/order_statistics",
                "Order statistics: the synchronous step time and the speedup bound",
            ),
            DocLink("concepts/sim-sync-first-k", "Simulating synchronous and first-k dispatch"),
            DocLink("concepts/learning", "Learning under asynchrony: the measured verdict"),
            _WALK,
        ),
    ),
    SectionSpec(
        key="learning",
        title="Learning under asynchrony: the gradient, its bias and what the policy learns",
        module="refimpl.lab.learning",
        requires=_LEARNING_REQUIRES,
        docs=(
            DocLink("concepts/learning", "Learning under asynchrony"),
            DocLink("derivations/learning", "Learning derivations (LRN1–LRN6)"),
            DocLink("concepts/length-bias", "The length bias of dispatch"),
            DocLink("derivations/importance", "Importance-weight derivations"),
            DocLink("derivations/fluid", "Fluid model of continuous dispatch"),
            _WALK,
        ),
    ),
    SectionSpec(
        key="engine",
        title="What an inference engine does to length bias and staleness",
        module="refimpl.lab.engine",
        requires=(
            "refimpl.sim.EngineModel",
            "refimpl.sim.SimConfig",
            "refimpl.sim.simulate_engine",
        ),
        docs=(
            DocLink("concepts/sim-engine", "The engine mode of the simulator"),
            DocLink("howto/simulate", "Simulating from the command line: the engine mode"),
            _WALK,
        ),
    ),
)
