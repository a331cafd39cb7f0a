"""Whether one arriving message may be used: the synchronizer's admission of a gradient.

Every arrival is counted once in the ledger and in the traffic counters, then refused (and
counted dropped with its reason) when it is a retry or from a replaced incarnation, arrives
after the workload is done, comes from a quarantined worker, is not a finite gradient of the
model's size, was computed on weights a rollback abandoned, or joins a barrier that no longer
waits for its worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from syncswitch.core.sync.admission import DropReason, GradientLedger, check_gradient
from syncswitch.core.sync.live import LiveState
from syncswitch.core.sync.local_phase import LocalPhase
from syncswitch.core.sync.quarantine import QuarantinePolicy
from syncswitch.core.sync.records import DropRecord, Gradient, Outcome


class Gate:
    def __init__(
        self,
        numel: int,
        quarantine_after: int,
        now_s: Callable[[], float],
        *,
        value_bytes: int = 4,
    ) -> None:
        self.numel = numel  # the model slice's size: a gradient of another is refused
        # Bytes per value as messages travel (--wire-dtype): they arrive widened to float32.
        self.value_bytes = value_bytes
        # Exactly-once accounting: sent = applied + dropped (by reason) + waiting at a barrier.
        self.ledger = GradientLedger()
        self.quarantine = QuarantinePolicy(quarantine_after)
        self.now_s = now_s

    def admit(
        self,
        live: LiveState,
        gradient: Gradient,
        outcome: Outcome,
        *,
        squared: bool,
        progress: float,
        exclude: Callable[[int], Outcome],
    ) -> str | None:
        """Why this gradient must not be used (it is then counted dropped), or None. With
        `squared` the check also squares an admitted gradient (for the round's statistics);
        a worker the check quarantines is left out with `exclude`."""
        worker = gradient.worker
        settled = self.ledger.record_arrival(
            worker, gradient.sequence, batches=max(gradient.local_steps, 1)
        )
        kind = LocalPhase.kind(live, gradient)
        live.messages_by_protocol[kind] += 1
        if isinstance(gradient.values, torch.Tensor):
            live.bytes_by_protocol[kind] += gradient.values.numel() * self.value_bytes
        if settled is not None:  # a retry, or a late gradient of a replaced incarnation
            outcome.dropped.append(drop_record(gradient, settled, self.now_s()))
            return settled
        reason: str | None = None
        if live.done:
            reason = DropReason.TRAINING_COMPLETE
        elif self.quarantine.is_quarantined(worker):
            reason = DropReason.QUARANTINED
        else:
            reason, gradient.squared_norm = check_gradient(
                gradient.values, self.numel, squared=squared
            )
            if reason is None and gradient.norm is not None and not math.isfinite(gradient.norm):
                # Its worker's whole-gradient norm (clipping): every shard drops it alike.
                reason = DropReason.NON_FINITE
            verdict = self.quarantine.observe(worker, reason)
            if verdict is not None:
                outcome.decisions.append(verdict.to_decision(self.now_s(), progress))
                outcome.merge(exclude(worker))
            if reason is None and gradient.computed_version < live.version_floor:
                reason = DropReason.ROLLED_BACK
            elif (
                reason is None
                and live.spec.barrier
                and (
                    worker in live.excluded
                    or gradient.computed_version < live.admitted_from.get(worker, 0)
                )
            ):
                # The barrier no longer waits for it, or it was computed while it did not.
                reason = DropReason.STRAGGLER_EXCLUDED
            if reason is None:
                reason = live.spec.refuses(gradient.computed_version, live.version)
        if reason is not None:
            outcome.dropped.append(self.drop(gradient, reason))
        return reason

    def drop(self, gradient: Gradient, reason: str) -> DropRecord:
        """Count an admitted gradient dropped after all (a switch, a rollback, the end)."""
        self.ledger.record_dropped(gradient.worker, gradient.sequence, reason)
        return drop_record(gradient, reason, self.now_s())


def drop_record(gradient: Gradient, reason: str, time_s: float) -> DropRecord:
    return DropRecord(
        worker=gradient.worker,
        sequence=gradient.sequence,
        computed_version=gradient.computed_version,
        reason=reason,
        time_s=time_s,
    )
