"""The ``--param`` keys of the ``policy_loss`` spec of ``refimpl check``, and their values.

Kept apart from :mod:`refimpl.testing._trace_losses` (which recomputes the losses) so that the
table of specs, and so every check, can name them without loading that module.
"""

from __future__ import annotations

#: the surrogates' numeric parameters (each applies to the surrogates whose function has it)
_NUMERIC = (
    "eps_low",
    "eps_high",
    "dual_clip",
    "log_ratio_clamp",
    "log_ratio_cap",
    "tau_pos",
    "tau_neg",
    "cap",
)
_AGGREGATIONS = (
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "token_sum_norm",
    "token_sum",
)
_DENOMINATORS = ("micro_batch", "step")
_EMPTY_ROWS = ("excluded", "counted")

#: required ``--param`` keys and their kinds
PARAMS: dict[str, type] = {"surrogate": str, "aggregation": str}
#: optional ``--param`` keys and their kinds
OPTIONS: dict[str, type] = {
    **dict.fromkeys(_NUMERIC, float),
    "constant": float,
    "empty_rows": str,
    "denominator": str,
    "kl_coef": float,
    "kl_estimator": str,
    "kl_clamp": float,
}
