"""A simulated worker process: what the simulator keeps of it between its events."""

from __future__ import annotations

from dataclasses import dataclass, field

from syncswitch.core.sync.records import WorkerStats
from syncswitch.runtime.replies import Reply
from syncswitch.runtime.step import WorkerStep


@dataclass
class SimWorker:
    index: int
    step: WorkerStep  # its step (runtime/step.py): local rounds' SGD, faults, step times
    running: bool = False  # its training loop is on
    life: int = 0  # bumped when it dies or its servers are replaced: older events are stale
    incarnation: int = 0
    sequence: int = 0
    hung: bool = False  # an injected hang: alive, silent
    last_heard_s: float = 0.0
    replies: dict[int, Reply] = field(default_factory=dict)
    step_started_s: float = 0.0
    step_s: float = 0.0
    step_times: list[float] = field(default_factory=list)
    wait_times: list[float] = field(default_factory=list)

    def stats(self) -> WorkerStats:
        # Simulated: the step is all compute, and there is no CPU time to measure.
        return WorkerStats.of_steps(self.index, self.step_times, self.step_times, self.wait_times)
