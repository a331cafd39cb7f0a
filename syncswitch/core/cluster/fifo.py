"""A first-in, first-out queue of work on one resource, on any clock: the simulator's links,
NICs and cores (virtual seconds), and an emulated link on Ray (wall-clock seconds)."""

from __future__ import annotations


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
