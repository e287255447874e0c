"""The adaptive KL controllers of verl 0.9.1, OpenRLHF 0.11.2 and SkyRL 0.3.0: the real classes,
one ``update`` each, on hand-worked steps.

The matrix entries ``<framework>.adaptive_kl_controller`` search for disagreements with
refimpl.adaptive_kl_coefficient; these tests pin what was read in each framework's code:
``value · (1 + clip(KL/target − 1, −0.2, 0.2) · n_steps/horizon)``. Inputs are powers of two so
that the steps inside the clip are exact: coefficient 1/2, target 1/4, horizon 8, n_steps 4.
"""

from __future__ import annotations

import pytest

import refimpl
from refimpl.frameworks import adapter

KEYS = ("verl.adaptive_kl_controller", "openrlhf.adaptive_kl_controller",
        "skyrl.adaptive_kl_controller")  # fmt: skip
# KL → the next coefficient by hand: error e, gain n/H = 1/2, β' = 1/2·(1 + e/2)
STEPS = [
    (0.25, 0.5),  # at the target: e = 0
    (0.28125, 0.53125),  # KL = 9/8·target: e = 1/8
    (0.21875, 0.46875),  # KL = 7/8·target: e = −1/8
    (0.75, 0.55),  # KL = 3·target: e clipped at 0.2
    (0.0, 0.45),  # no divergence: e clipped at −0.2
]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(("kl", "expected"), STEPS)
def test_one_update_is_the_papers_step_by_hand(key: str, kl: float, expected: float) -> None:
    found = adapter(key).candidate(0.5, kl, target=0.25, horizon=8, n_steps=4)
    assert found == pytest.approx(expected, rel=1e-15)
    reference = refimpl.adaptive_kl_coefficient(0.5, kl, target=0.25, horizon=8, n_steps=4)
    assert found == pytest.approx(reference, rel=1e-15)


@pytest.mark.parametrize("key", KEYS)
def test_the_gain_is_n_steps_over_horizon(key: str) -> None:
    """KL = 9/8·target (e = 1/8): n_steps = horizon takes the whole step, n_steps = 0 none."""
    candidate = adapter(key).candidate
    assert candidate(0.5, 0.28125, target=0.25, horizon=8, n_steps=8) == 0.5625
    assert candidate(0.5, 0.28125, target=0.25, horizon=8, n_steps=0) == 0.5
