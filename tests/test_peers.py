"""The vendored SimPy peer is the shared one, unchanged."""

from __future__ import annotations

from _peers import VENDORED, load_simpy_peer, shared_candidates


def test_vendored_peer_equals_every_shared_copy_present() -> None:
    vendored = VENDORED.read_bytes()
    for path in shared_candidates():
        if path.is_file():
            assert path.read_bytes() == vendored, (
                f"{path} differs from {VENDORED}: copy the shared peer into tests/peers/"
            )


def test_the_peer_loads_and_simulates() -> None:
    peer = load_simpy_peer()
    lengths = peer.draw_lengths(4, 64, seed=0)
    stale, trained, _ = peer.simulate_store(lengths, 8, 4)
    assert stale.size == trained.size == 32
