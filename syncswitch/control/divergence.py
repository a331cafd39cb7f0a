"""The divergence guard's glue: losses from the first shard go to the guard
(core.reliability.divergence); a verdict becomes a rollback to the last healthy checkpoint, or a
logged give-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from syncswitch.control.checkpoints import CheckpointKeeper
from syncswitch.control.decisions import RollBack
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.control.run_state import run_checkpoint
from syncswitch.control.shard import ShardReport, ShardState
from syncswitch.core.reliability.checkpoints import CheckpointError
from syncswitch.core.reliability.divergence import (
    Divergence,
    DivergenceGuard,
    GiveUp,
    GuardConfig,
    rollback_decision,
)
from syncswitch.core.sync.records import Action, Decision


class DivergenceWatch:
    def __init__(
        self,
        plan: RunPlan,
        record: RunRecord,
        checkpoints: CheckpointKeeper,
        log_decision: Callable[[Decision], None],
    ) -> None:
        self.plan = plan
        self.record = record
        self.checkpoints = checkpoints
        self.log_decision = log_decision
        self.guard = (
            DivergenceGuard(GuardConfig(), initial_level=record.guard_initial_level)
            if plan.reliability.divergence_guard
            else None
        )
        self._pending: Decision | None = None  # the rollback under way, logged once done

    def watch(self, first: ShardReport) -> Divergence | None:
        """Feed the losses of the updates the first shard applied; the first verdict."""
        if self.guard is None:
            return None
        for update in first.outcome.applied:
            verdict = self.guard.observe(
                update.loss, progress=update.progress, time_s=update.time_s
            )
            self.record.guard_initial_level = self.guard.initial_level
            if verdict is not None:
                return verdict
        return None

    def healthy_samples(self, verdict: Divergence) -> float:
        """Samples up to which the loss was last healthy (nothing later is kept)."""
        return (verdict.healthy_progress or 0.0) * self.plan.total_samples

    def respond(self, verdict: Divergence, state: ShardState) -> RollBack | None:
        """A rollback to the newest checkpoint from before the loss went bad; None (a logged
        give-up, and the guard off for the rest of the run) when there is nothing to do."""
        response = rollback_decision(
            verdict,
            state.lr_scale,
            state.momentum_policy,
            self.plan.reliability.rollback,
            rollbacks_done=self.record.rollbacks,
        )
        if isinstance(response, GiveUp):
            self.log_decision(response.to_decision())
            self.guard = None  # nothing more to do about it; the summary says so
            return None
        try:
            loaded = self.checkpoints.load_latest(max_samples=int(self.healthy_samples(verdict)))
        except CheckpointError as error:
            reason = f"{verdict.reason}; no checkpoint to roll back to ({error})"
            give_up = replace(response.to_decision(), action=Action.GIVE_UP, reason=reason)
            self.log_decision(give_up)
            self.guard = None
            return None
        decision = response.to_decision()
        self._pending = replace(
            decision, reason=f"{decision.reason}; restored {loaded.info.path.name}"
        )
        return RollBack(
            shard_states=run_checkpoint(loaded).servers,
            protocol=response.protocol,
            lr_scale=response.lr_scale,
            momentum=response.momentum,
            label=f"divergence rollback {response.number}",
            reason=self._pending.reason,
        )

    def rolled_back(self) -> None:
        """Every shard is back at the checkpoint: log the rollback and watch afresh."""
        assert self._pending is not None
        self.record.rollbacks += 1
        self.log_decision(self._pending)
        self._pending = None
        if self.guard is not None:
            self.guard.reset()
