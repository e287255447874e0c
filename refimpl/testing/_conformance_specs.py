"""The specs a candidate can be checked against, and what each one declares.

The registry of specs (the function families with a reference in refimpl), their stable order,
and the questions a user asks of it before a run: :func:`spec_names`, :func:`check_names`,
:func:`conventions`. :func:`resolve_spec` is the first step of :func:`check_conformance`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from refimpl._validation import invalid
from refimpl.testing._engine import Convention, Spec
from refimpl.testing._specs_basic import SPECS as _BASIC
from refimpl.testing._specs_losses_table import specs as _loss_table
from refimpl.testing._specs_more import SPECS as _MORE
from refimpl.testing._specs_weights import SPECS as _WEIGHTS

__all__ = ["check_names", "conventions", "resolve_spec", "spec_names"]

_ORDER = (
    "effort_penalty",
    "inclusion_probability",
    "staleness_mask",
    "tis",
    "masked_is",
    "staleness",
    "vtrace",
)
_ALL = {s.name: s for s in (*_BASIC, *_WEIGHTS, *_MORE)}
_SPECS: dict[str, Spec] = {name: _ALL[name] for name in _ORDER}
_SPECS.update({name: s for name, s in _ALL.items() if name not in _SPECS})
#: the loss specs (value and gradient against refimpl.losses), listed by spec_names(losses=True)
_LOSSES: dict[str, Spec] = {s.name: s for s in _loss_table()}
_SPECS.update(_LOSSES)


for _s in _SPECS.values():
    assert len({c.name for c in _s.checks}) == len(_s.checks), f"duplicate checks in {_s.name}"


def spec_names(*, losses: bool = False) -> tuple[str, ...]:
    """The specs that :func:`check_conformance` knows, in a stable order (new ones at the end).

    With ``losses=True``: the loss specs instead (``ppo_clip``, ``gspo``, ``kl_penalty``, …),
    whose checks compare the value *and* the gradient of a candidate with :mod:`refimpl.losses`.

    Examples
    --------
    >>> from refimpl.testing import spec_names
    >>> spec_names()[:7]  # doctest: +NORMALIZE_WHITESPACE
    ('effort_penalty', 'inclusion_probability', 'staleness_mask', 'tis', 'masked_is', 'staleness',
     'vtrace')
    >>> "tis_geometric" in spec_names() and "decoupled_ppo" in spec_names()
    True
    >>> spec_names(losses=True)[:3]
    ('ppo_clip', 'cispo', 'sapo')
    """
    if losses:
        return tuple(_LOSSES)
    return tuple(name for name in _SPECS if name not in _LOSSES)


def resolve_spec(name: Any) -> Spec:
    """The spec named ``name``, or an error that lists the known ones."""
    if not isinstance(name, str) or name not in _SPECS:
        raise invalid(
            "spec",
            f"be one of {', '.join(map(repr, _SPECS))}",
            name,
            "Pass the name of the function family your candidate implements.",
        )
    return _SPECS[name]


def check_names(spec: str) -> tuple[str, ...]:
    """The stable names of the checks of ``spec``, in the order they run.

    Examples
    --------
    >>> from refimpl.testing import check_names
    >>> check_names("staleness_mask")  # doctest: +NORMALIZE_WHITESPACE
    ('agrees_with_reference', 'keeps_on_policy', 'keeps_at_bound', 'drops_beyond_bound',
     'binary', 'non_increasing_in_staleness')
    """
    return tuple(c.name for c in resolve_spec(spec).checks)


def conventions(spec: str) -> tuple[Convention, ...]:
    """The convention keys a candidate of ``spec`` may declare: key, default, values, meaning.

    A framework that differs from refimpl's default only by convention declares it in one
    argument, ``check_conformance(..., conventions={key: value})``; the reference then computes
    that variant exactly. ``who`` names the frameworks that follow a non-default value (read from
    their installed sources).

    Examples
    --------
    >>> from refimpl.testing import conventions
    >>> [c.key for c in conventions("staleness_mask")]
    ['staleness_count']
    >>> pad = next(c for c in conventions("tis") if c.key == "padding")
    >>> pad.default, pad.choices
    ('zero', ('zero', 'one', 'ignored'))
    """
    return resolve_spec(spec).conventions


def _available(package: ModuleType, reference: str) -> bool:
    """Whether ``refimpl.<reference>`` exists: a flat name, or ``module.path.name`` (the losses'
    references are named by their module, ``losses.clipped.ppo_clip_loss``)."""
    if "." not in reference:
        return hasattr(package, reference)
    module, _, name = reference.rpartition(".")
    try:
        return hasattr(importlib.import_module(f"{package.__name__}.{module}"), name)
    except ImportError:
        return False
