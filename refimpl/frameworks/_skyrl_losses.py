"""SkyRL (skyrl 0.3.0): its losses, aggregation, KL, advantage and log-probability functions."""

from __future__ import annotations

from refimpl.frameworks._registry import Adapter

ADAPTERS: tuple[Adapter, ...] = ()
