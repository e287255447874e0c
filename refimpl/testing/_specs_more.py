"""Specs of the staleness decay, admission capacity, effective sample size and masking
diagnostics (``_specs_staleness``), the effort-shaped reward and the published length
penalties, DAPO overlong, Kimi k1.5, cosine, L1 (``_specs_length_rewards``), collected in
the order the registry lists them."""

from __future__ import annotations

from refimpl.testing._engine import Spec
from refimpl.testing._specs_length_rewards import (
    COSINE,
    DAPO,
    FLOOR,
    KIMI,
    L1_EXACT,
    L1_MAX,
    SCOPE,
    SHAPED,
    _kimi_flat_group,
    _l1_never_above,
)
from refimpl.testing._specs_staleness import (
    ADMISSION,
    DECAY,
    DIAGNOSTICS,
    ESS,
    ESS_SCALE,
    _admission_calls,
    _ess_scale,
)

__all__ = [
    "ADMISSION",
    "COSINE",
    "DAPO",
    "DECAY",
    "DIAGNOSTICS",
    "ESS",
    "ESS_SCALE",
    "FLOOR",
    "KIMI",
    "L1_EXACT",
    "L1_MAX",
    "SCOPE",
    "SHAPED",
    "SPECS",
    "_admission_calls",
    "_ess_scale",
    "_kimi_flat_group",
    "_l1_never_above",
]

SPECS: tuple[Spec, ...] = (
    DECAY,
    ADMISSION,
    ESS,
    DIAGNOSTICS,
    SHAPED,
    DAPO,
    KIMI,
    COSINE,
    L1_EXACT,
    L1_MAX,
)
