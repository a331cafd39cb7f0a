"""Who the synchronizer holds back, and why: gradients at the BSP barrier, workers told to
wait (at the barrier or by the SSP bound), and each worker's clock for the SSP bound."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Gradient


@dataclass
class WaitRoom:
    workers: int
    pending: list[Gradient] = field(default_factory=list)  # gradients at the BSP barrier
    waiting: set[int] = field(default_factory=set)  # workers told to wait
    clocks: dict[int, int] = field(default_factory=dict)  # gradients sent in this phase

    def __post_init__(self) -> None:
        if not self.clocks:
            self.reset_clocks()

    def reset_clocks(self) -> None:
        """Clocks count steps within the phase, so an SSP phase starts with no one ahead."""
        self.clocks = {w: 0 for w in range(self.workers)}

    def tick(self, worker: int) -> None:
        self.clocks[worker] = self.clocks.get(worker, 0) + 1

    def pending_workers(self) -> set[int]:
        return {g.worker for g in self.pending}

    def slowest_clock(self, active: Set[int]) -> int:
        return min((self.clocks.get(w, 0) for w in active), default=0)

    def release_all(self) -> list[int]:
        released = sorted(self.waiting)
        self.waiting.clear()
        return released

    def release_within_bound(self, spec: ProtocolSpec, active: Set[int]) -> list[int]:
        """Waiting workers allowed to go on under an asynchronous rule (`spec`)."""
        bound = spec.clock_bound
        if bound is not None:
            slowest = self.slowest_clock(active)
            released = sorted(w for w in self.waiting if self.clocks.get(w, 0) - slowest <= bound)
        else:
            released = sorted(self.waiting)
        self.waiting -= set(released)
        return released

    def release_not_at_barrier(self) -> list[int]:
        """Workers held by an SSP bound join a coming barrier instead of waiting."""
        released = sorted(w for w in self.waiting if w not in self.pending_workers())
        self.waiting -= set(released)
        return released
