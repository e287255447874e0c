r"""Specs of the band-masked importance-weighted policy gradient and the negative log-likelihood.

``band_masked_pg`` checks a candidate against :func:`refimpl.losses.band_masked_pg_loss` (the
detached ratio kept only inside the open band :math:`(1-\varepsilon_l, 1+\varepsilon_h)`, 0
outside), ``nll`` against :func:`refimpl.losses.nll_loss` (:math:`-\log\pi` per token). Both are
built by :func:`~refimpl.testing._specs_losses_checks.loss_spec` from a
:class:`~refimpl.testing._specs_losses.LossDesc`, so they carry the loss family's checks (value,
gradient, padding, on-policy, the zero gradient out of the band, huge log-ratios, the band's ends)
and conventions (``output``/``aggregation``, ``padding``, ``compute_dtype``, ...).

Derived tolerances (units of :math:`u`, before the engine's safety factor). Band-masked: where the
weight is the ratio, the loss :math:`-\rho A l` inherits the ratio's relative error :math:`K`
(``ratio_error``: :math:`|d| + 3`, plus the inputs' magnitude when the candidate computes in a
coarser dtype) and two more roundings of the products, so
:math:`|A l|\rho(K + 1) + 3|\ell|`; the gradient :math:`-\rho A c` is off by
:math:`|g|(K + 3)`; a token that rounds across an end of the band is accepted either side by the
one-sided shift of ``shift_ratio``. Negative log-likelihood: a negation is exact, so the only error
is the candidate's conversion to its dtype and back, :math:`2|\ell|` and :math:`2|g|`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.testing._engine import Convention, Conventions, Spec
from refimpl.testing._specs_losses import Array, LossDesc, Parts, Terms, ratio_error, resolve
from refimpl.testing._specs_losses import shift_ratio as _shift_ratio
from refimpl.testing._specs_losses_checks import loss_spec

__all__ = ["band_masked_specs"]

BAND_CLAMP = Convention(
    "log_ratio_clamp",
    None,
    (None,),
    "c > 0: the log-ratio is clipped to [−c, c] before exp (it changes the detached weight only)",
    number=True,
    who="20: SkyRL 0.3.0 rollout_is_policy_loss (safe_exp_delta)",
)


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _band_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    """Both widths positive, so ratio 1 is inside the band (the on-policy check holds)."""
    low = st.one_of(st.sampled_from([0.2, 0.1, 1.0]), _floats(0.01, 1.0))
    high = st.one_of(st.sampled_from([0.2, 0.28, 4.0]), _floats(0.01, 5.0))
    return st.builds(lambda lo, hi: {"eps_low": lo, "eps_high": hi}, low, high)


def _band_terms(p: Parts, conv: Conventions) -> Terms:
    loss, grad = resolve("losses.band_masked.band_masked_pg_loss")(
        p.arrays["logp"],
        p.arrays["logp_old"],
        p.arrays["advantages"],
        **p.params,
        log_ratio_clamp=conv["log_ratio_clamp"],
        mask=p.mask,
        cotangent=p.cotangent,
    )
    return np.asarray(loss), np.asarray(grad)


def _band_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    """|A·l|·ρ·(K + 1) + 3|ℓ| inside the band (0 outside: the loss is exactly 0); |g|(K + 3)."""
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_old"])
    d = np.where(p.mask > 0, x - y, 0.0)
    clamp = conv.get("log_ratio_clamp")
    if clamp is not None:
        d = np.clip(d, -clamp, clamp)
    k = ratio_error(p, conv)
    with np.errstate(over="ignore"):
        rho = np.exp(d)
    lo, hi = 1.0 - float(p.params["eps_low"]), 1.0 + float(p.params["eps_high"])
    live = (rho >= lo) & (rho <= hi) & (p.mask > 0)
    a = np.where(p.mask > 0, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)
    sens = np.abs(a * np.where(p.mask > 0, x, 0.0)) * np.where(live, rho, 0.0)
    return sens * (k + 1.0) + 3.0 * np.abs(loss), np.abs(grad) * (k + 3.0)


def _band_edges(params: dict[str, Any], conv: Conventions) -> list[float]:
    out = [math.log1p(float(params["eps_high"]))]
    if float(params["eps_low"]) < 1.0:
        out.append(math.log1p(-float(params["eps_low"])))
    if conv["log_ratio_clamp"] is not None:
        out += [conv["log_ratio_clamp"], -conv["log_ratio_clamp"]]
    return out


def _out_of_band(conv: Conventions) -> str | None:
    """Every band has an outside, where the gradient is 0."""
    return None


def _nll_terms(p: Parts, conv: Conventions) -> Terms:
    loss, grad = resolve("losses.likelihood.nll_loss")(
        p.arrays["logp"], mask=p.mask, cotangent=p.cotangent
    )
    return np.asarray(loss), np.asarray(grad)


def _nll_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    return 2.0 * np.abs(loss), 2.0 * np.abs(grad)


def _no_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({})


def band_masked_specs() -> tuple[Spec, ...]:
    """The specs ``band_masked_pg`` and ``nll``."""
    band = LossDesc(
        "band_masked_pg",
        "losses.band_masked.band_masked_pg_loss",
        "candidate(logp, logp_old, advantages, *, eps_low, eps_high, mask)",
        ("logp", "logp_old", "advantages"),
        _band_terms,
        _band_condition,
        _band_params,
        conventions=(BAND_CLAMP,),
        edges=_band_edges,
        clips=_out_of_band,
        shifted=_shift_ratio,
        guesses={"log_ratio_clamp": [20.0]},
    )
    nll = LossDesc(
        "nll",
        "losses.likelihood.nll_loss",
        "candidate(logp, *, mask)",
        ("logp",),
        _nll_terms,
        _nll_condition,
        _no_params,
        on_policy=None,
        boundaries=False,
    )
    return loss_spec(band), loss_spec(nll)
