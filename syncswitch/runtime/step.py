"""One worker step, as every runtime takes it.

The Ray worker (runtime/ray/worker.py) and the simulator (runtime/sim/runtime.py) both take
their steps here: where a worker's data order, augmentation and step-time draws stand after
a number of steps (`WorkerStreams`), and the step itself (`WorkerStep`): a gradient, or in a
local-H phase H steps of the worker's own SGD and one delta (core/sync/local.py); the faults
injected into it; and its step time from the emulated device time and the straggler
scenario. What a runtime does with a step's time is its own: Ray waits it out on the wall
clock, the simulator schedules events on its virtual one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from syncswitch.core.cluster.emulation import EmulationConfig, StepTimeModel
from syncswitch.core.reliability.faults import Fault, FaultKind, inject
from syncswitch.core.sync.local import InnerLoop, LocalRound, ModelBuffers
from syncswitch.core.sync.server_optimizer import OptimizerConfig
from syncswitch.core.sync.sharding import BatchStream

# A worker's gradient (a copy or a buffer it reuses) and loss on the weights it is given.
GradientFn = Callable[[np.ndarray], tuple[np.ndarray, float]]


@dataclass
class WorkerStreams:
    """What a worker draws from, step by step: its data order, its augmentation generator and
    its emulated device times."""

    batches: BatchStream
    step_times: StepTimeModel
    generator: torch.Generator  # data augmentation

    @classmethod
    def at(
        cls,
        shard: np.ndarray,
        *,
        worker: int,
        batch_size: int,
        seed: int,
        emulation: EmulationConfig,
        sequence: int,
        batches: int | None = None,
    ) -> WorkerStreams:
        """Data order as it stands after `batches` batches (`sequence` unless a local phase
        made some messages stand for several), augmentation and step times after `sequence`
        steps, so a restarted worker or a resumed run goes on where the checkpoint left off."""
        stream = BatchStream(shard, batch_size, seed, worker)
        for _ in range(sequence if batches is None else batches):
            stream.next_indices()
        return cls(
            stream,
            StepTimeModel(emulation, worker, seed + sequence),
            torch.Generator().manual_seed(seed * 104729 + worker + 7 * sequence),
        )


@dataclass(frozen=True)
class Computed:
    """A step's result before it is sent."""

    gradient: np.ndarray  # a gradient, or in a local round the delta after its steps
    loss: float
    steps: int  # a local round's steps (0: one gradient)
    ends: FaultKind | None  # an injected crash or hang now due: the runtime carries it out
    # A gradient's L2 norm, sent with it when the run clips (core/sync/clipping.py).
    norm: float | None = None


class WorkerStep:
    """One worker's steps: its own SGD for local rounds, its injected faults, its step time."""

    def __init__(
        self,
        worker: int,
        emulation: EmulationConfig,
        faults: tuple[Fault, ...],
        optimizer: OptimizerConfig | None = None,
    ) -> None:
        self.worker = worker
        self.emulation = emulation
        self.all_faults = faults
        self.faults = faults  # those of the current incarnation
        self.inner = InnerLoop(optimizer)  # its own optimizer in local phases
        self.max_grad_norm = optimizer.max_grad_norm if optimizer is not None else None

    def start(self, incarnation: int, *, new_process: bool = False) -> None:
        """A run of the worker starts: a crash or a hang happens in the first incarnation
        only; a new process starts its local rounds' SGD afresh."""
        self.faults = tuple(f for f in self.all_faults if not (f.kind.once and incarnation > 0))
        if new_process:
            self.inner.forget()

    def compute(
        self,
        weights: np.ndarray,
        local: LocalRound | None,
        progress: float,
        gradient: GradientFn,
        model: ModelBuffers | None = None,
    ) -> Computed:
        """The step on the weights pulled: one gradient, or a local round's H steps and delta
        (in the `model`'s own buffers when given: InnerLoop.run); then the faults active at
        `progress`."""
        steps = 0 if local is None else local.steps
        if local is None:
            values, loss = gradient(weights)
        else:
            values, loss = self.inner.run(weights, local, gradient, model)
        values, ends = inject(self.faults, values, progress)
        norm = None
        if self.max_grad_norm is not None and local is None:
            # Measured after the faults, as the servers receive it: a shard has only a slice.
            norm = float(np.linalg.norm(values.astype(np.float64, copy=False)))
            # inf, never NaN (the wire's "not measured"): every shard drops it alike.
            norm = norm if math.isfinite(norm) else math.inf
        return Computed(values, loss, steps, ends, norm)

    def modelled_s(self, step_times: StepTimeModel, steps: int) -> list[float]:
        """The emulated device time of each of the step's steps (one for a gradient)."""
        return [step_times.next_step_s() for _ in range(max(steps, 1))]

    def simulated_times_s(
        self, step_times: StepTimeModel, steps: int, progress: float, run_s: float
    ) -> list[float]:
        """On the simulator: each step's modelled time, slowed by the episodes in force."""
        stragglers = self.emulation.stragglers
        return [
            stragglers.step_time_s(self.worker, base_s, progress, run_s)
            for base_s in self.modelled_s(step_times, steps)
        ]

    def real_step_s(
        self,
        step_times: StepTimeModel,
        steps: int,
        progress: float,
        elapsed_s: float,
        compute_s: float,
    ) -> float:
        """On real processes: the modelled time (or the real compute without one) slowed by
        the episodes in force, and never shorter than the real compute."""
        base_s = sum(self.modelled_s(step_times, steps)) or compute_s
        slowed_s = self.emulation.stragglers.step_time_s(self.worker, base_s, progress, elapsed_s)
        return max(slowed_s, compute_s)
