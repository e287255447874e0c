"""Run every claim registered in proofs/ (each is a test of its own)."""

from __future__ import annotations

import pytest

from proofs._framework import GENERAL, Claim, all_claims, claim, derivation_page

CLAIMS = all_claims()


def test_claims_are_registered() -> None:
    assert CLAIMS, "no proof module registered a claim"


@pytest.mark.parametrize("claim", CLAIMS.values(), ids=list(CLAIMS))
def test_claim_holds(claim: Claim) -> None:
    claim.check()


def test_every_claim_states_its_scope() -> None:
    assert all(c.scope.strip() for c in CLAIMS.values())


def test_a_claim_without_a_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="must state its scope"):
        claim("XX0", "a claim", scope=" ")


def test_the_vtrace_claims_say_they_were_proved_at_horizon_4() -> None:
    page = derivation_page("proofs.vtrace", CLAIMS.values())
    for cid in ("VT1", "VT2", "VT3"):
        assert CLAIMS[cid].scope != GENERAL
        assert "horizon T = 4" in CLAIMS[cid].scope
        section = page.split(f"### {cid}\n", 1)[1].split("### ", 1)[0]
        assert f"*Scope:* {CLAIMS[cid].scope}." in section
