"""What follows an admitted message: the barrier's round when it is complete, the schedule's
next phase, a switch put in force in place, and the end of the workload.

`Rounds` acts on the synchronizer's `LiveState`, handed in on every call (restoring and
rolling back replace that value, so no collaborator keeps one).
"""

from __future__ import annotations

from collections.abc import Callable

from syncswitch.core.sync.admission import DropReason
from syncswitch.core.sync.config import SyncConfig, scheduled_phase
from syncswitch.core.sync.gate import Gate
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.live import LiveState
from syncswitch.core.sync.local_phase import LocalPhase
from syncswitch.core.sync.milestones import Milestones
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Outcome
from syncswitch.core.sync.snapshots import Snapshots
from syncswitch.core.sync.update import Updater
from syncswitch.core.sync.waitroom import WaitRoom
from syncswitch.core.timing.rules import TIMING_POLICY
from syncswitch.records import Switch

# The reason a switch carries when an online phase reached its ceiling undecided.
ONLINE_CEILING = f"{TIMING_POLICY}: the BSP share's ceiling reached"


class Rounds:
    def __init__(
        self,
        config: SyncConfig,
        room: WaitRoom,
        gate: Gate,
        updater: Updater,
        local: LocalPhase,
        snapshots: Snapshots,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.room = room
        self.gate = gate
        self.updater = updater
        self.local = local
        self.snapshots = snapshots
        self.clock = clock  # the wall clock: a switch's overhead is measured on it
        self.milestones = Milestones(config, updater.now_s)

    def complete_barrier(self, live: LiveState) -> Outcome:
        """Apply the barrier's update if every active worker's gradient is in."""
        outcome, room = Outcome(), self.room
        if self.holding:
            return outcome  # the round waits for the other shards' norms (clipping.py)
        active = self.config.active(live.excluded)
        if not live.spec.round_complete(room.pending_workers(), active):
            return outcome
        if self.updater.holds(live, room.pending):
            outcome.norm_partials.append(self.updater.hold(live, room.pending))
            outcome.merge(self.apply_held(live))
            return outcome
        outcome.applied.extend(
            self.updater.apply(live, self.gate.ledger, room.pending, gathered=True)
        )
        room.pending = []
        outcome.released.extend(room.release_all())
        outcome.merge(self.after_update(live))
        return outcome

    @property
    def holding(self) -> bool:
        """A complete BSP round is held for the other shards' norms (clipping.py)."""
        exchange = self.updater.exchange
        return exchange is not None and exchange.held is not None

    def apply_held(self, live: LiveState, *, now: bool = False) -> Outcome:
        """Apply the held round once every shard's norm is in (`now`: with those at hand, a
        switch reached it); release its workers, then take up any message that came since."""
        exchange, outcome, room = self.updater.exchange, Outcome(), self.room
        if exchange is None or exchange.held is None or not (now or exchange.ready()):
            return outcome
        held, norm = exchange.release()
        ledger = self.gate.ledger
        outcome.applied.extend(self.updater.apply(live, ledger, [], held=held, norm=norm))
        in_round = {id(g) for g in held.gradients}
        room.pending = [g for g in room.pending if id(g) not in in_round]
        # A worker readmitted while the round was held waits on for the next one.
        later = room.pending_workers()
        released = sorted(w for w in room.waiting if w not in later)
        room.waiting -= set(released)
        outcome.released.extend(released)
        outcome.merge(self.after_update(live))
        if room.pending and not live.done:
            candidates = set(self.config.active(live.excluded)) | later
            self.updater.gather(live, room.pending, candidates)
            outcome.merge(self.complete_barrier(live))
        return outcome

    def after_update(self, live: LiveState) -> Outcome:
        """The evaluation points, the end, the scheduled switch and the snapshot an update
        brought due."""
        outcome, cfg = Outcome(), self.config
        if live.partials:
            outcome.partials, live.partials = live.partials, []
        outcome.evaluations.extend(self.milestones.evaluations(live))
        if live.samples >= cfg.total_samples:
            self._finish(live, outcome)
            return outcome
        progress = cfg.progress(live.samples)
        index = scheduled_phase(cfg, live.phase_index, progress, live.phase_bsp_samples)
        if index != live.phase_index:
            left_online = cfg.schedule.phases[live.phase_index].online
            reason = ONLINE_CEILING if left_online else "schedule"
            outcome.merge(self.enter_phase(live, index, reason))
        label = self.milestones.checkpoint_label(live)
        if label and not self.room.pending:
            # At a version boundary with no gradient waiting, after any scheduled switch: a
            # consistent state to go back to.
            live.snapshot_requested = ""
            outcome.snapshots.append(self.snapshots.take(live, label, self.updater.now_s()))
        return outcome

    def enter_phase(
        self, live: LiveState, index: int, reason: str, spec: ProtocolSpec | None = None
    ) -> Outcome:
        """The schedule's phase `index` begins, in its protocol or `spec` (the run's choice of
        what follows BSP); a protocol a rollback pinned stays."""
        live.phase_index = index
        live.phase_bsp_samples = 0
        new_spec = live.pinned or spec or self.config.schedule.phases[index].spec
        if new_spec != live.spec:
            return self.switch_to(live, new_spec, reason=reason)
        return Outcome()

    def switch_to(self, live: LiveState, spec: ProtocolSpec, reason: str) -> Outcome:
        """Put a new protocol in force now, in place, at the current version."""
        started = self.clock()
        outcome, room, cfg = Outcome(), self.room, self.config
        if self.holding:
            # A round waiting for the other shards' norms: applied first, with those at hand.
            outcome.merge(self.apply_held(live, now=True))
            if live.done:
                return outcome
        if self.updater.exchange is not None:
            self.updater.exchange.updated()  # a peer's partial for a round cut short here
        old = live.spec
        live.spec = spec
        if spec.is_async and not old.is_async:
            live.async_start = cfg.progress(live.samples)
            if live.momentum_policy is MomentumPolicy.RESET:
                self.updater.optimizer.reset_momentum()
        self.local.switch(live, old, spec)
        if spec.clock_bound is not None:
            room.reset_clocks()
        caught = [g for g in room.pending if not spec.gathers(g.local_steps > 0)]
        if caught:
            # A barrier cut short by the switch: the caught gradients (or deltas) the new rule
            # cannot gather are applied under it, as their workers' shares: those already
            # summed (core/sync/barrier_sum.py) as one update, the others each on its own.
            room.pending = [g for g in room.pending if spec.gathers(g.local_steps > 0)]
            summed, summed_sum = self.updater.barrier.cut_short(caught)
            if summed_sum is not None:
                ledger = self.gate.ledger
                outcome.applied.extend(self.updater.apply(live, ledger, summed, summed=summed_sum))
            for gradient in caught:
                if not any(gradient is g for g in summed):
                    outcome.applied.extend(self.updater.apply(live, self.gate.ledger, [gradient]))
        if spec.is_async:
            outcome.released.extend(room.release_within_bound(spec, cfg.active(live.excluded)))
        else:
            outcome.released.extend(room.release_not_at_barrier())
        now_s = self.milestones.close_phase_time(live, old.name)
        event = Switch(
            at_fraction=cfg.progress(live.samples),
            at_samples=live.samples,
            version=live.version,
            from_protocol=old.name,
            to_protocol=spec.name,
            time_s=now_s,
            overhead_s=self.clock() - started,
            reason=reason,
        )
        live.switches.append(event)
        outcome.switches.append(event)
        return outcome

    def finish_now(self, live: LiveState) -> Outcome:
        """End the workload here (another shard has applied it all): see
        `Synchronizer.finish_now`."""
        outcome = Outcome()
        if live.done:
            return outcome
        if self.updater.exchange is not None:
            self.updater.exchange.forget()  # a held round's messages are dropped below
        for gradient in self.room.pending:
            outcome.dropped.append(self.gate.drop(gradient, DropReason.TRAINING_COMPLETE))
        self.room.pending = []
        outcome.evaluations.extend(self.milestones.evaluations(live, all_left=True))
        self._finish(live, outcome)
        return outcome

    def _finish(self, live: LiveState, outcome: Outcome) -> None:
        live.done = True
        self.milestones.close_phase_time(live, live.spec.name)
        outcome.evaluations.append(self.milestones.point(live, 1.0))
        outcome.released.extend(self.room.release_all())
        outcome.done = True
