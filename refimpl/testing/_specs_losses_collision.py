r"""The spec ``token_sum_pi_squared``: the collision probability :math:`S = \sum_v \pi_v^2` of a
trainer's next-token distribution and its gradient with respect to the logits, against
:func:`refimpl.losses.collision.token_sum_pi_squared` and
:func:`refimpl.losses.collision.token_sum_pi_squared_grad`.

The candidate is ``candidate(logits, *, temperature, mask)`` with logits ``(B, T, V)``; it returns
:math:`S` of :math:`\pi = \mathrm{softmax}(z/T)` per position ``(B, T)``, 0 at padding, and is
differentiated by its own autograd with respect to the logits. The reference gradient is
:math:`\frac{2c}{T}\pi_j(\pi_j - S)` (claim CO1). The draws, the conventions ``temperature`` and
``mask`` (verl divides the logits before it calls its function, which takes no mask) and the
huge-logits check are the entropy spec's.

Rounding-error model, with :math:`y = z/T`, :math:`m = \max_j |y_j|`, :math:`L = \log V`,
:math:`f_V` the pairwise sum's factor and :math:`\bar y = \sum_j\pi_j|y_j|`: the division rounds
:math:`y_j` by :math:`u|y_j|`, which moves :math:`S` by at most
:math:`u\sum_j 2\pi_j|\pi_j - S|\,|y_j|`; the log-sum-exp forms round the exponent
:math:`\operatorname{lse}(2y) - 2\operatorname{lse}(y)` by about :math:`u(4m + 2L + 6)` (each
log-sum-exp is of the size of its largest entry), and summing :math:`e^{2\log\pi_j}` rounds each
term relatively by :math:`u(2|\log\pi_j| + 2L + 6)` and the sum by :math:`f_V u S`. The value's
condition is

.. math::

    S\,(4m + 2L + f_V + 8) + \sum_j \pi_j^2\,2|\log\pi_j| + 2\sum_j \pi_j|\pi_j - S|\,|y_j|.

The gradient :math:`g_j = \frac{2c}{T}\pi_j(\pi_j - S)` is, in autograd of the log-sum-exp form,
:math:`\frac{2c}{T}S(\pi_j^2/S - \pi_j)`: each of the two terms is rounded relatively by about
:math:`u(4m + 2|y_j| + 2L + 8)`, so its condition is
:math:`\frac{2|c|}{T}\pi_j(\pi_j + S)(4m + 2|y_j| + 2L + f_V + 10)`, plus the Hessian times the
rounding of :math:`y` (:math:`|\partial g_j/\partial y_k| \le \frac{2|c|}{T}\pi_j(2\delta_{jk} +
6\pi_k)`, so :math:`\frac{2|c|}{T}\pi_j(2|y_j| + 6\bar y)`), plus :math:`3|g_j|`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._engine import Check, Spec
from refimpl.testing._specs_losses import LossDesc, Parts, Terms, calls, resolve
from refimpl.testing._specs_losses_checks import loss_spec
from refimpl.testing._specs_losses_entropy import (
    MASK,
    TEMPERATURE,
    _fixed,
    _no_params,
    _tempered,
    entropy_draw,
    huge_logits_stay_finite,
)
from refimpl.testing.tolerances import summation_factor

__all__ = ["sum_pi_squared_spec"]

Array = NDArray[np.float64]


def _terms(p: Parts, conv: Any) -> Terms:
    z = p.arrays["logits"]
    t = float(p.params["temperature"])
    value = resolve("losses.collision.token_sum_pi_squared")(z, temperature=t, mask=p.mask)
    grad = resolve("losses.collision.token_sum_pi_squared_grad")(
        z, temperature=t, cotangent=p.cotangent, mask=p.mask
    )
    return np.asarray(value), np.asarray(grad)


def _condition(p: Parts, conv: Any, loss: Array, grad: Array) -> Terms:
    t = float(p.params["temperature"])
    y, log_pi, _ = _tempered(np.asarray(p.arrays["logits"]), t, p.mask)
    pi = np.exp(log_pi)
    big_l = math.log(y.shape[-1])
    f = summation_factor(y.shape[-1])
    ay = np.abs(y)
    top = np.max(ay, axis=-1, keepdims=True)
    s = np.sum(pi * pi, axis=-1, keepdims=True)
    y_bar = np.sum(pi * ay, axis=-1, keepdims=True)
    cv = (
        s * (4.0 * top + 2.0 * big_l + f + 8.0)
        + np.sum(pi * pi * 2.0 * np.abs(log_pi), axis=-1, keepdims=True)
        + 2.0 * np.sum(pi * np.abs(pi - s) * ay, axis=-1, keepdims=True)
    )[..., 0]
    cv = np.where(p.mask > 0, cv, 0.0)
    c = (2.0 * np.abs(p.cotangent) / t)[..., None]
    cg = (
        c
        * pi
        * ((pi + s) * (4.0 * top + 2.0 * ay + 2.0 * big_l + f + 10.0) + 2.0 * ay + 6.0 * y_bar)
    )
    cg = np.where((p.mask > 0)[..., None], cg, 0.0) + 3.0 * np.abs(grad)
    return np.asarray(cv, dtype=np.float64), np.asarray(cg, dtype=np.float64)


def sum_pi_squared_spec() -> Spec:
    """The ``token_sum_pi_squared`` spec: value and gradient (w.r.t. the logits) of Σπ²."""
    desc = LossDesc(
        "token_sum_pi_squared",
        "losses.collision.token_sum_pi_squared",
        "candidate(logits, *, temperature, mask) -> (B, T) Σ_v π_v² of softmax(logits/T)",
        ("logits",),
        _terms,
        _condition,
        _no_params,
        conventions=(TEMPERATURE, MASK),
        on_policy=None,
        boundaries=False,
        draws=entropy_draw,
    )
    spec = loss_spec(desc, _fixed)
    huge = Check(
        "huge_logits_stay_finite",
        "logits offset by ±89, ±1000 or ±1e4 and spread by up to ±800 give finite values and "
        "gradients that agree with the reference (the log-sum-exps are shifted by the largest "
        "logit)",
        calls(desc, "huge"),
        huge_logits_stay_finite("values of Σπ²"),
    )
    checks = tuple(
        huge if c.name == "huge_log_ratios_stay_finite" else c
        for c in spec.checks
        if c.name != "clipped_region_has_zero_gradient"
    )
    return dataclasses.replace(spec, checks=checks)
