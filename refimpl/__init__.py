"""refimpl: a property-based, verified reference library for asynchronous RL of language models.

The public API is flat: every stable name of conventions §stable-names is importable from ``refimpl`` directly and is
defined in one of the modules below, which own their ``__all__``.

- :mod:`refimpl.dispatch`: length bias of dispatch policies, inclusion probabilities, IPW, censoring,
  the fluid model of continuous dispatch.
- :mod:`refimpl.staleness`: versions, staleness, masks, importance weights, diagnostics.
- :mod:`refimpl.frameworks`: each framework's staleness setting translated into ``η``.
- :mod:`refimpl.effort`: the effort penalty ``k(b)``, shaped reward, optimal length, frontier.
- :mod:`refimpl.penalties`: published length penalties (Kimi k1.5, DAPO, cosine, L1).
- :mod:`refimpl.sim`: the asynchronous rollout-queue simulator.
- :mod:`refimpl.testing`: strategies and conformance checks for downstream implementations.
"""

from refimpl import dispatch, effort, frameworks, penalties, staleness
from refimpl.dispatch import *
from refimpl.effort import *
from refimpl.frameworks import *
from refimpl.penalties import *
from refimpl.staleness import *

__version__ = "0.1.0.dev0"

__all__ = [
    *dispatch.__all__,
    *staleness.__all__,
    *frameworks.__all__,
    *effort.__all__,
    *penalties.__all__,
]
