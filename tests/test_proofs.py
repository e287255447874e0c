"""Run every claim registered in proofs/ (each is a test of its own)."""

from __future__ import annotations

import pytest

from proofs._framework import Claim, all_claims

CLAIMS = all_claims()


def test_claims_are_registered() -> None:
    assert CLAIMS, "no proof module registered a claim"


@pytest.mark.parametrize("claim", CLAIMS.values(), ids=list(CLAIMS))
def test_claim_holds(claim: Claim) -> None:
    claim.check()
