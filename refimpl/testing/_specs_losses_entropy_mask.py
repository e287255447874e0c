r"""Spec of the high-entropy token mask (``high_entropy_mask``, value only).

The reference is :func:`refimpl.losses.entropy_mask.high_entropy_mask`: keep the valid tokens
whose entropy is at least the :math:`(1-\rho)`-quantile (linear interpolation) of the valid
entropies. A token whose entropy is within rounding of the threshold may go either way: the
interpolation rounds by a few ulps of the largest entropy, in the candidate's dtype, or in float32
when the candidate declares ``threshold_dtype='float32'`` (TRL casts the entropies with
``.float()`` before ``torch.quantile``). Entropies are drawn with ties (several tokens at the
threshold) and all-padding rows; garbage at padding must change nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.entropy_mask import high_entropy_mask
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing.tolerances import SAFETY

__all__ = ["entropy_mask_specs"]

Array = NDArray[np.float64]

THRESHOLD_DTYPE = Convention(
    "threshold_dtype",
    None,
    (None, "float32"),
    "the dtype the quantile is computed in: the candidate's (None) or float32",
    who="float32: TRL 1.16.0 GRPOTrainer.get_high_entropy_mask (entropies[mask].float())",
)


@st.composite
def _calls(draw: st.DrawFn, conv: Conventions, *, garbage: bool = False) -> list[Call]:
    rows, width = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    values = st.one_of(
        st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        st.floats(0.0, 5.0, allow_nan=False, allow_subnormal=False),
    )
    h = np.asarray(draw(st.lists(values, min_size=rows * width, max_size=rows * width)))
    h = h.reshape(rows, width)
    lengths = np.asarray(draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows)))
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
    rho = draw(st.one_of(st.sampled_from([0.2, 0.5, 0.0, 1.0]), st.floats(0.0, 1.0)))
    call: Call = ((h,), {"top_fraction": rho, "mask": mask})
    if not garbage:
        return [call]
    junk = draw(st.sampled_from([100.0, 1e6, 0.0, 3.0]))
    return [call, ((np.where(mask > 0, h, junk),), {"top_fraction": rho, "mask": mask})]


@st.composite
def _nested(draw: st.DrawFn, conv: Conventions) -> list[Call]:
    """The same entropies with two fractions ρ1 <= ρ2."""
    ((h,), kwargs) = draw(_calls(conv))[0]
    rho = sorted([float(kwargs["top_fraction"]), draw(st.floats(0.0, 1.0))])
    return [((h,), {**kwargs, "top_fraction": r}) for r in rho]


def _nested_sets(case: Case) -> None:
    """Keeping a larger fraction keeps every token the smaller one kept."""
    small, large = _found(case, 0), _found(case, 1)
    either = _zone(case, 0) | _zone(case, 1)
    bad = (small > large) & ~either
    assert not bad.any(), (
        f"tokens {np.argwhere(bad)[:5].tolist()} are kept at the smaller top_fraction but not at "
        "the larger one"
    )


def _expected(call: Call, conv: Conventions) -> Array:
    (h,), kwargs = call
    return high_entropy_mask(h, **kwargs)


def _zone(case: Case, i: int) -> NDArray[np.bool_]:
    """Valid tokens within rounding of the threshold: either decision is accepted."""
    (h,), kwargs = case.calls[i]
    h = np.asarray(h, dtype=np.float64)
    m = np.asarray(kwargs["mask"]) > 0
    if not m.any():
        return np.zeros(h.shape, dtype=np.bool_)
    valid = h[m]
    theta = float(np.quantile(valid, 1.0 - float(kwargs["top_fraction"])))
    u = 2.0**-24 if case.conventions["threshold_dtype"] == "float32" else case.u
    zone = SAFETY * u * (float(np.max(np.abs(valid))) + abs(theta) + 1e-300)
    return np.asarray(m & (np.abs(h - theta) <= zone), dtype=np.bool_)


def _found(case: Case, i: int) -> Array:
    found = np.asarray(case.found[i], dtype=np.float64)
    shape = np.shape(case.expected(i))
    assert found.shape == shape, f"a mask of shape {found.shape}, expected {shape}"
    return found


def _agrees(case: Case) -> None:
    for i in range(len(case.calls)):
        found, expected = _found(case, i), case.expected(i)
        either = _zone(case, i)
        case.show("found:   ", found)
        case.show("expected:", expected)
        bad = (found != expected) & ~either
        assert not bad.any(), (
            f"the mask differs from refimpl.losses.entropy_mask.high_entropy_mask at "
            f"{[tuple(int(j) for j in b) for b in np.argwhere(bad)[:5]]}: found "
            f"{found[bad][:5].tolist()}, expected {expected[bad][:5].tolist()}"
        )


def _padding(case: Case) -> None:
    _agrees(case)
    a, b = _found(case, 0), _found(case, 1)
    either = _zone(case, 0) | _zone(case, 1)
    bad = (a != b) & ~either
    assert not bad.any(), f"garbage at padding changed the mask at {np.argwhere(bad)[:5].tolist()}"
    (_,), kwargs = case.calls[0]
    pad = np.asarray(kwargs["mask"]) == 0
    assert not np.any(a[pad] != 0), "a padding token was kept"


def _keeps_enough(case: Case) -> None:
    """At least n − ⌈(1 − ρ)(n − 1)⌉ valid tokens are kept (ties at the threshold all count)."""
    found = _found(case, 0)
    (_,), kwargs = case.calls[0]
    n = int(np.sum(np.asarray(kwargs["mask"]) > 0))
    if n == 0:
        return
    lowest = n - int(np.ceil((1.0 - float(kwargs["top_fraction"])) * (n - 1) - 1e-12))
    slack = int(np.sum(_zone(case, 0)))
    kept = int(np.sum(found))
    assert kept + slack >= lowest, f"kept {kept} of {n} valid tokens, at least {lowest} expected"


def entropy_mask_specs() -> tuple[Spec, ...]:
    """The spec ``high_entropy_mask``."""
    plain: Any = lambda conv: _calls(conv)  # noqa: E731
    dirty: Any = lambda conv: _calls(conv, garbage=True)  # noqa: E731
    checks: tuple[Check, ...] = (
        Check(
            "values",
            "the mask agrees with refimpl.losses.entropy_mask.high_entropy_mask (a token within "
            "rounding of the threshold may go either way)",
            plain,
            _agrees,
        ),
        Check(
            "padding_ignored",
            "garbage entropies at padding change nothing, and padding is never kept",
            dirty,
            _padding,
        ),
        Check(
            "keeps_the_top_fraction",
            "at least n − ⌈(1 − ρ)(n − 1)⌉ of the n valid tokens are kept",
            plain,
            _keeps_enough,
        ),
    )
    checks = (
        *checks,
        Check(
            "nested_in_top_fraction",
            "a larger top_fraction keeps every token a smaller one keeps",
            lambda conv: _nested(conv),
            _nested_sets,
        ),
    )
    spec = Spec(
        name="high_entropy_mask",
        reference="losses.entropy_mask.high_entropy_mask",
        signature="candidate(entropies, *, top_fraction, mask) -> (B, T) 1 = kept",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected,
        condition=lambda call, conv, expected: np.zeros(np.shape(expected)),
        checks=checks,
        conventions=(THRESHOLD_DTYPE,),
    )
    return (spec,)
