"""A discrete-event loop on a virtual clock, and the queues the cluster model is made of."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class EventQueue:
    """Events run in time order; events at the same time run in the order they were made, so
    a simulation is reproducible to the last bit. Each push and pop is O(log events)."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()

    def at(self, time_s: float, handler: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._heap, (max(time_s, self.now_s), next(self._order), handler, args))

    def run_next(self) -> bool:
        """Run the earliest event; False when there is none."""
        if not self._heap:
            return False
        time_s, _, handler, args = heapq.heappop(self._heap)
        self.now_s = time_s
        handler(*args)
        return True

    def __len__(self) -> int:
        return len(self._heap)


class FifoQueue:
    """One job at a time, at full speed, in the order jobs are handed in: a link that carries
    one transfer after another, or a server core that applies one gradient after another.

    Serving in turn moves as many bytes per second as sharing the link fairly would, so a
    busy server still becomes the bottleneck as workers grow; only the order in which
    concurrent transfers finish differs.
    """

    def __init__(self) -> None:
        self.free_at_s = 0.0
        self.busy_s = 0.0  # total service time, for utilisation

    def serve(self, ready_s: float, duration_s: float) -> float:
        """When a job that is ready at `ready_s` and takes `duration_s` is done."""
        start = ready_s if ready_s > self.free_at_s else self.free_at_s
        self.free_at_s = start + duration_s
        self.busy_s += duration_s
        return self.free_at_s
