"""A discrete-event loop on a virtual clock (the queues the cluster model is made of are
core/cluster/fifo.py's, which the Ray runtime's emulated links take too)."""

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
