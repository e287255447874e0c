"""Every value of every public option runs in a check that compares it with an independent result.

The options are not listed by hand: they are the choices the validation builders record on the
valid calls of ``tests/_valid_calls.py`` (``require_one_of`` and the choice helpers of the formula
packages) and the ``Literal`` values of the public signatures. :data:`OPTION_CHECKS` maps each
``(function, option, value)`` to a check that runs that value and compares the result with a
hand-worked value or an exact ``Fraction`` computation: either a test of the suite that already
does so (:class:`Ref`, reused by reference rather than copied) or a check written here.

A check counts only if it really calls the function with that value: each one is run with the
function spied on (``tests/_rules.py``), so a reference to a test that drifted away from the value
fails. A discovered value without an entry fails too, so a new option value cannot go untested.
"""

from __future__ import annotations

import functools
import importlib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _rules import bind, discover, load_formula_modules, public_function, spying
from _valid_calls import FORMULA_MODULES, VALID_CALLS
from _wrong_variants import rejects
from test_depth_staleness_classes import _ROUTES

import refimpl as r
import refimpl.losses as L
from refimpl.errors import RefimplError


@dataclass(frozen=True)
class Ref:
    """An existing test (``module``, ``test``) called with ``params`` (its parametrization)."""

    module: str
    test: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> None:
        fn: Callable[..., None] = getattr(importlib.import_module(self.module), self.test)
        fn(**self.params)


F = Fraction
LN2 = math.log(2.0)


def _close(got: Any, want: Any, *, rtol: float = 4e-16, atol: float = 1e-15) -> None:
    """float64 results against hand-worked values: a few ulps of relative error at most (and an
    absolute 1e-15 where the exact value is 0 and the computation cancels)."""
    np.testing.assert_allclose(
        np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=rtol, atol=atol
    )


def _exact(got: Any, want: list[Fraction]) -> None:
    assert list(got) == want, f"{list(got)} != {want}"


def _refused(call: Callable[[], Any], name: str) -> None:
    with pytest.raises(RefimplError, match=name):
        call()


# --- staleness --------------------------------------------------------------------------------

_LP = np.log([0.5, 0.6, 0.9])  # ratios 1, 2, 9 against _LQ
_LQ = np.log([0.5, 0.3, 0.1])


def _admission_spanned() -> None:
    # behind: min(N_max - running, (eta + v + 1) B - accepted - running); spanned: (eta + v) B
    args: dict[str, Any] = {
        "version": 2,
        "batch": 4,
        "accepted": 5,
        "running": 3,
        "max_concurrent": 20,
    }
    assert r.admission_capacity(eta=1, staleness_count="versions_spanned", **args) == 12 - 8
    assert r.admission_capacity(eta=1, staleness_count="versions_behind", **args) == 16 - 8


def _sample_staleness_spanned() -> None:
    st = r.sample_staleness(5, [[3, 3, 4, 4], [5, 5]], staleness_count="versions_spanned")
    _close(st.sample, [5 - 3 + 1, 5 - 5 + 1])


def _staleness_mask_spanned() -> None:
    # spanned counts s + 1 versions: kept iff s + 1 <= eta
    _close(r.staleness_mask([0, 1, 2, 3], eta=2, staleness_count="versions_spanned"), [1, 1, 0, 0])


def _ess_fraction() -> None:
    w = [1.0, 0.5, 0.0, 3.0]  # (sum w)^2 / sum w^2 = 20.25 / 10.25, over n = 4
    _close(r.effective_sample_size(w, ess="fraction"), 20.25 / 10.25 / 4)


def _diagnostics_ess_fraction() -> None:
    d = r.masking_diagnostics([0, 0, 1, 2], [1.0, 1.0, 1.0, 0.0], ess="fraction")
    _close(d.effective_sample_size, 9.0 / 3.0 / 4)


def _decoupled_clip() -> None:
    # ratios 1, 2, 9 clipped to [0.5, 5]; "mask" would drop the 9
    _close(r.decoupled_ppo_weights(_LP, _LQ, cap=5.0, above_cap="clip", lower=0.5), [1, 2, 5])


def _decoupled_nonfinite_one() -> None:
    got = r.decoupled_ppo_weights([math.log(0.5), -math.inf], np.log([0.25, 0.5]), nonfinite="one")
    _close(got, [2.0, 1.0])


def _masked_nonfinite_one() -> None:
    got = r.masked_is_weights(
        [math.log(0.5), -math.inf], np.log([0.25, 0.5]), low=0.5, high=4.0, nonfinite="one"
    )
    _close(got, [2.0, 1.0])


def _truncated_nonfinite_one() -> None:
    got = r.truncated_is_weights(
        [math.log(0.5), -math.inf], np.log([0.25, 0.5]), cap=1.5, nonfinite="one"
    )
    _close(got, [1.5, 1.0])


def _band_reciprocal() -> None:
    # 1/rho = 1, 1/2, 1/9: the band [0.4, 1.5] keeps the first two, weighted by rho
    got = r.masked_is_weights(_LP, _LQ, low=0.4, high=1.5, band_on="reciprocal")
    _close(got, [1.0, 2.0, 0.0])


def _band_ratio() -> None:
    # rho = 1, 2, 9: the band [0.4, 1.5] keeps the first only
    _close(r.masked_is_weights(_LP, _LQ, low=0.4, high=1.5, band_on="ratio"), [1.0, 0.0, 0.0])


# two sequences: token ratios (2, 1/4) (sequence ratio 1/2, geometric mean 1/sqrt 2: kept in the
# band [0.4, 2.5]) and (2, 2) (sequence ratio 4: dropped)
_LP2 = np.log([[0.5, 0.125], [0.5, 0.5]])
_LQ2 = np.log([[0.25, 0.5], [0.25, 0.25]])


def _weight(kind: Any, want: Any) -> Callable[[], None]:
    def check() -> None:
        got = r.masked_is_weights(_LP2, _LQ2, low=0.4, high=2.5, level="sequence", weight=kind)
        _close(got, want, rtol=1e-15)

    return check


# log-ratios (3, 1/2) clamped at c = 1: at the level, e^min(3.5, 1); per token, e^(1 + 1/2)
_LPC = np.array([[3.0, 0.5]])
_LQC = np.zeros((1, 2))


def _clamp_at(fn: str, where: Any) -> Callable[[], None]:
    want = math.exp(1.0) if where == "level" else math.exp(1.5)

    def check() -> None:
        if fn == "truncated":
            got = r.truncated_is_weights(
                _LPC, _LQC, cap=10.0, level="sequence", log_ratio_clamp=1.0, clamp_at=where
            )
        else:
            got = r.masked_is_weights(
                _LPC,
                _LQC,
                low=0.0,
                high=10.0,
                level="sequence",
                log_ratio_clamp=1.0,
                clamp_at=where,
            )
        _close(np.ravel(got)[0], want, rtol=1e-15)

    return check


# --- KL estimators: on-policy (mu = pi) the importance-weighted KL is the plain estimator ------

# p = 1/2, p_ref = 1/4: log(p/p_ref) = ln 2, r = p_ref/p = 1/2
_K_VALUE = {"k1": LN2, "k2": LN2**2 / 2, "k3": 0.5 - 1.0 + LN2, "abs": LN2}
_K_GRAD = {"k1": 1.0, "k2": LN2, "k3": 1.0 - 0.5, "abs": 1.0}
_ALIAS = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}


def _kl(fn: str, estimator: str) -> Callable[[], None]:
    base = _ALIAS.get(estimator.rstrip("+"), estimator.rstrip("+"))
    grad = _K_GRAD["k2"] if estimator.endswith("+") else _K_GRAD[base]

    def check() -> None:
        lp, ref = np.log([[0.5]]), np.log([[0.25]])
        if fn == "kl_penalty":
            t = L.kl_penalty(lp, ref, estimator=estimator)
        else:
            t = L.importance_weighted_kl(lp, ref, lp, estimator=estimator)
        _close(t.loss, [[_K_VALUE[base]]], rtol=1e-15)
        _close(t.grad, [[grad]], rtol=1e-15)

    return check


# --- partition: a split into one micro-batch is the whole batch: ratio 1 under every rule ------


def _partition(mode: str) -> Callable[[], None]:
    extra: dict[str, Any] = {"constant": 4.0} if mode == "token_sum_norm" else {}
    if mode == "group_mean":
        extra = {"group": [0, 1]}

    def check() -> None:
        mask = np.array([[1, 1, 1], [1, 0, 0]])
        whole = L.partition_gap(mask, splits=[[[0, 1]]], mode=mode, rule="trl_bnpo", **extra)
        _close(whole.sequence_ratio, [1.0, 1.0])

    return check


# --- advantages with a group of one: [1, 0 | 1/2], groups (0, 0) and (1,) --------------------

_R3 = [F(1), F(0), F(1, 2)]
_G3 = [0, 0, 1]


def _singleton(
    name: str, want: dict[str, list[Fraction]], **kw: Any
) -> dict[str, Callable[[], None]]:
    """Checks of ``singleton``: ``want`` holds the hand values of ``_R3`` by rule, and ``"pair"``
    those of its first two rewards alone (where ``"error"`` has nothing to refuse)."""

    def run(rule: str) -> Callable[[], None]:
        def check() -> None:
            fn: Callable[..., Any] = getattr(L, name)  # looked up at each run: it may be spied on
            if rule == "error":
                _refused(lambda: fn(_R3, group=_G3, singleton="error", **kw), "group")
                first_two = {k: v[:2] if isinstance(v, list) else v for k, v in kw.items()}
                pair = fn(_R3[:2], group=_G3[:2], singleton="error", **first_two)
                _exact(pair, want["pair"])
            else:
                _exact(fn(_R3, group=_G3, singleton=rule, **kw), want[rule])

        return check

    return {rule: run(rule) for rule in ("zero", "raw", "error")}


# gpg: B = 3, M = 2 non-zero rewards: alpha = 3/2; group 0 centred at 1/2
_GPG = _singleton(
    "gpg_advantages",
    {
        "zero": [F(3, 4), F(-3, 4), F(0)],
        "raw": [F(3, 4), F(-3, 4), F(3, 4)],
        "pair": [F(1), F(-1)],  # B = 2, M = 1: alpha = 2
    },
)
# maxrl (eps = 0): (r - 1/2) / (1/2) in group 0
_MAXRL = _singleton(
    "maxrl_advantages",
    {"zero": [F(1), F(-1), F(0)], "raw": [F(1), F(-1), F(1, 2)], "pair": [F(1), F(-1)]},
    eps=0.0,
)
# opo, lengths 1 and 3 in group 0: baseline (1*1 + 3*0) / 4 = 1/4
_OPO = _singleton(
    "opo_advantages",
    {
        "zero": [F(3, 4), F(-1, 4), F(0)],
        "raw": [F(3, 4), F(-1, 4), F(1, 2)],
        "pair": [F(3, 4), F(-1, 4)],
    },
    lengths=[1, 3, 2],
)


#: RLOO advantages of rewards (2, 1, 0) in groups (7, 3, 3): the singleton's is 0 ('zero') or its
#: raw reward 2 ('raw'); the pair's are (1, -1). Standardised over the batch with eps = 0.
_RLOO_NORMALIZED = {
    ("zero", "sample"): [0.0, 1.0, -1.0],  # mean 0, sample variance 1
    ("zero", "population"): [0.0, 1.5**0.5, -(1.5**0.5)],  # population variance 2/3
    ("raw", "sample"): [x / 3 / (7 / 3) ** 0.5 for x in (4, 1, -5)],  # mean 2/3, variance 7/3
    ("raw", "population"): [x / 3 / (14 / 9) ** 0.5 for x in (4, 1, -5)],  # variance 14/9
}


def _rloo_normalized(option: str, value: str) -> Check:
    """Every pairing of the other option's values with ``value``, against the hand-worked table;
    ``singleton='error'`` refuses the group of one, naming ``group``."""

    def check() -> None:
        fn: Callable[..., Any] = r.rloo_normalized_advantages
        if value == "error":
            for std in ("sample", "population"):
                _refused(functools.partial(fn, _R3, group=_G3, std=std, singleton="error"), "group")
            _close(fn([2.0, 1.0, 0.0, 4.0], group=[3, 3, 7, 7], singleton="error", eps=0.0),
                   [x / (34 / 3) ** 0.5 for x in (1, -1, -4, 4)], rtol=1e-15)  # fmt: skip
            return
        for (singleton, std), want in _RLOO_NORMALIZED.items():
            if {"singleton": singleton, "std": std}[option] == value:
                got = fn([2.0, 1.0, 0.0], group=[7, 3, 3], eps=0.0, std=std, singleton=singleton)
                _close(got, want, rtol=1e-15)

    return check


#: Tokens a (behaviour probability 0.5, target 0.6: TV 0.1, binary KL ln(25/24)/2 = 0.020) and b
#: (0.5 and 0.25: TV 0.25, KL ln(4/3)/2 = 0.144) in rows (a, b) and (a, a), delta = 0.15: the
#: weights 0.6/0.5 = 1.2 and 0.25/0.5 = 0.5 where kept. Row 1's TV mean is 0.175, its KL mean 0.082.
_GATE_P, _GATE_Q = np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([[0.6, 0.25], [0.6, 0.6]])
_GATED = {
    ("tv", "token"): [[1.2, 0.0], [1.2, 1.2]],
    ("binary_kl", "token"): [[1.2, 0.5], [1.2, 1.2]],
    ("tv", "sequence"): [[0.0, 0.0], [1.2, 1.2]],
    ("binary_kl", "sequence"): [[1.2, 0.5], [1.2, 1.2]],
}


def _divergence_gate(option: str, value: str) -> Check:
    """Every pairing of the other option's values with ``value``, against the hand-worked table."""

    def check() -> None:
        for (divergence, level), want in _GATED.items():
            if {"divergence": divergence, "level": level}[option] == value:
                gate: Callable[..., Any] = L.divergence_gated_weights
                got = gate(
                    np.log(_GATE_Q), np.log(_GATE_P), delta=0.15, divergence=divergence, level=level
                )
                _close(got, want, rtol=1e-15, atol=0.0)

    return check


def _gpg_alpha_nonzero() -> None:
    # rewards (1, 0 | 0, 0): M = 1, alpha = 4; F = 2: 4/2 (r - mean)
    got = L.gpg_advantages(
        [F(1), F(0), F(0), F(0)], group=[0, 0, 1, 1], alpha="nonzero", f_norm=2.0
    )
    _close(got, [1.0, -1.0, 0.0, 0.0])


def _passk(std: Any) -> Callable[[], None]:
    # groups (1, 0) and (1/2, 2): the best minus the second best, 1 and 3/2, over the group's std
    s2 = math.sqrt(2.0)
    want = {
        "sample": [1.0 / (1.0 / s2), 0.0, 0.0, 1.5 / (1.5 / s2)],
        "population": [1.0 / 0.5, 0.0, 0.0, 1.5 / 0.75],
        "none": [1.0, 0.0, 0.0, 1.5],
    }[std]

    def check() -> None:
        _close(
            L.passk_advantages([1.0, 0.0, 0.5, 2.0], group=[0, 0, 1, 1], std=std, eps=0.0),
            want,
            rtol=1e-15,
        )

    return check


def _gdpo_reference(
    rewards: np.ndarray, group: list[int], std: str, singleton: str, weights: list[float]
) -> np.ndarray:
    """GDPO by its definition, written out with numpy: per-component group z-scores, weighted sum,
    batch whitening with the sample variance (1 token each, whiten_eps = 0)."""
    g = np.asarray(group)
    s = np.zeros(len(g))
    for k, wk in enumerate(weights):
        col = rewards[:, k]
        a = np.zeros(len(g))
        for label in np.unique(g):
            idx = g == label
            x = col[idx]
            if idx.sum() == 1:
                a[idx] = x if singleton == "raw" else 0.0
                continue
            dev = x - x.mean()
            sd = {"sample": x.std(ddof=1), "population": x.std(ddof=0), "none": 1.0}[std]
            a[idx] = dev / sd
        s += wk * a
    return np.asarray((s - s.mean()) / math.sqrt(s.var(ddof=1)), dtype=np.float64)


def _gdpo(option: str, value: Any) -> Callable[[], None]:
    rewards = np.array([[1.0, 0.0], [0.0, 0.5], [1.0, 1.0], [0.0, 0.25], [0.5, 2.0]])
    weights = [0.25, 0.75]

    def check() -> None:
        std: Any = value if option == "std" else "sample"
        rule: Any = value if option == "singleton" else "zero"
        group = [0, 0, 1, 1, 2] if option == "singleton" else [0, 0, 1, 1, 1]
        if rule == "error":
            _refused(
                lambda: L.gdpo_advantages(
                    rewards,
                    group=group,
                    singleton="error",
                    eps=0.0,
                    whiten_eps=0.0,
                    weights=weights,
                ),
                "group",
            )
            group, rule = [0, 0, 1, 1, 1], "zero"
            got = L.gdpo_advantages(
                rewards, group=group, singleton="error", eps=0.0, whiten_eps=0.0, weights=weights
            )
        else:
            got = L.gdpo_advantages(
                rewards,
                group=group,
                std=std,
                singleton=rule,
                eps=0.0,
                whiten_eps=0.0,
                weights=weights,
            )
        want = _gdpo_reference(rewards, group, std, rule, weights)
        _close(got, want, rtol=1e-13)

    return check


def _gdpo_placement(value: Any) -> Callable[[], None]:
    """The batch denominator D(s) of each placement, by its formula: ``whiten_eps`` once above and
    once below the sample variance s² of the summed components (where ``"floor"`` is s)."""
    rewards = np.array([[1.0, 0.0], [0.0, 0.5], [1.0, 1.0], [0.0, 0.25], [0.5, 2.0]])
    weights, group = [0.25, 0.75], [0, 0, 1, 1, 1]

    def check() -> None:
        z = _gdpo_reference(rewards, group, "sample", "zero", weights)  # (S - m) / s
        # S itself, not whitened: the per-component sample z-scores, weighted
        g = np.asarray(group)
        s_vals = np.zeros(len(g))
        for k, wk in enumerate(weights):
            col = rewards[:, k]
            for label in np.unique(g):
                idx = g == label
                s_vals[idx] += wk * (col[idx] - col[idx].mean()) / col[idx].std(ddof=1)
        var = float(s_vals.var(ddof=1))
        _close(z, (s_vals - s_vals.mean()) / math.sqrt(var), rtol=1e-14)
        for e_w in (2.0 * var, 0.5 * var):
            denominator = {
                "variance": math.sqrt(var + e_w),
                "std": math.sqrt(var) + e_w,
                "floor": math.sqrt(max(var, e_w)),
            }[value]
            got = L.gdpo_advantages(
                rewards,
                group=group,
                eps=0.0,
                whiten_eps=e_w,
                whiten_placement=value,
                weights=weights,
            )
            _close(got, (s_vals - s_vals.mean()) / denominator, rtol=1e-13)

    return check


def _decoupled_loss(value: Any) -> Callable[[], None]:
    """Ratios 1.1, 1, 1, 1.1 against π_prox, behaviour weights 2, 1, 10, 0.5 with C = 5 and
    λ = 0.6: "mask" rejects the 10 and the 0.5, "clip" weighs them 5 and 0.6 (loss and gradient
    -A r w inside the clip)."""

    def check() -> None:
        logp = np.log([[0.55, 0.5, 0.5, 0.55]])
        prox = np.log([[0.5, 0.5, 0.5, 0.5]])
        behav = np.log([[0.25, 0.5, 0.05, 1.0]])
        terms = L.decoupled_ppo_loss(
            logp, prox, behav, [[1.0, -1.0, 1.0, 1.0]], cap=5.0, lower=0.6, above_cap=value
        )
        want = {"mask": [-2.2, 1.0, 0.0, 0.0], "clip": [-2.2, 1.0, -5.0, -0.66]}[value]
        _close(terms.loss, [want], rtol=1e-15)
        _close(terms.grad, [want], rtol=1e-15)

    return check


def _decoupled_level(value: Any) -> Callable[[], None]:
    """Two rows on policy against π_prox (ratio 1), behaviour weights (2, 8) and (2, 4), C = 5
    (loss and gradient −A w, A = 1): per token the 8 is rejected; the geometric means 4 and
    2√2 are inside the cap, so each row weighs its mean; the products 16 and 8 are outside it,
    so both rows are rejected; the largest ratios 8 and 4: only the second row is kept."""

    def check() -> None:
        prox = np.log([[0.5, 0.5], [0.5, 0.5]])
        behav = np.log([[0.25, 0.0625], [0.25, 0.125]])
        terms = L.decoupled_ppo_loss(prox, prox, behav, np.ones((2, 2)), cap=5.0, level=value)
        r2 = -math.sqrt(8.0)
        want = {
            "token": [[-2.0, 0.0], [-2.0, -4.0]],
            "geometric": [[-4.0, -4.0], [r2, r2]],
            "sequence": [[0.0, 0.0], [0.0, 0.0]],
            "max": [[0.0, 0.0], [r2, r2]],
        }[value]
        _close(terms.loss, want, rtol=1e-14)
        _close(terms.grad, want, rtol=1e-14)

    return check


def _decoupled_metric(value: Any) -> Callable[[], None]:
    """On policy, A = 1, log(π_prox/μ) = d = ln 2·(1, −1, 2, −2) (weights 2, 1/2, 4, 1/4),
    bound 1: the ratio keeps 1/2 and 1/4; k1 = d keeps all but 2 ln 2; k2 = d²/2 (at most
    0.96) keeps all; k3 = e^−d − 1 + d (0.19, 0.31, 0.64, 1.61) drops the last."""

    def check() -> None:
        zero = np.zeros((1, 4))
        behav = -LN2 * np.array([[1.0, -1.0, 2.0, -2.0]])
        terms = L.decoupled_ppo_loss(zero, zero, behav, np.ones((1, 4)), cap=1.0, metric=value)
        want = {
            "ratio": [0.0, -0.5, 0.0, -0.25],
            "kl_k1": [-2.0, -0.5, 0.0, -0.25],
            "kl_k2": [-2.0, -0.5, -4.0, -0.25],
            "kl_k3": [-2.0, -0.5, -4.0, 0.0],
        }[value]
        _close(terms.loss, [want])
        _close(terms.grad, [want])

    return check


def _reinforce_pp(option: str, value: Any) -> Callable[[], None]:
    def check() -> None:
        if option == "eps_placement":
            # rewards 1, 0, 0, 1: m = 1/2, population std 1/2; eps = 1/4 (std) or 1 (floor)
            eps = 0.25 if value == "std" else 1.0
            got = L.reinforce_pp_advantages(
                [1.0, 0.0, 0.0, 1.0], std="population", eps=eps, eps_placement=value
            )
            a = 0.5 / (0.5 + 0.25) if value == "std" else 0.5 / max(0.5, 1.0)
            _close(got, [a, -a, -a, a])
        else:  # singleton="raw": x = (1/2, -1/2 | 1/2) keeps the raw reward, m = 1/6
            got = L.reinforce_pp_advantages(
                [1.0, 0.0, 0.5], group=[0, 0, 1], std="none", eps=0.0, singleton="raw"
            )
            _close(got, [1 / 3, -2 / 3, 1 / 3], rtol=1e-15)

    return check


# --- aggregation, by hand: mask (1 1 1 | 1 1 0), per-token losses (1 3 2 | 5 99 .) --------------

_AGG_MASK = [[1, 1, 1], [1, 1, 0]]
_AGG_LOSS = [[1.0, 3.0, 2.0], [5.0, 99.0, 7.0]]
#: sum 110 over 5 tokens; row sums 6 (3 tokens) and 104 (2 tokens); 2 sequences; H = 4
_AGG_WANT = {
    "token_sum": 110.0,
    "token_mean": 110.0 / 5,
    "seq_mean_token_mean": (6.0 / 3 + 104.0 / 2) / 2,
    "seq_mean_token_sum": (6.0 + 104.0) / 2,
    "token_sum_norm": 110.0 / (2 * 4),
    "group_mean": (6.0 / 3 + 104.0 / 2)
    / 2,  # groups (0) and (1): a token mean in each, then their mean
}


def _extra(mode: str) -> dict[str, Any]:
    if mode == "token_sum_norm":
        return {"constant": 4.0}
    return {"group": [0, 1]} if mode == "group_mean" else {}


def _aggregate(mode: str) -> Check:
    def check() -> None:
        _close(L.aggregate_loss(_AGG_LOSS, _AGG_MASK, mode=mode, **_extra(mode)), _AGG_WANT[mode])

    return check


def _length_weight(mode: str) -> Check:
    # lengths 1 and 4, two sequences, 5 tokens, H = 4: the total weight of each row
    want = {
        "token_sum": [1.0, 4.0],
        "token_mean": [1 / 5, 4 / 5],
        "seq_mean_token_mean": [1 / 2, 1 / 2],
        "seq_mean_token_sum": [1 / 2, 4 / 2],
        "token_sum_norm": [1 / 8, 4 / 8],
    }[mode]
    extra: dict[str, Any] = {"token_count": 5} if mode == "token_mean" else {}
    extra |= {"constant": 4.0} if mode == "token_sum_norm" else {}

    def check() -> None:
        _close(L.length_weight([1, 4], mode=mode, sequence_count=2, **extra), want)

    return check


def _split(mode: str) -> Check:
    # verl's global denominators: every split gets the full batch's weights, mask (1 1 1 | 1 0 0)
    row = {
        "token_sum": (1.0, 1.0),
        "seq_mean_token_mean": (1 / 6, 1 / 2),
        "seq_mean_token_sum": (1 / 2, 1 / 2),
        "token_sum_norm": (1 / 8, 1 / 8),
        "group_mean": (1 / 6, 1 / 2),
    }[mode]

    def check() -> None:
        mask = np.array([[1, 1, 1], [1, 0, 0]])
        got = L.split_weights(mask, splits=[[[0], [1]]], mode=mode, rule="verl", **_extra(mode))
        _close(got, [[row[0]] * 3, [row[1], 0.0, 0.0]])

    return check


def _iw_kl_differentiable() -> None:
    # on-policy w = 1 with dw/dlogp = w: the gradient of w k1 is k1' + k1 = 1 + ln 2
    lp, ref = np.log([[0.5]]), np.log([[0.25]])
    t = L.importance_weighted_kl(lp, ref, lp, estimator="k1", weighting="differentiable")
    _close(t.loss, [[LN2]], rtol=1e-15)
    _close(t.grad, [[1.0 + LN2]], rtol=1e-15)


def _admission_behind() -> None:
    args: dict[str, Any] = {"version": 2, "batch": 4, "accepted": 5, "running": 3}
    assert r.admission_capacity(eta=1, max_concurrent=20, **args) == 16 - 8  # the staleness gate
    assert r.admission_capacity(eta=1, max_concurrent=5, **args) == 5 - 3  # the concurrency limit


def _masked_geometric() -> None:
    # geometric-mean ratios: sqrt(2 * 1/4) and sqrt(2 * 2) = 2, both in [0.4, 2.5]
    got = r.masked_is_weights(_LP2, _LQ2, low=0.4, high=2.5, level="geometric")
    _close(got, [math.sqrt(0.5), 2.0], rtol=1e-15)


def _token_baseline(positions: Any) -> Check:
    # pi = 0 and sum pi^2 = 0: w = 1, W counts the valid tokens so far. Row 0 (mask 1 0 1, reward 1
    # at the end) has returns (1, ., 1), row 1 (mask 1 1 0, reward 1/2 in the middle) (1/2, 1/2, .)
    # By column: t = 0 pairs them (baseline 3/4), t = 1 and t = 2 hold one row each (advantage 0).
    # By valid token: the second valid tokens (columns 2 and 1) pair too, W = 2 each: baseline 3/4.
    want = {
        "column": [[0.25, 0.0, 0.0], [-0.25, 0.0, 0.0]],
        "valid": [[0.25, 0.0, 0.25], [-0.25, -0.25, 0.0]],
    }[positions]

    def check() -> None:
        got = L.optimal_token_baseline_advantages(
            [[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]],
            [[-1e9] * 3] * 2,
            [[0.0] * 3] * 2,
            group=[0, 0],
            mask=[[1, 0, 1], [1, 1, 0]],
            zero_tail=False,
            positions=positions,
        )
        _close(got, want)

    return check


# --- the table --------------------------------------------------------------------------------

_AGG = "test_losses_aggregation"
_ADV = "test_losses_advantages"
_KL = "test_losses_kl"
_REJ = "test_losses_rejection"
_SUR = "test_losses_surrogates"
_STA = "test_staleness"
_ROUTE = "test_depth_staleness_classes"


def _route(framework: str) -> Ref:
    """The framework's first setting routed to its own function (same record, both cases)."""
    row = next(r for r in _ROUTES if r[0] == framework)
    names = ("framework", "setting", "own", "direct", "minimum")
    return Ref(
        _ROUTE,
        "test_every_framework_setting_routes_to_its_own_function",
        dict(zip(names, row, strict=True)),
    )


_PEN = "test_penalties"
_MODES = ("token_sum", "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "token_sum_norm")


def _by_hand_weights(mode: str) -> Ref:
    return Ref(
        _AGG,
        "test_weights_equal_the_hand_worked_fractions",
        {"mode": mode, "empty_rows": "excluded"},
    )


Check = Callable[[], None]

OPTION_CHECKS: dict[tuple[str, str, Any], Check] = {
    **{
        ("refimpl.frameworks framework_staleness_bound", "framework", f): _route(f)
        for f in ("areal", "skyrl", "trl", "verl")
    },
    # aggregation
    **{("refimpl.losses aggregation_weights", "mode", m): _by_hand_weights(m) for m in _MODES},
    ("refimpl.losses aggregation_weights", "mode", "group_mean"): Ref(
        _AGG, "test_group_mean_is_a_token_mean_within_each_group_then_a_mean_over_groups"
    ),
    ("refimpl.losses aggregation_weights", "empty_rows", "excluded"): _by_hand_weights(
        "token_mean"
    ),
    ("refimpl.losses aggregation_weights", "empty_rows", "counted"): Ref(
        _AGG,
        "test_weights_equal_the_hand_worked_fractions",
        {"mode": "seq_mean_token_sum", "empty_rows": "counted"},
    ),
    ("refimpl.losses aggregation_weights", "denominator", "before_rejection"): Ref(
        _AGG, "test_rejection_denominator_before_or_after"
    ),
    ("refimpl.losses aggregation_weights", "denominator", "after_rejection"): Ref(
        _AGG, "test_rejection_denominator_before_or_after"
    ),
    **{
        ("refimpl.losses aggregate_loss", "mode", m): _aggregate(m) for m in (*_MODES, "group_mean")
    },
    ("refimpl.losses length_weight", "mode", "seq_mean_token_mean"): Ref(
        _AGG, "test_seq_mean_token_mean_upweights_short_sequences_per_token"
    ),
    **{
        ("refimpl.losses length_weight", "mode", m): _length_weight(m)
        for m in ("token_sum", "token_mean", "seq_mean_token_sum", "token_sum_norm")
    },
    # partition
    ("refimpl.losses split_weights", "mode", "token_mean"): Ref(
        "test_losses_partition", "test_split_weights_by_hand"
    ),
    **{
        ("refimpl.losses split_weights", "mode", m): _split(m)
        for m in (
            "token_sum",
            "seq_mean_token_mean",
            "seq_mean_token_sum",
            "token_sum_norm",
            "group_mean",
        )
    },
    ("refimpl.losses partition_gap", "mode", "token_mean"): Ref(
        "test_losses_partition", "test_partition_gap_reports_the_classic_dependence"
    ),
    ("refimpl.losses partition_gap", "mode", "seq_mean_token_mean"): Ref(
        "test_losses_partition", "test_partition_gap_states_the_sequence_mean_dependence_as_split"
    ),
    **{
        ("refimpl.losses partition_gap", "mode", m): _partition(m)
        for m in ("token_sum", "seq_mean_token_sum", "token_sum_norm", "group_mean")
    },
    # KL
    ("refimpl.losses kl_penalty", "estimator", "k1"): Ref(_KL, "test_hand_worked_values"),
    ("refimpl.losses kl_penalty", "estimator", "k2"): Ref(_KL, "test_hand_worked_values"),
    ("refimpl.losses kl_penalty", "estimator", "k3"): Ref(_KL, "test_hand_worked_values"),
    ("refimpl.losses kl_penalty", "estimator", "abs"): Ref(_KL, "test_hand_worked_values"),
    ("refimpl.losses kl_penalty", "estimator", "k3+"): Ref(
        _KL, "test_k3_plus_has_k3_value_and_k2_gradient"
    ),
    ("refimpl.losses kl_penalty", "estimator", "low_var_kl"): Ref(
        _KL, "test_low_var_kl_is_verls_clamped_k3"
    ),
    ("refimpl.losses kl_penalty", "estimator", "low_var_kl+"): Ref(
        _KL, "test_low_var_kl_is_verls_clamped_k3"
    ),
    **{
        ("refimpl.losses kl_penalty", "estimator", e): _kl("kl_penalty", e)
        for e in ("k1+", "k2+", "abs+", "kl", "kl+", "mse", "mse+")
    },
    **{
        ("refimpl.losses importance_weighted_kl", "estimator", e): _kl("importance_weighted_kl", e)
        for e in (
            "k1",
            "k2",
            "k3",
            "abs",
            "k1+",
            "k2+",
            "k3+",
            "abs+",
            "kl",
            "kl+",
            "mse",
            "mse+",
            "low_var_kl",
            "low_var_kl+",
        )
    },
    ("refimpl.losses importance_weighted_kl", "weighting", "detached"): _kl(
        "importance_weighted_kl", "k3"
    ),
    # an exact check, not the torch property: which options a Hypothesis test draws is not fixed
    # (a gate run drew only 'detached' and 'gradient_only')
    ("refimpl.losses importance_weighted_kl", "weighting", "differentiable"): _iw_kl_differentiable,
    ("refimpl.losses importance_weighted_kl", "weighting", "gradient_only"): Ref(
        _KL, "test_openrlhf_unbiased_gradient_recipe"
    ),
    # rejection
    **{
        ("refimpl.losses sequence_divergence", "estimator", e): Ref(
            _REJ,
            "test_sequence_divergence_by_hand",
            {"estimator": e, "reduce": red, "first": first},
        )
        for e, red, first in (
            ("k1", "max", 0.25),
            ("k2", "mean", 0.078125),
            ("k3", "max", 0.1487212707001282),
        )
    },
    **{
        ("refimpl.losses sequence_divergence", "reduce", red): Ref(
            _REJ,
            "test_sequence_divergence_by_hand",
            {"estimator": e, "reduce": red, "first": first},
        )
        for e, red, first in (("k2", "sum", 0.15625), ("k2", "mean", 0.078125), ("k1", "max", 0.25))
    },
    **{
        ("refimpl.losses divergence_rejection_mask", option, value): Ref(
            "test_losses_rejection_mask",
            "test_divergence_rejection_mask_by_hand",
            {"estimator": e, "reduce": red, "upper": up, "lower": lo, "expected": want},
        )
        for option, value, (e, red, up, lo, want) in (
            ("estimator", "k1", ("k1", "mean", 0.25, -0.25, [[0, 0, 0], [1, 1, 0]])),
            ("estimator", "k2", ("k2", "sum", 0.125, None, [[0, 0, 0], [1, 1, 0]])),
            ("estimator", "k3", ("k3", "token", 0.1, None, [[0, 1, 0], [0, 1, 0]])),
            ("reduce", "token", ("k2", "token", 0.125, None, [[1, 1, 0], [1, 1, 0]])),
            ("reduce", "sum", ("k1", "sum", 0.0, -1.25, [[1, 1, 1], [0, 0, 0]])),
            ("reduce", "mean", ("k2", "mean", 0.0625, None, [[0, 0, 0], [1, 1, 0]])),
            ("reduce", "max", ("k3", "max", 0.7, None, [[0, 0, 0], [1, 1, 0]])),
        )
    },
    ("refimpl.losses proximal_logprobs", "method", "loglinear"): Ref(
        "test_losses_proximal", "test_loglinear_by_hand"
    ),
    ("refimpl.losses proximal_logprobs", "method", "linear"): Ref(
        "test_losses_proximal", "test_linear_by_hand"
    ),
    ("refimpl.losses proximal_logprobs", "method", "rollout"): Ref(
        "test_losses_proximal", "test_rollout_is_the_behaviour_policy_without_gradient"
    ),
    ("refimpl.losses is_batch_normalize", "level", "token"): Ref(
        _REJ, "test_is_batch_normalize_by_hand"
    ),
    ("refimpl.losses is_batch_normalize", "level", "sequence"): Ref(
        _REJ, "test_is_batch_normalize_by_hand"
    ),
    # surrogates and GAE
    ("refimpl.losses dppo_loss", "divergence", "tv"): Ref(_SUR, "test_dppo_exact_masks"),
    ("refimpl.losses dppo_loss", "divergence", "kl"): Ref(_SUR, "test_dppo_exact_masks"),
    ("refimpl.losses dppo_loss", "surrogate", "log"): Ref(
        _SUR, "test_dppo_keeps_a_token_exactly_at_its_threshold"
    ),
    ("refimpl.losses dppo_loss", "surrogate", "ratio"): Ref(_SUR, "test_dppo_exact_masks"),
    ("refimpl.losses gae_advantages", "gaps", "skip"): Ref(
        "test_losses_gae", "test_gaps_skip_and_steps"
    ),
    ("refimpl.losses gae_advantages", "gaps", "steps"): Ref(
        "test_losses_gae", "test_gaps_skip_and_steps"
    ),
    # advantages
    ("refimpl.losses grpo_advantages", "std", "sample"): Ref(
        _ADV, "test_grpo_sample_and_population_z_scores_by_hand"
    ),
    ("refimpl.losses grpo_advantages", "std", "population"): Ref(
        _ADV, "test_grpo_sample_and_population_z_scores_by_hand"
    ),
    ("refimpl.losses grpo_advantages", "std", "none"): Ref(
        _ADV, "test_grpo_mean_centred_is_exact_with_fractions"
    ),
    ("refimpl.losses grpo_advantages", "eps_placement", "std"): Ref(
        _ADV, "test_grpo_sample_and_population_z_scores_by_hand"
    ),
    ("refimpl.losses grpo_advantages", "eps_placement", "variance"): Ref(
        _ADV,
        "test_grpo_eps_placement_by_hand",
        {"placement": "variance", "eps": 0.25, "expected": 0.7071067811865475},
    ),
    ("refimpl.losses grpo_advantages", "eps_placement", "floor"): Ref(
        _ADV, "test_grpo_eps_placement_by_hand", {"placement": "floor", "eps": 1.0, "expected": 0.5}
    ),
    ("refimpl.losses grpo_advantages", "std_scope", "group"): Ref(
        _ADV, "test_grpo_sample_and_population_z_scores_by_hand"
    ),
    ("refimpl.losses grpo_advantages", "std_scope", "batch"): Ref(
        _ADV, "test_grpo_batch_scope_uses_the_batch_std_of_raw_rewards_and_the_group_mean"
    ),
    ("refimpl.losses grpo_advantages", "singleton", "zero"): Ref(
        _ADV, "test_grpo_sample_and_population_z_scores_by_hand"
    ),
    ("refimpl.losses grpo_advantages", "singleton", "raw"): Ref(
        _ADV, "test_grpo_singleton_rules", {"singleton": "raw", "expected": 2.9999970000030003}
    ),
    ("refimpl.losses grpo_advantages", "singleton", "error"): Ref(
        _ADV, "test_singleton_error_rule"
    ),
    ("refimpl.losses rloo_advantages", "singleton", "zero"): Ref(
        _ADV, "test_rloo_by_hand_exact_and_singletons"
    ),
    ("refimpl.losses rloo_advantages", "singleton", "raw"): Ref(
        _ADV, "test_rloo_by_hand_exact_and_singletons"
    ),
    ("refimpl.losses rloo_advantages", "singleton", "error"): Ref(
        _ADV, "test_singleton_error_rule"
    ),
    **{
        ("refimpl.losses rloo_normalized_advantages", option, value): _rloo_normalized(
            option, value
        )
        for option, values in (
            ("singleton", ("zero", "raw", "error")),
            ("std", ("sample", "population")),
        )
        for value in values
    },
    **{
        ("refimpl.losses divergence_gated_weights", option, value): _divergence_gate(option, value)
        for option, values in (
            ("divergence", ("binary_kl", "tv")),
            ("level", ("token", "sequence")),
        )
        for value in values
    },
    ("refimpl.losses reinforce_pp_advantages", "std", "none"): Ref(
        _ADV, "test_reinforce_pp_by_hand"
    ),
    ("refimpl.losses reinforce_pp_advantages", "std", "population"): Ref(
        _ADV, "test_reinforce_pp_by_hand"
    ),
    ("refimpl.losses reinforce_pp_advantages", "std", "sample"): Ref(
        _ADV, "test_singleton_error_rule"
    ),
    ("refimpl.losses reinforce_pp_advantages", "eps_placement", "variance"): Ref(
        _ADV, "test_reinforce_pp_by_hand"
    ),
    ("refimpl.losses reinforce_pp_advantages", "eps_placement", "std"): _reinforce_pp(
        "eps_placement", "std"
    ),
    ("refimpl.losses reinforce_pp_advantages", "eps_placement", "floor"): _reinforce_pp(
        "eps_placement", "floor"
    ),
    ("refimpl.losses reinforce_pp_advantages", "singleton", "zero"): Ref(
        _ADV, "test_reinforce_pp_by_hand"
    ),
    ("refimpl.losses reinforce_pp_advantages", "singleton", "raw"): _reinforce_pp(
        "singleton", "raw"
    ),
    ("refimpl.losses reinforce_pp_advantages", "singleton", "error"): Ref(
        _ADV, "test_singleton_error_rule"
    ),
    **{("refimpl.losses gpg_advantages", "singleton", k): c for k, c in _GPG.items()},
    ("refimpl.losses gpg_advantages", "alpha", "nonzero"): _gpg_alpha_nonzero,
    **{("refimpl.losses maxrl_advantages", "singleton", k): c for k, c in _MAXRL.items()},
    **{("refimpl.losses opo_advantages", "singleton", k): c for k, c in _OPO.items()},
    **{
        ("refimpl.losses passk_advantages", "std", s): _passk(s)
        for s in ("sample", "population", "none")
    },
    **{
        ("refimpl.losses gdpo_advantages", "std", s): _gdpo("std", s)
        for s in ("sample", "population", "none")
    },
    **{
        ("refimpl.losses gdpo_advantages", "singleton", s): _gdpo("singleton", s)
        for s in ("zero", "raw", "error")
    },
    **{
        ("refimpl.losses gdpo_advantages", "whiten_placement", s): _gdpo_placement(s)
        for s in ("variance", "std", "floor")
    },
    **{
        ("refimpl.losses decoupled_ppo_loss", "above_cap", s): _decoupled_loss(s)
        for s in ("mask", "clip")
    },
    **{
        ("refimpl.losses decoupled_ppo_loss", "level", s): _decoupled_level(s)
        for s in ("token", "geometric", "sequence", "max")
    },
    **{
        ("refimpl.losses decoupled_ppo_loss", "metric", s): _decoupled_metric(s)
        for s in ("ratio", "kl_k1", "kl_k2", "kl_k3")
    },
    **{
        ("refimpl.losses optimal_token_baseline_advantages", "positions", p): _token_baseline(p)
        for p in ("column", "valid")
    },
    # penalties
    ("refimpl.penalties kimi_length_reward", "scope", "problem"): Ref(
        _PEN, "test_kimi_rows_of_a_2d_array_are_problems"
    ),
    ("refimpl.penalties kimi_length_reward", "scope", "batch"): Ref(
        _PEN, "test_kimi_rows_of_a_2d_array_are_problems"
    ),
    # staleness
    (
        "refimpl.staleness admission_capacity",
        "staleness_count",
        "versions_behind",
    ): _admission_behind,
    (
        "refimpl.staleness admission_capacity",
        "staleness_count",
        "versions_spanned",
    ): _admission_spanned,
    ("refimpl.staleness sample_staleness", "staleness_count", "versions_behind"): Ref(
        _STA, "test_sample_staleness_is_the_oldest_token_version_behind_the_trainer"
    ),
    (
        "refimpl.staleness sample_staleness",
        "staleness_count",
        "versions_spanned",
    ): _sample_staleness_spanned,
    ("refimpl.staleness staleness_mask", "staleness_count", "versions_behind"): Ref(
        _STA, "test_staleness_past_two_to_the_53_is_exact"
    ),
    (
        "refimpl.staleness staleness_mask",
        "staleness_count",
        "versions_spanned",
    ): _staleness_mask_spanned,
    ("refimpl.staleness effective_sample_size", "ess", "count"): Ref(
        _STA, "test_masking_diagnostics_count_by_enumeration"
    ),
    ("refimpl.staleness effective_sample_size", "ess", "fraction"): _ess_fraction,
    ("refimpl.staleness masking_diagnostics", "ess", "count"): Ref(
        _STA, "test_masking_diagnostics_count_by_enumeration"
    ),
    ("refimpl.staleness masking_diagnostics", "ess", "fraction"): _diagnostics_ess_fraction,
    ("refimpl.staleness decoupled_ppo_weights", "above_cap", "mask"): Ref(
        _STA, "test_decoupled_weights_mask_above_the_cap_and_keep_the_cap_itself"
    ),
    ("refimpl.staleness decoupled_ppo_weights", "above_cap", "clip"): _decoupled_clip,
    ("refimpl.staleness decoupled_ppo_weights", "nonfinite", "error"): Ref(
        _STA, "test_decoupled_weights_mask_above_the_cap_and_keep_the_cap_itself"
    ),
    ("refimpl.staleness decoupled_ppo_weights", "nonfinite", "one"): _decoupled_nonfinite_one,
    ("refimpl.staleness masked_is_weights", "level", "token"): Ref(
        _STA, "test_masked_weights_keep_the_band_edges_and_drop_outside"
    ),
    ("refimpl.staleness masked_is_weights", "level", "sequence"): Ref(
        _STA, "test_sequence_weights_from_huge_log_ratios_are_exact"
    ),
    ("refimpl.staleness masked_is_weights", "level", "geometric"): Ref(
        _STA, "test_finite_property_rejects_linear_space_product"
    ),
    ("refimpl.staleness masked_is_weights", "band_on", "ratio"): _band_ratio,
    ("refimpl.staleness masked_is_weights", "band_on", "reciprocal"): _band_reciprocal,
    ("refimpl.staleness masked_is_weights", "weight", "ratio"): _weight("ratio", [0.5, 0.0]),
    ("refimpl.staleness masked_is_weights", "weight", "indicator"): _weight(
        "indicator", [1.0, 0.0]
    ),
    ("refimpl.staleness masked_is_weights", "weight", "token"): _weight(
        "token", [[2.0, 0.25], [0.0, 0.0]]
    ),
    ("refimpl.staleness masked_is_weights", "weight", "geometric"): _weight(
        "geometric", [[math.sqrt(0.5)] * 2, [0.0, 0.0]]
    ),
    ("refimpl.staleness masked_is_weights", "nonfinite", "error"): Ref(
        _STA, "test_masked_weights_keep_the_band_edges_and_drop_outside"
    ),
    ("refimpl.staleness masked_is_weights", "nonfinite", "one"): _masked_nonfinite_one,
    ("refimpl.staleness masked_is_weights", "clamp_at", "level"): _clamp_at("masked", "level"),
    ("refimpl.staleness masked_is_weights", "clamp_at", "token"): _clamp_at("masked", "token"),
    ("refimpl.staleness truncated_is_weights", "level", "token"): Ref(
        _STA, "test_truncated_weights_match_exact_ratios"
    ),
    ("refimpl.staleness truncated_is_weights", "level", "sequence"): Ref(
        _STA, "test_truncated_weights_match_exact_ratios"
    ),
    ("refimpl.staleness truncated_is_weights", "level", "geometric"): Ref(
        _STA, "test_padding_gets_weight_zero_and_does_not_enter_sequence_weights"
    ),
    ("refimpl.staleness truncated_is_weights", "nonfinite", "error"): Ref(
        _STA, "test_truncated_weights_match_exact_ratios"
    ),
    ("refimpl.staleness truncated_is_weights", "nonfinite", "one"): _truncated_nonfinite_one,
    ("refimpl.staleness truncated_is_weights", "clamp_at", "level"): _clamp_at(
        "truncated", "level"
    ),
    ("refimpl.staleness truncated_is_weights", "clamp_at", "token"): _clamp_at(
        "truncated", "token"
    ),
}


# --- discovery and the tests ------------------------------------------------------------------


def _literal_values(hint: Any) -> set[Any]:
    if typing.get_origin(hint) is typing.Literal:
        return {v for v in typing.get_args(hint) if isinstance(v, str)}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return set().union(*(_literal_values(a) for a in typing.get_args(hint)))
    return set()


@functools.cache
def discovered_options() -> frozenset[tuple[str, str, Any]]:
    """Every (function, option, value): recorded choices on the valid calls, and Literal hints."""
    load_formula_modules(FORMULA_MODULES)
    out: set[tuple[str, str, Any]] = set()
    for key, calls in VALID_CALLS.items():
        fn = public_function(key)
        for call in calls:
            for found in discover(fn, bind(fn, call.args, call.kwargs)):
                if found.rule.kind == "choice" and found.direct:
                    out |= {(key, found.params[0], c) for c in found.rule.choices}
        for param, hint in typing.get_type_hints(fn).items():
            if param != "return":
                out |= {(key, param, v) for v in _literal_values(hint)}
    return frozenset(out)


def test_every_option_value_has_a_check() -> None:
    missing = sorted(discovered_options() - set(OPTION_CHECKS))
    assert not missing, f"add a check to OPTION_CHECKS for: {missing}"
    stale = sorted(set(OPTION_CHECKS) - discovered_options())
    assert not stale, f"OPTION_CHECKS lists values no public option has: {stale}"


def run_option_check(key: str, option: str, value: Any, check: Check) -> None:
    """Run ``check`` with ``key`` spied on: it must pass and call ``key`` with ``option=value``."""
    if isinstance(check, Ref):  # imported before the spy, so that it binds the function itself
        importlib.import_module(check.module)
    with spying([key]) as calls:
        check()
    seen = {
        str(args[option]) for k, args in calls if k == key and isinstance(args.get(option), str)
    }
    assert value in seen, (
        f"{check!r} never calls {key} with {option}={value!r} (it used {sorted(seen)})"
    )


@pytest.mark.parametrize(
    ("key", "option", "value"), sorted(OPTION_CHECKS), ids=lambda x: str(x).split()[-1]
)
def test_every_option_value_runs_in_an_exact_check(key: str, option: str, value: Any) -> None:
    load_formula_modules(FORMULA_MODULES)
    run_option_check(key, option, value, OPTION_CHECKS[(key, option, value)])


def test_a_check_that_never_runs_its_value_is_rejected() -> None:
    # the check of "reciprocal" given for "ratio": it passes, but never runs band_on="ratio"
    rejects(
        run_option_check,
        "refimpl.staleness masked_is_weights",
        "band_on",
        "ratio",
        _band_reciprocal,
    )


def test_a_wrong_reference_value_is_rejected() -> None:
    # a guard inverted (the band applied to the ratio when "reciprocal" is asked) changes the result
    def wrong() -> None:
        got = r.masked_is_weights(_LP, _LQ, low=0.4, high=1.5, band_on="ratio")
        _close(got, [1.0, 2.0, 0.0])

    rejects(wrong)
