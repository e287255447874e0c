"""OpenRLHF (openrlhf 0.11.2): its losses, aggregation, KL, advantage and log-probability functions."""

from __future__ import annotations

from refimpl.frameworks._registry import Adapter

ADAPTERS: tuple[Adapter, ...] = ()
