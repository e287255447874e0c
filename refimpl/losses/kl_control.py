r"""The adaptive KL coefficient: the controller that steers the KL penalty toward a target.

Ziegler et al. 2019 ("Fine-Tuning Language Models from Human Preferences", arXiv 1909.08593,
section 2.2) adapt the coefficient :math:`\beta` of the KL penalty so that the measured KL
divergence :math:`\mathrm{KL}_t` between the policy and the reference approaches a target: the
proportional error is clipped to :math:`[-0.2, 0.2]` and scales :math:`\beta` multiplicatively.
verl, OpenRLHF and SkyRL ship it as ``AdaptiveKLController`` with the gain
:math:`K_\beta = n_{\text{steps}}/\text{horizon}`.
"""

from __future__ import annotations

from refimpl._validation import as_real

__all__ = ["adaptive_kl_coefficient"]


def adaptive_kl_coefficient(
    coef: float,
    current_kl: float,
    *,
    target: float,
    horizon: float,
    n_steps: float = 1,
    error_clip: float = 0.2,
) -> float:
    r"""The next KL coefficient of the adaptive controller: one proportional step toward a target.

    .. math::

        e_t = \mathrm{clip}\Bigl(\frac{\mathrm{KL}_t - \mathrm{KL}_{\text{target}}}
              {\mathrm{KL}_{\text{target}}}, -c, c\Bigr), \qquad
        \beta_{t+1} = \beta_t\,(1 + K_\beta\, e_t), \qquad
        K_\beta = \frac{n_{\text{steps}}}{\text{horizon}},

    with :math:`c` = ``error_clip`` (0.2 in the paper and in every framework).

    Parameters
    ----------
    coef : float
        The current coefficient :math:`\beta_t >= 0`.
    current_kl : float
        The measured KL divergence :math:`\mathrm{KL}_t` (finite; the frameworks pass the batch's
        mean KL).
    target : float
        The target KL :math:`\mathrm{KL}_{\text{target}} > 0` (verl: ``target_kl``; OpenRLHF and
        SkyRL: ``target``).
    horizon : float
        The controller's horizon ``> 0`` (all three: ``horizon``).
    n_steps : float, default 1
        The steps since the last update, ``>= 0`` (the frameworks pass the batch size); the
        paper's gain is :math:`K_\beta = n_{\text{steps}}/\text{horizon}`.
    error_clip : float, default 0.2
        The bound ``c >= 0`` of the proportional error.

    Returns
    -------
    float
        :math:`\beta_{t+1}`.

    Raises
    ------
    ValueError
        A non-finite ``current_kl``, ``coef < 0``, ``target <= 0``, ``horizon <= 0``,
        ``n_steps < 0`` or ``error_clip < 0``.

    Notes
    -----
    The coefficient moves toward the target: it grows when :math:`\mathrm{KL}_t` exceeds the
    target, shrinks below it and stays at :math:`\mathrm{KL}_t = \mathrm{KL}_{\text{target}}`.
    When :math:`K_\beta\,c > 1` a step below the target can make the coefficient negative; the
    frameworks do not guard against it and neither does the reference.

    References
    ----------
    Ziegler et al. 2019, arXiv 1909.08593, section 2.2.

    Examples
    --------
    >>> from refimpl.losses.kl_control import adaptive_kl_coefficient
    >>> adaptive_kl_coefficient(0.5, 0.11, target=0.1, horizon=10)  # error 1/10
    0.505
    >>> adaptive_kl_coefficient(0.5, 0.3, target=0.1, horizon=10)  # error clipped at 0.2
    0.51
    """
    beta = as_real(coef, name="coef", low=0.0, meaning="the current KL coefficient")
    kl = as_real(current_kl, name="current_kl", meaning="the measured KL divergence")
    goal = as_real(target, name="target", low=0.0, low_open=True, meaning="the target KL")
    span = as_real(horizon, name="horizon", low=0.0, low_open=True, meaning="the horizon")
    steps = as_real(n_steps, name="n_steps", low=0.0, meaning="steps since the last update")
    c = as_real(error_clip, name="error_clip", low=0.0, meaning="the bound of the error")
    error = min(max(kl / goal - 1.0, -c), c)
    return beta * (1.0 + error * steps / span)
