"""The shards' exchange of a clipped BSP round's norm (core/sync/clipping.py says why)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from syncswitch.core.sync.clipping import squared_norm
from syncswitch.core.sync.records import Gradient, NormPartial


@dataclass
class HeldRound:
    """A complete BSP round waiting for the other shards' partials: already combined."""

    gradients: list[Gradient]  # in the order they were summed
    mean: torch.Tensor
    samples: int
    version: int  # the version it produces


@dataclass
class NormExchange:
    """A shard's side of the exchange: its round held, the partials received by version."""

    shard: int
    shards: int
    held: HeldRound | None = None
    received: dict[int, dict[int, float]] = field(default_factory=dict)  # version -> shard -> sq
    incomplete: int = 0  # rounds applied without every shard's partial

    def hold(self, round_: HeldRound) -> NormPartial:
        """Hold a complete round; returns this shard's partial for the others."""
        self.held = round_
        partial = NormPartial(self.shard, round_.version, squared_norm(round_.mean))
        self.received.setdefault(round_.version, {})[self.shard] = partial.squared
        return partial

    def receive(self, partial: NormPartial, version: int) -> None:
        """A peer's partial (`version`: this shard's now; older ones are for rounds done)."""
        if partial.version > version and partial.shard != self.shard:
            self.received.setdefault(partial.version, {})[partial.shard] = partial.squared

    def ready(self) -> bool:
        """Every shard's partial for the held round is in, or a peer is already past it
        (its partial for a later version came: it will never send one for this round)."""
        held = self.held
        if held is None:
            return False
        if len(self.received.get(held.version, {})) == self.shards:
            return True
        return any(version > held.version for version in self.received)

    def release(self) -> tuple[HeldRound, float]:
        """The held round and its global norm (from the partials at hand); it is let go."""
        held = self.held
        assert held is not None
        parts = self.received.pop(held.version, {})
        if len(parts) < self.shards:
            self.incomplete += 1
        self.held = None
        for version in [v for v in self.received if v < held.version]:
            del self.received[version]
        return held, math.sqrt(sum(parts.values()))

    def forget(self) -> None:
        """A rollback or the end: nothing held, nothing received counts any more."""
        self.held = None
        self.received.clear()
