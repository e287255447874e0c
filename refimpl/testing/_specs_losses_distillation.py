r"""Spec of on-policy distillation with the reverse KL as a reward.

``reverse_kl_distillation`` checks a candidate against
:func:`refimpl.losses.reverse_kl_distillation_loss`:
:math:`\ell_t = -\rho_t\,\mathrm{sg}[\log\pi_T - \log\pi_\theta]` with
:math:`\rho_t = \pi_\theta/\pi_{\text{old}}`, whose gradient is
:math:`\rho_t(\log\pi_\theta - \log\pi_T)`. It is built by
:func:`~refimpl.testing._specs_losses_checks.loss_spec` from a
:class:`~refimpl.testing._specs_losses.LossDesc`, so it carries the loss family's checks (value,
gradient, padding, huge log-ratios) and conventions (``output``/``aggregation``, ``padding``,
``compute_dtype``, ...). There is no clip and no drawn advantage: the on-policy, clipped-region
and boundary checks do not apply.

The draws are the log-ratio family's: ``logp − logp_old`` drawn, and the teacher
``logp_teacher`` the family's second anchor (the behaviour draw, :math:`\{0, \pm\frac12, 2\}`
below the base), so the reward :math:`\log\pi_T - \log\pi_\theta` takes both signs.

Derived tolerance (units of :math:`u`, before the engine's safety factor): the ratio's relative
error :math:`K = |d| + 3` (``ratio_error``) and one rounding of the product, on :math:`|\ell|`
and :math:`|g|`; the candidate's difference :math:`\log\pi_\theta - \log\pi_T` rounds by
:math:`|\log\pi_\theta| + |\log\pi_T|` absolutely, times :math:`\rho` (and the cotangent).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.testing._engine import Call, Conventions, Spec
from refimpl.testing._specs_losses import (
    Array,
    Kind,
    LossDesc,
    Parts,
    Terms,
    ratio_draw,
    ratio_error,
    resolve,
    shift_ratio,
)
from refimpl.testing._specs_losses_checks import loss_spec

__all__ = ["distillation_specs"]

ARRAYS = ("logp", "logp_old", "logp_teacher")


def _terms(p: Parts, conv: Conventions) -> Terms:
    loss, grad = resolve("losses.distillation.reverse_kl_distillation_loss")(
        *(p.arrays[a] for a in ARRAYS), mask=p.mask, cotangent=p.cotangent
    )
    return np.asarray(loss), np.asarray(grad)


def _condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    """(K + 1)|ℓ| + ρ(|l| + |l_T|), and the same on the gradient with the cotangent."""
    k = ratio_error(p, conv)
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_old"])
    t = np.asarray(p.arrays["logp_teacher"])
    with np.errstate(over="ignore", invalid="ignore"):
        rho = np.exp(np.where(p.mask > 0, x - y, 0.0))
        spread = rho * np.where(p.mask > 0, np.abs(x) + np.abs(t), 0.0)
        cv = (k + 1.0) * np.abs(loss) + spread
        cg = (k + 1.0) * np.abs(grad) + np.abs(p.cotangent) * spread
    return np.where(p.mask > 0, cv, 0.0), np.where(p.mask > 0, cg, 0.0)


def _draws(desc: LossDesc, conv: Conventions, kind: Kind) -> st.SearchStrategy[Call]:
    """The log-ratio family's draw, with the behaviour anchor handed over as the teacher."""
    family = dataclasses.replace(desc, arrays=("logp", "logp_old", "logp_behavior"))
    return ratio_draw(family, conv, kind)


def _no_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({})


def distillation_specs() -> tuple[Spec, ...]:
    """The spec ``reverse_kl_distillation``."""
    desc = LossDesc(
        "reverse_kl_distillation",
        "losses.distillation.reverse_kl_distillation_loss",
        "candidate(logp, logp_old, logp_teacher, *, mask)",
        ARRAYS,
        _terms,
        _condition,
        _no_params,
        on_policy=None,
        boundaries=False,
        draws=_draws,
        shifted=shift_ratio,
    )
    return (loss_spec(desc),)
