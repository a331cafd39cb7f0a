"""One parameter-server shard without the process around it.

A `ServerShard` is the core `Synchronizer` over one slice of the flat parameters, plus a
record of what happened since the run controller last looked: updates, drops, switches,
evaluation points (with a copy of the weights as they were then), snapshots, decisions and the
step times it saw arrive. A runtime wraps it in whatever carries gradients to it (a threaded
Ray actor, a simulator's event loop) and calls `drain` to hand the controller a `ShardReport`.
Every value here is typed plain data, so a report crosses process boundaries as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from syncswitch.core.stragglers.monitor import carry_out
from syncswitch.core.sync.config import SyncConfig, check_worker
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.local import LocalRound
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import (
    Decision,
    Gradient,
    NormPartial,
    Outcome,
    Snapshot,
    StepObservation,
)
from syncswitch.core.sync.server_optimizer import make_optimizer
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.core.sync.synchronizer import Synchronizer, receive_norm
from syncswitch.records import Accounting


@dataclass(frozen=True)
class ShardState:
    """Where a shard stands, as of its last drain."""

    version: int = 0
    samples: int = 0
    progress: float = 0.0
    protocol: ProtocolSpec | None = None  # None until the first drain
    scheduled_protocol: ProtocolSpec | None = None
    done: bool = False
    time_s: float = 0.0  # run seconds
    time_by_protocol: dict[str, float] = field(default_factory=dict)
    samples_by_protocol: dict[str, int] = field(default_factory=dict)
    excluded: tuple[int, ...] = ()
    quarantined: tuple[int, ...] = ()
    accounting: Accounting | None = None  # None until the first drain
    pinned: ProtocolSpec | None = None  # the protocol a divergence rollback pinned the run to
    lr_scale: float = 1.0
    momentum_policy: MomentumPolicy = MomentumPolicy.SCALE
    # Seconds since each worker last called, for those not held by the shard (a worker held
    # at a barrier is waiting on the server, not hung). Filled in by the runtime.
    silent_s: dict[int, float] = field(default_factory=dict)
    # What this shard received, by protocol (measured at arrival; "local": deltas), and the
    # samples of local steps lost unsent, by reason.
    messages_by_protocol: dict[str, int] = field(default_factory=dict)
    bytes_by_protocol: dict[str, int] = field(default_factory=dict)
    unsent_samples: dict[str, int] = field(default_factory=dict)
    # Delay compensation (core/sync/staleness.py): the bytes of weights kept for the workers
    # at most at once, their worst case, and stale gradients applied uncompensated.
    handed_out_peak_bytes: int = 0
    handed_out_worst_case_bytes: int = 0
    uncompensated: int = 0
    # Clipped BSP rounds applied without every shard's part of their norm (clipping.py).
    norm_incomplete: int = 0


@dataclass(frozen=True)
class ShardReport:
    """Everything a shard recorded since its last drain, and its state now."""

    outcome: Outcome  # applied, dropped, switches, evaluations, decisions, snapshots
    eval_weights: list[np.ndarray]  # this shard's weights at each of outcome.evaluations
    observations: list[StepObservation]  # arriving steps, if the shard observes them
    state: ShardState


class ServerShard:
    def __init__(
        self,
        config: SyncConfig,
        initial: np.ndarray,
        *,
        restore: SynchronizerState | None = None,
        observe_steps: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        device: str = "cpu",
    ) -> None:
        """`restore`: a snapshot's state to continue from (a replaced server, a resumed run);
        `observe_steps`: record arriving step times for the straggler detector; `device`:
        where the weights and the optimizer state live (gradients come and weights go in
        CPU memory either way)."""
        optimizer = make_optimizer(
            config.optimizer, torch.from_numpy(np.array(initial)), device=device
        )
        self.sync = Synchronizer(config, optimizer, clock=clock)
        self.restored = restore is not None
        if restore is not None:
            self.sync.restore(restore)
        self._observe_steps = observe_steps
        self._since_drain = Outcome()
        self._eval_weights: list[np.ndarray] = []
        self._observations: list[StepObservation] = []

    def begin(self) -> None:
        """The workers start now: time before is not training time (a restored shard's clock
        continues from its snapshot instead)."""
        if not self.restored:
            self.sync.restart_clock()

    def submit(self, gradient: Gradient) -> Outcome:
        outcome = self._record(self.sync.submit(gradient))
        if self._observe_steps:
            sync = self.sync
            self._observations.append(
                StepObservation(gradient.worker, gradient.step_time_s, sync.now_s(), sync.progress)
            )
        return outcome

    def carry_out(self, decision: Decision) -> Outcome:
        """A straggler policy's (or online timing's) decision, made by the controller for every
        shard alike."""
        return self._record(carry_out(self.sync, decision))

    def norm_arrived(self, partial: NormPartial) -> Outcome:
        """Another shard's part of a held BSP round's norm (core/sync/clipping.py)."""
        return self._record(receive_norm(self.sync, partial))

    def finish(self) -> Outcome:
        """Another shard has applied the whole workload: end here too."""
        return self._record(self.sync.finish_now())

    def worker_lost(self, worker: int) -> Outcome:
        return self._record(self.sync.worker_lost(worker))

    def local_round(self) -> LocalRound | None:
        """A released worker's local round (None outside a local phase)."""
        return self.sync.local_round()

    def rejoin(self, worker: int) -> int:
        return self.sync.rejoin(worker)

    def data_position(self, worker: int) -> int:
        check_worker(worker, self.sync.config.workers)
        return self.sync.gate.ledger.data_position(worker)

    def request_snapshot(self, label: str) -> None:
        self.sync.request_snapshot(label)

    def final_snapshot(self) -> Snapshot:
        return self.sync.snapshot("final")

    def roll_back(
        self,
        state: SynchronizerState,
        protocol: ProtocolSpec,
        lr_scale: float,
        momentum: MomentumPolicy,
        reason: str,
    ) -> Outcome:
        return self._record(
            self.sync.roll_back(
                state,
                protocol=protocol,
                lr_scale=lr_scale,
                momentum_policy=momentum,
                reason=reason,
            )
        )

    def drain(self, silent_s: dict[int, float] | None = None) -> ShardReport:
        report = ShardReport(
            outcome=self._since_drain,
            eval_weights=self._eval_weights,
            observations=self._observations,
            state=self.state(silent_s or {}),
        )
        self._since_drain, self._eval_weights, self._observations = Outcome(), [], []
        return report

    def state(self, silent_s: dict[int, float]) -> ShardState:
        sync = self.sync
        live = sync.live  # the synchronizer's fields, as one value: copied, not shared
        return ShardState(
            version=live.version,
            samples=live.samples,
            progress=sync.progress,
            protocol=live.spec,
            scheduled_protocol=sync.scheduled_spec,
            done=live.done,
            time_s=sync.now_s(),
            time_by_protocol=dict(live.time_by_protocol),
            samples_by_protocol=dict(live.samples_by_protocol),
            excluded=tuple(sorted(live.excluded)),
            quarantined=tuple(sorted(sync.quarantine.quarantined)),
            accounting=sync.accounting(),
            pinned=live.pinned,
            lr_scale=live.lr_scale,
            momentum_policy=live.momentum_policy,
            silent_s=silent_s,
            messages_by_protocol=dict(live.messages_by_protocol),
            bytes_by_protocol=dict(live.bytes_by_protocol),
            unsent_samples=dict(live.unsent_samples),
            norm_incomplete=exchange.incomplete if (exchange := sync.updater.exchange) else 0,
            **_compensation_state(sync),
        )

    def _record(self, outcome: Outcome) -> Outcome:
        for _ in outcome.evaluations:
            # Copied now: the weights change in place with the next update.
            self._eval_weights.append(self.sync.optimizer.weights_on_cpu().numpy().copy())
        # Workers and norm partials are the runtime's to act on now, not the controller's.
        released, outcome.released = outcome.released, []
        partials, outcome.norm_partials = outcome.norm_partials, []
        self._since_drain.merge(outcome)
        outcome.released, outcome.norm_partials = released, partials
        return outcome


def _compensation_state(sync: Synchronizer) -> dict[str, int]:
    """Delay compensation's memory and misses, for ShardState (zeros when it is off)."""
    rules = sync.updater.staleness
    handed_out = rules.handed_out
    if handed_out is None:
        return {}
    return {
        "handed_out_peak_bytes": handed_out.peak_bytes,
        "handed_out_worst_case_bytes": handed_out.worst_case_bytes,
        "uncompensated": rules.uncompensated,
    }
