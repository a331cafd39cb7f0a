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
    """A shard's side of the exchange: its round held, and the peers' partials for it.

    Partials are not paired by version: the shards' versions can drift apart (clipping.py).
    They need not be. A peer's partial for a round exists only once every worker has sent
    that round, and a worker sends it only after every shard let the round before go; no
    peer can send the next round's before this shard lets this one go. So what a shard
    receives between letting one round go and the next is that next round's parts. What
    came before an update of another kind (a switch cut a round short, an ASP phase) is for
    no round this shard will hold, and is forgotten then (`updated`).
    """

    shard: int
    shards: int
    held: HeldRound | None = None
    # Shard -> its squared norm of the round held now, or held next.
    received: dict[int, float] = field(default_factory=dict)
    incomplete: int = 0  # rounds applied without every shard's partial

    def hold(self, round_: HeldRound) -> NormPartial:
        """Hold a complete round; returns this shard's partial for the others."""
        self.held = round_
        partial = NormPartial(self.shard, round_.version, squared_norm(round_.mean))
        self.received[self.shard] = partial.squared
        return partial

    def receive(self, partial: NormPartial) -> None:
        """A peer's partial (its version is its own count, not compared: see above)."""
        if partial.shard != self.shard:
            self.received[partial.shard] = partial.squared

    def ready(self) -> bool:
        """Every shard's partial for the held round is in."""
        return self.held is not None and len(self.received) == self.shards

    def release(self) -> tuple[HeldRound, float]:
        """The held round and its global norm (from the partials at hand); it is let go."""
        held, parts = self.held, self.received
        assert held is not None
        if len(parts) < self.shards:
            self.incomplete += 1
        self.held, self.received = None, {}
        return held, math.sqrt(sum(parts.values()))

    def updated(self) -> None:
        """This shard made an update of another kind, or switched: partials received since
        the last round let go belong to no round it will hold."""
        if self.held is None:
            self.received.clear()

    def forget(self) -> None:
        """A rollback or the end: nothing held, nothing received counts any more."""
        self.held = None
        self.received.clear()
