"""What the closed forms of conventions §dispatch predict for a simulator configuration (from refimpl.dispatch)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import scipy.stats

from refimpl._validation import invalid, wrong_type
from refimpl.sim._config import SimConfig, _is_frozen_dist

__all__ = ["ClosedForm", "closed_form"]


class ClosedForm(NamedTuple):
    """Closed-form predictions for a run (see :func:`closed_form`); ``nan`` where none exists."""

    formula: str
    step_time: float
    staleness_mean: float
    trained_length_mean: float
    kept_fraction: float


def _law(cfg: SimConfig) -> Any:
    if cfg.length_kind == "lognormal":
        return scipy.stats.lognorm(s=cfg.lognormal_sigma, scale=math.exp(cfg.lognormal_mu))
    if cfg.length_kind in ("dist", "pmf"):
        return cfg.lengths
    raise invalid(
        "config.lengths",
        "be a law (not an explicit matrix) for a closed form",
        "an N x K matrix",
        "Pass lengths as a frozen scipy.stats law or a pmf.",
    )


def closed_form(config: SimConfig) -> ClosedForm:
    r"""The closed-form predictions of conventions §dispatch for a simulator configuration.

    .. math::

        \text{sync: } \Delta = t_\text{token}\,E[\max_{i\le B} L_i],\qquad
        \text{first-}k\text{: } E_q[L],\ q = \tfrac nk p\,\pi,\qquad
        \text{async: } \Delta = \frac{t_\text{token} B\,E[L]}{N\,E_p[\mathrm{keep}_\Delta]},\
        E[s] = \tfrac NB \text{ without a mask}.

    Computed by :func:`refimpl.expected_max`, :func:`refimpl.length_bias` and
    :func:`refimpl.fluid_steady_state` (the simulator never re-derives them).

    Parameters
    ----------
    config : SimConfig
        ``sync`` with ``batch <= slots``, ``first_k`` with dropped leftovers and
        ``launch <= slots``, or ``async``; no prefill, partial rollouts, preemption, slowdown or
        trainer time. ``sync`` and ``async`` need a continuous law (the default lognormal or a
        frozen ``scipy.stats`` law); ``first_k`` also takes a pmf.

    Returns
    -------
    ClosedForm
        ``formula`` (which result of conventions §dispatch applies), the mean time between publications
        ``step_time`` (``nan`` for first-``k``), the mean staleness of trained samples, their mean
        length, and the fraction of finished rollouts that are trained (``kept_fraction``;
        ``k/n`` for first-``k``).

    Raises
    ------
    ValueError
        For a configuration no closed form covers (``admission``, carried leftovers, partial
        rollouts, preemption, slowdown, trainer time, prefill: conventions §admission-and-partial says simulate), or an
        explicit length matrix.

    Notes
    -----
    The async prediction is the fluid limit (steady state, many slots); the simulator converges to it
    as the run grows, within about 1% for the trained mean length at ``N = 128``, ``B = 256``
    (tests/test_sim_closed_forms.py).

    Examples
    --------
    >>> import scipy.stats
    >>> from refimpl.sim import SimConfig, closed_form
    >>> cfg = SimConfig(slots=8, batch=4, rollouts=400, lengths=scipy.stats.expon(scale=100.0))
    >>> closed_form(cfg)
    ClosedForm(formula='D2 fluid', step_time=50.0, staleness_mean=2.0, trained_length_mean=100.0, kept_fraction=1.0)
    """
    from refimpl import dispatch

    if not isinstance(config, SimConfig):
        raise wrong_type("config", "a SimConfig", config, "Build one with SimConfig(...).")
    cfg = config
    extras = (
        cfg.partial != "none"
        or cfg.preempt_rate > 0
        or cfg.slowdown is not None
        or cfg.prefill_time != 0.0
        or _is_frozen_dist(cfg.trainer_time)
        or float(cfg.trainer_time) != 0.0
    )
    covered = not extras and (
        cfg.mode == "async"
        or (cfg.mode == "sync" and cfg.batch <= cfg.slots)
        or (
            cfg.mode == "first_k"
            and cfg.leftovers == "drop"
            and cfg.launch is not None
            and cfg.launch <= cfg.slots
        )
    )
    if not covered:
        raise invalid(
            "config",
            "be sync (batch <= slots), first_k with dropped leftovers (launch <= slots) or async, "
            "without prefill, partial rollouts, preemption, slowdown or trainer time, for a closed "
            "form",
            cfg.mode,
            "Simulate it instead (conventions §admission-and-partial: admission control and partial rollouts have no closed "
            "form).",
        )
    law = _law(cfg)
    t = cfg.token_time
    if cfg.mode == "first_k":
        n = int(cfg.launch or cfg.slots)
        lb = dispatch.length_bias(law, n=n, k=cfg.batch)
        return ClosedForm("D1 selected law", math.nan, 0.0, float(lb.selected_mean), cfg.batch / n)
    if cfg.length_kind == "pmf":
        raise invalid(
            "config.lengths",
            f"be a continuous law for mode={cfg.mode!r} (the closed form integrates a frozen "
            "scipy.stats law)",
            np.asarray(cfg.lengths),
            "Pass a frozen continuous law, or compare a first_k run.",
        )
    if cfg.mode == "sync":
        step = t * dispatch.expected_max(law, n=cfg.batch)
        return ClosedForm("D0 expected max", step, 0.0, float(law.mean()), 1.0)
    eta = cfg.eta if cfg.over_bound == "drop" else None
    fl = dispatch.fluid_steady_state(law, slots=cfg.slots, batch=cfg.batch, eta=eta)
    return ClosedForm(
        "D2 fluid",
        t * fl.step_time,
        fl.mean_staleness,
        fl.trained_mean_length,
        fl.kept_fraction,
    )
