"""The protocol engine: decides, gradient by gradient, when to update and who may go on.

It knows nothing of processes or Ray. A runtime hands it each arriving gradient with `submit`
and then does what the returned `Outcome` says: release the listed workers with the current
weights, snapshot the weights for the listed evaluation points, stop when `done`. The same
engine can therefore be driven by Ray actors, by a test, or by a simulator's virtual clock.

Rules, with n active workers:
- BSP: gradients wait at a barrier until n have arrived; their sample-weighted mean is applied
  as one update and all n workers go on with the new version (staleness 0).
- ASP: each gradient is applied on arrival and its worker goes on at once.
- SSP(s): like ASP, but a worker whose clock (gradients sent in this phase) is more than s ahead
  of the slowest active worker waits until the slowest catches up.
A switch happens in place after the update that crosses a phase end. Gradients caught at a BSP
barrier by a switch to an asynchronous protocol are applied one by one under the new rule;
gradients that arrive after the workload is complete are dropped with reason
`training_complete`. Nothing is lost silently: sent = applied + dropped + waiting.

Online policies act through three more entry points, each taking effect from the next
gradient: `exclude` / `readmit` change who the BSP barrier (and the SSP bound) waits for, and
`switch_to` leaves or resumes BSP out of schedule. An excluded worker keeps training; under
BSP its gradients are dropped as `straggler_excluded` and it goes on at once with the newest
weights. With `count_bsp_by_work`, a scheduled BSP phase ends when its planned samples have
been applied under BSP, so a detour through ASP postpones the planned switch instead of
eating into the BSP prefix.

Local-H phases (core/sync/local.py) use the BSP barrier for rounds of model deltas: a released
worker is told its round (`local_round`), takes H steps on its own and sends one delta; when
every active worker's delta is in, one outer step applies their mean. A gradient in a local
phase, or a delta outside one (sent across a switch), is applied at once on its own.

The synchronizer's own mutable fields are one value, `LiveState` (core/sync/live.py): a
snapshot copies it into a frozen `SynchronizerState` (core/sync/state.py), restoring and rolling
back assign a new one built from such a state. Its collaborators: `Gate` (gate.py) admits each
arrival, `Rounds` (rounds.py) completes the barrier's rounds and moves the run through its
schedule and switches, `Updater` (update.py) makes one update and its records, `LocalPhase`
(local_phase.py) is local phases' policy and outer step, `WaitRoom` (waitroom.py) holds who is
held back (the barrier, the SSP clocks), `Milestones` (milestones.py) says which evaluation
points and checkpoints are due, and `Snapshots` (snapshots.py) takes a snapshot and loads one's
parts back into the collaborators.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec

from syncswitch.core.sync.admission import DropReason, GradientLedger
from syncswitch.core.sync.config import SyncConfig, check_worker
from syncswitch.core.sync.gate import Gate
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.live import LiveState
from syncswitch.core.sync.local import LocalRound
from syncswitch.core.sync.local_phase import LocalPhase
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Gradient, NormPartial, Outcome, Snapshot
from syncswitch.core.sync.rounds import Rounds
from syncswitch.core.sync.server_optimizer import ServerOptimizer
from syncswitch.core.sync.snapshots import Snapshots
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.core.sync.update import Updater
from syncswitch.core.sync.waitroom import WaitRoom
from syncswitch.records import Accounting

_P = ParamSpec("_P")


def _hands_out(
    method: Callable[Concatenate[Synchronizer, _P], Outcome],
) -> Callable[Concatenate[Synchronizer, _P], Outcome]:
    """A public entry point whose released workers go on with the weights as they are on
    return (both runtimes answer them at once): delay compensation notes who got which."""

    def wrapper(self: Synchronizer, /, *args: _P.args, **kwargs: _P.kwargs) -> Outcome:
        outcome = method(self, *args, **kwargs)
        handed_out = self.updater.staleness.handed_out
        if handed_out is not None and outcome.released:
            handed_out.handed(outcome.released, self.live.version, self.optimizer.weights)
        return outcome

    functools.update_wrapper(wrapper, method)  # its name and docstring
    return wrapper


class Synchronizer:
    def __init__(
        self,
        config: SyncConfig,
        optimizer: ServerOptimizer,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config
        self.optimizer = optimizer
        self._clock = clock
        # Every field the synchronizer changes as it runs, as one value (core/sync/live.py).
        self.live = LiveState(
            spec=config.schedule.phases[0].spec,
            momentum_policy=config.momentum_policy,
            started_at=clock(),
        )
        self.room = WaitRoom(config.workers)  # the barrier, who waits, the SSP clocks
        self.gate = Gate(
            optimizer.weights.numel(),
            config.quarantine_after,
            self.now_s,
            value_bytes=config.wire_dtype.itemsize,
        )
        self.quarantine = self.gate.quarantine
        self.local = LocalPhase(config, optimizer)
        self.updater = Updater(config, optimizer, self.local, self.now_s)
        self.snapshots = Snapshots(
            config, optimizer, self.room, self.gate, self.local, self.updater
        )
        self.rounds = Rounds(
            config, self.room, self.gate, self.updater, self.local, self.snapshots, clock
        )

    # -- reading state ----------------------------------------------------------------------

    @property
    def progress(self) -> float:
        return self.config.progress(self.live.samples)

    @property
    def active(self) -> frozenset[int]:
        """Workers the BSP barrier and the SSP bound wait for."""
        return self.config.active(self.live.excluded)

    @property
    def scheduled_spec(self) -> ProtocolSpec:
        """The protocol the schedule asks for now (an online policy may have overridden it)."""
        if self.live.spec.gathers_deltas and self.live.pinned is None:
            # Only the schedule or the run's choice of what follows BSP puts a phase of local
            # rounds in force (no straggler policy detours into one): it is what the run asks
            # for now.
            return self.live.spec
        return self.config.schedule.phases[self.live.phase_index].spec

    def now_s(self) -> float:
        return self._clock() - self.live.started_at

    def restart_clock(self) -> None:
        """Start the run's clock: time before the workers begin is not training time."""
        self.live.started_at = self._clock()
        self.live.phase_started_s = 0.0

    def accounting(self) -> Accounting:
        ledger = self.gate.ledger
        return Accounting(
            sent=ledger.sent,
            applied=ledger.applied,
            dropped=dict(sorted(ledger.dropped_by_reason.items())),
            waiting=ledger.in_flight,
            unaccounted=ledger.unaccounted(),
        )

    # -- the protocol -----------------------------------------------------------------------

    @_hands_out
    def submit(self, gradient: Gradient) -> Outcome:
        """Take one gradient; return what the runtime must do next."""
        outcome, live = Outcome(), self.live
        reason = self.gate.admit(
            live,
            gradient,
            outcome,
            squared=self.updater.squares_wanted(live),
            progress=self.progress,
            exclude=self.exclude,
        )
        if reason is not None:
            # Not applied, counted with its reason; the worker goes on with the newest weights.
            outcome.released.append(gradient.worker)
            outcome.done = live.done
            return outcome
        room = self.room
        room.tick(gradient.worker)
        barrier = live.spec.barrier
        if barrier and not live.spec.gathers(gradient.local_steps > 0):
            # Sent across a switch (a gradient in a local phase, a delta outside one): applied
            # on its own, and its worker goes on at once (core/sync/local.py).
            outcome.applied.extend(self.updater.apply(live, self.gate.ledger, [gradient]))
            outcome.released.append(gradient.worker)
            outcome.merge(self.rounds.after_update(live))
        elif barrier:
            room.pending.append(gradient)
            room.waiting.add(gradient.worker)
            if self.rounds.holding:
                return outcome  # summed once the held round is applied (rounds.py)
            self.updater.gather(live, room.pending, set(self.active) | room.pending_workers())
            outcome.merge(self.rounds.complete_barrier(live))
        else:
            outcome.applied.extend(self.updater.apply(live, self.gate.ledger, [gradient]))
            room.waiting.add(gradient.worker)
            outcome.released.extend(room.release_within_bound(live.spec, self.active))
            outcome.merge(self.rounds.after_update(live))
        return outcome

    @_hands_out
    def exclude(self, worker: int) -> Outcome:
        """Stop waiting for `worker` at the barrier (elastic BSP); it may complete a barrier."""
        check_worker(worker, self.config.workers)
        live = self.live
        live.excluded.add(worker)
        outcome = Outcome()
        if live.spec.barrier:
            # Its gradient may already sit at the barrier: it stays, computed on this version.
            outcome.merge(self.rounds.complete_barrier(live))
        else:  # a bound on clock spread may have been waiting for it
            outcome.released.extend(self.room.release_within_bound(live.spec, self.active))
        return outcome

    def readmit(self, worker: int) -> Outcome:
        """Wait for `worker` again from its next gradient on."""
        check_worker(worker, self.config.workers)
        live = self.live
        if worker in live.excluded:
            # It rejoins the SSP bound level with the slowest of the others, so they are not
            # held back for the steps it missed while excluded.
            clocks = self.room.clocks
            clocks[worker] = max(clocks.get(worker, 0), self.room.slowest_clock(self.active))
            live.excluded.discard(worker)
            live.admitted_from[worker] = live.version
        return Outcome()

    @_hands_out
    def end_online_phase(self, reason: str, protocol: ProtocolSpec | None = None) -> Outcome:
        """The run controller decided the online phase ends now: go on to the next phase, in
        `protocol` where the run chose it (core/timing/follower.py), else the schedule's (a
        protocol a divergence rollback pinned stays in force)."""
        index = self.config.schedule.online_index
        if index is None or self.live.phase_index != index or self.live.done:
            return Outcome()  # ended already (its ceiling), or no such phase
        return self.rounds.enter_phase(self.live, index + 1, reason, spec=protocol)

    @_hands_out
    def switch_to(self, spec: ProtocolSpec, reason: str) -> Outcome:
        """Put a new protocol in force now, in place, at the current version."""
        return self.rounds.switch_to(self.live, spec, reason)

    # -- failures, local rounds, the end ------------------------------------------------------

    def worker_lost(self, worker: int) -> Outcome:
        """A worker died or hung: the barrier and the SSP bound stop waiting for it. In a
        local phase, a worker not at the barrier was mid-round: the round it was given is
        lost unsent (at most that: it may have died before finishing it)."""
        live = self.live
        if (
            live.spec.gathers_deltas
            and worker not in self.room.waiting
            and worker not in live.excluded
        ):
            local = self.local_round()
            if local is not None:
                check_worker(worker, self.config.workers)
                samples = local.steps * self.config.local.worker_batch
                self.local.steps_lost(live, samples, DropReason.WORKER_DIED)
        return self.exclude(worker)

    def rejoin(self, worker: int) -> int:
        """A new incarnation of `worker` starts now; returns the sequence it must start at.

        Anything its old incarnation still has on the way is retired (dropped as worker_died
        if it arrives), and the barrier waits for it again from the current version.
        """
        start = self.gate.ledger.restart_worker(worker)
        self.gate.quarantine.release(worker)
        self.readmit(worker)
        handed_out = self.updater.staleness.handed_out
        if handed_out is not None:
            # It pulls the current weights next (a runtime pulls them at once).
            handed_out.handed([worker], self.live.version, self.optimizer.weights)
        return start

    def local_round(self) -> LocalRound | None:
        """What a worker released now does before its next message in a local phase (None
        outside one): H steps of its own SGD at the job's learning rate, then one delta."""
        return self.local.round(self.live, len(self.active))

    @_hands_out
    def finish_now(self) -> Outcome:
        """End the workload here: another shard has applied it all (shards that dropped a
        gradient differently can differ by a few samples). Gradients at the barrier are dropped
        as training_complete, every waiting worker is released, and the evaluation points not
        reached yet are taken now, so every shard reports the same points."""
        return self.rounds.finish_now(self.live)

    # -- snapshots, restoring, rolling back ---------------------------------------------------

    def request_snapshot(self, label: str) -> None:
        """Take a snapshot at the next version boundary (e.g. a checkpoint due by time)."""
        self.live.snapshot_requested = label

    def snapshot(self, label: str) -> Snapshot:
        """The synchronizer's state now, at a version boundary (no gradient waiting)."""
        if self.room.pending:
            raise RuntimeError("a snapshot is taken at a version boundary, with no one waiting")
        return self.snapshots.take(self.live, label, self.now_s())

    def restore(self, state: SynchronizerState) -> None:
        """Become the synchronizer a snapshot was taken of (a new server, or a resumed run).

        The clock continues from the snapshot's time, so time lost to the failure is not
        counted as training time. Every worker must `rejoin` before it trains again.
        """
        self.snapshots.load(state)
        self.gate.ledger = GradientLedger.from_plain(dict(state.ledger))
        self.live = self.live.restored(state, started_at=self._clock() - state.time_s)
        handed_out = self.updater.staleness.handed_out
        if handed_out is not None:
            # Not in the snapshot: every worker rejoins and computes on the restored weights
            # first, so what workers held before is never needed again.
            handed_out.reset(self.live.version, self.optimizer.weights)

    @_hands_out
    def roll_back(
        self,
        state: SynchronizerState,
        *,
        protocol: ProtocolSpec,
        lr_scale: float,
        momentum_policy: MomentumPolicy,
        reason: str,
    ) -> Outcome:
        """Go back to a snapshot's weights and position, in place, while workers run on, and
        stay in `protocol` from then on (a divergence guard's response).

        Versions keep increasing: the restored weights get a new version, and anything
        computed before it (on the abandoned weights) is dropped as rolled_back when it
        arrives. Accounting and time are not rolled back: what happened, happened.
        """
        outcome = Outcome()
        if self.updater.exchange is not None:
            self.updater.exchange.forget()  # a held round's messages are dropped below
        for gradient in self.room.pending:
            outcome.dropped.append(self.gate.drop(gradient, DropReason.ROLLED_BACK))
        self.room.pending = []
        self.snapshots.load(state)
        self.live = self.live.rolled_back(
            state, protocol=protocol, lr_scale=lr_scale, momentum_policy=momentum_policy
        )
        if self.live.spec != protocol:
            outcome.merge(self.switch_to(protocol, reason=reason))
        outcome.released.extend(self.room.release_all())
        return outcome


@_hands_out
def receive_norm(sync: Synchronizer, partial: NormPartial) -> Outcome:
    """Another shard's part of a held BSP round's global norm (core/sync/clipping.py): the
    round is applied once every shard's is in. A function, not a method: the runtime routes
    partials between shards, as it carries out the controller's decisions."""
    exchange = sync.updater.exchange
    if exchange is None:
        return Outcome()
    exchange.receive(partial)
    return sync.rounds.apply_held(sync.live)
