"""Gradient admission and exactly-once accounting (quarantine.py quarantines workers that keep
sending garbage).

Where a runtime calls these, per arriving gradient (worker w, sequence q, values v):

    reason = ledger.record_arrival(w, q)           # duplicate / from a replaced incarnation?
    if reason is None and quarantine.is_quarantined(w):
        reason = DropReason.QUARANTINED
    if reason is None:
        reason = gradient_problem(v, expected_numel)  # non-finite or wrongly shaped?
        if (q_decision := quarantine.observe(w, reason)) is not None:
            ...  # log q_decision, restart worker w, then quarantine.release(w)
    if reason is not None:
        ledger.record_dropped(w, q, reason)  # unless record_arrival already settled it
    else:
        ...  # hand to the synchronizer; when it applies or drops the gradient:
        ledger.record_applied(w, q)  /  ledger.record_dropped(w, q, DropReason.SWITCH)

`record_arrival` settles duplicates and stale-incarnation arrivals itself (they are counted
as dropped on the spot); every other arrival is in flight until the runtime records it applied
or dropped. So at every moment sent = applied + dropped + in_flight, and `unaccounted()` (which
must be 0) checks it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch


class DropReason(StrEnum):
    """Why a gradient that reached the server was not applied."""

    NON_FINITE = "non_finite"  # NaN or inf among its values
    SHAPE_MISMATCH = "shape_mismatch"  # not a 1-D float tensor of the model's size
    WORKER_DIED = "worker_died"  # its worker died, or it came from a replaced incarnation
    STALE_BEYOND_BOUND = "stale_beyond_bound"  # staler than the protocol allows
    STRAGGLER_EXCLUDED = "straggler_excluded"  # from a worker left out of the BSP barrier
    SWITCH = "switch"  # caught by a protocol switch that could not use it
    TRAINING_COMPLETE = "training_complete"  # arrived after the workload was done
    DUPLICATE = "duplicate"  # a retry of a gradient already received
    QUARANTINED = "quarantined"  # from a worker quarantined for sending bad gradients
    ROLLED_BACK = "rolled_back"  # in flight when the weights were rolled back or restored


class LedgerError(RuntimeError):
    """The runtime recorded something that breaks exactly-once accounting (a bug, not data)."""


# -- admission -------------------------------------------------------------------------------


def gradient_problem(values: Any, expected_numel: int) -> DropReason | None:
    """Why `values` must not reach the weights, or None when it may (`check_gradient`'s verdict,
    without asking for the squared norm)."""
    return check_gradient(values, expected_numel)[0]


def check_gradient(
    values: Any, expected_numel: int, *, squared: bool = False
) -> tuple[DropReason | None, float | None]:
    """Why `values` must not reach the weights (None when it may), and with `squared` its
    squared norm abs(values)^2, the check's by-product (None unless admitted and finite).

    The check is one reduction read back with .item() and tested by math.isfinite: the sum, or
    with `squared` the dot of the values with themselves. Either is non-finite if any value is
    (NaN propagates; inf + -inf is NaN; inf^2 is inf), so a finite result proves every value
    finite; a non-finite result of finite values (overflow) is re-checked element-wise, so the
    verdict is exact either way. The dot is what online timing's statistics need of every
    worker's gradient in a measured BSP round (core/timing/gradient_stats.py), so asking for it here
    saves them a pass over the round's gradients: on 5,210 float32 values it costs no more than
    the sum (1.7 against 2.0 us on this machine), on 270,000 about 8 us more (23 against 15).

    Cost of the whole check, measured on this machine (float32, torch CPU, one thread, best of
    5x2000 calls): ~25 us for 5,210 values, ~45 us for 270,000 and ~65 us for 500,000,
    against ~37 / ~835 / ~1,640 us for torch.isfinite(values).all() alone. Python's
    math.isfinite on the read-back float is ~1.5 us against ~5 us for torch.isfinite on a 0-d
    tensor and bool(), which on 5,210 values is most of the check.
    """
    if (
        not isinstance(values, torch.Tensor)
        or values.dim() != 1
        or not values.is_floating_point()
        or values.numel() != expected_numel
    ):
        return DropReason.SHAPE_MISMATCH, None
    reduced = (torch.dot(values, values) if squared else values.sum()).item()
    if math.isfinite(reduced):
        return None, reduced if squared else None
    if bool(torch.isfinite(values).all()):
        return None, None  # finite values whose square overflowed: admitted, no norm
    return DropReason.NON_FINITE, None


def describe_problem(values: Any, expected_numel: int) -> str:
    """One line saying what was wrong with a refused gradient, for the drop record or log."""
    if not isinstance(values, torch.Tensor):
        return f"gradient is a {type(values).__name__}; expected a 1-D float tensor"
    if values.dim() != 1 or not values.is_floating_point() or values.numel() != expected_numel:
        return (
            f"gradient is a {values.dtype} tensor of shape {tuple(values.shape)}; expected "
            f"1-D float with {expected_numel} values"
        )
    finite = torch.isfinite(values)
    bad = int((~finite).sum())
    nan = int(torch.isnan(values).sum())
    return f"gradient has {bad} non-finite values of {values.numel()} ({nan} NaN, {bad - nan} inf)"


# -- exactly-once accounting -----------------------------------------------------------------


@dataclass
class _Sequences:
    """Which of one worker's sequence numbers have arrived, in O(1) memory when in order."""

    high: int  # every sequence below this has arrived, except those in `retired`
    ahead: set[int] = field(default_factory=set)  # arrived out of order, all >= high
    retired: set[int] = field(default_factory=set)  # never arrived; given up at a restart
    # Batches beyond one per sequence that the arrived messages stood for (a local round's
    # delta is one message for H batches): the worker's data position is next_sequence()
    # plus this.
    extra_batches: int = 0

    def seen(self, sequence: int) -> bool:
        return (sequence < self.high and sequence not in self.retired) or sequence in self.ahead

    def mark(self, sequence: int) -> None:
        if sequence == self.high and not self.ahead:  # in order, as nearly every one arrives
            self.high += 1
            return
        if sequence < self.high:
            self.retired.discard(sequence)
            return
        self.ahead.add(sequence)
        while self.high in self.ahead:  # absorb the contiguous run into the high-water mark
            self.ahead.remove(self.high)
            self.high += 1

    def next_sequence(self) -> int:
        return max(self.ahead) + 1 if self.ahead else self.high


class GradientLedger:
    """Counts every gradient once: sent = applied + dropped (by reason) + in flight.

    "Sent" means reached this server (or was known sent and lost, see `record_lost`). A
    retried gradient (same worker, same sequence) counts as sent again and is dropped as a
    duplicate, so the retry never reaches the weights and the identity still holds.
    Sequence numbers are per worker and start at `first_sequence`.
    """

    def __init__(self, first_sequence: int = 0) -> None:
        self.first_sequence = first_sequence
        self.sent = 0
        self.applied = 0
        self.dropped_by_reason: Counter[str] = Counter()
        self._workers: dict[int, _Sequences] = {}
        self._in_flight: set[tuple[int, int]] = set()

    # -- reading -----------------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by_reason.values())

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def in_flight_of(self, worker: int) -> list[int]:
        return sorted(q for w, q in self._in_flight if w == worker)

    def seen(self, worker: int, sequence: int) -> bool:
        """Whether (worker, sequence) has arrived before: applied, dropped or still in flight."""
        seqs = self._workers.get(worker)
        return seqs is not None and seqs.seen(sequence)

    def next_sequence(self, worker: int) -> int:
        """The sequence a new incarnation of `worker` should start at (one past the highest)."""
        seqs = self._workers.get(worker)
        return seqs.next_sequence() if seqs is not None else self.first_sequence

    def data_position(self, worker: int) -> int:
        """The batches `worker` has drawn before `next_sequence`: one per sequence, and H for a
        local round's delta that arrived. A message lost on the way counts one (its H is not
        known here); a worker sends its next message only once the last one was answered, so
        only its last can be lost, and that one it trains again."""
        seqs = self._workers.get(worker)
        extra = seqs.extra_batches if seqs is not None else 0
        return self.next_sequence(worker) + extra

    def unaccounted(self) -> int:
        """sent - applied - dropped - in flight: 0 unless the accounting has a hole."""
        return self.sent - self.applied - self.dropped - self.in_flight

    def summary(self) -> dict[str, Any]:
        """For summary.json."""
        return {
            "sent": self.sent,
            "applied": self.applied,
            "dropped": dict(sorted(self.dropped_by_reason.items())),
            "dropped_total": self.dropped,
            "in_flight": self.in_flight,
            "unaccounted": self.unaccounted(),
        }

    # -- recording ---------------------------------------------------------------------------

    def record_arrival(self, worker: int, sequence: int, batches: int = 1) -> DropReason | None:
        """Count a gradient (or a local round's delta, one message for `batches` batches)
        that reached the server.

        Returns DUPLICATE (a retry of one already received) or WORKER_DIED (a late gradient of
        an incarnation replaced by `restart_worker`); such an arrival is already counted as
        dropped. Otherwise returns None and the gradient is in flight until the runtime calls
        `record_applied` or `record_dropped`.
        """
        seqs = self._sequences(worker, sequence)
        self.sent += 1
        if seqs.seen(sequence):
            self.dropped_by_reason[DropReason.DUPLICATE] += 1
            return DropReason.DUPLICATE
        retired = sequence in seqs.retired
        seqs.mark(sequence)
        if retired:
            self.dropped_by_reason[DropReason.WORKER_DIED] += 1
            return DropReason.WORKER_DIED
        self._in_flight.add((worker, sequence))
        seqs.extra_batches += max(batches - 1, 0)
        return None

    def record_applied(self, worker: int, sequence: int) -> None:
        self._settle(worker, sequence, "applied")
        self.applied += 1

    def record_dropped(self, worker: int, sequence: int, reason: DropReason | str) -> None:
        self._settle(worker, sequence, f"dropped ({reason})")
        self.dropped_by_reason[DropReason(reason)] += 1

    def drop_in_flight(
        self, reason: DropReason | str, worker: int | None = None
    ) -> list[tuple[int, int]]:
        """Drop everything in flight (of one worker, or all): e.g. WORKER_DIED, ROLLED_BACK.

        Returns the (worker, sequence) pairs dropped, in order, for the drop records.
        """
        reason = DropReason(reason)
        chosen = sorted(key for key in self._in_flight if worker is None or key[0] == worker)
        for key in chosen:
            self._in_flight.remove(key)
            self.dropped_by_reason[reason] += 1
        return chosen

    def record_lost(
        self, worker: int, sequence: int, reason: DropReason | str = DropReason.WORKER_DIED
    ) -> None:
        """A gradient known to have been sent that will never arrive (e.g. the call carrying
        it failed because its worker died): counted as sent and dropped. If it turns up after
        all, it is a duplicate."""
        seqs = self._sequences(worker, sequence)
        if seqs.seen(sequence):
            raise LedgerError(
                f"gradient (worker {worker}, sequence {sequence}) already arrived; it cannot "
                f"also be lost"
            )
        reason = DropReason(reason)
        seqs.mark(sequence)
        self.sent += 1
        self.dropped_by_reason[reason] += 1

    def restart_worker(self, worker: int) -> int:
        """A new incarnation of `worker` replaces the old one; returns the sequence it should
        start at.

        Sequences the old incarnation skipped or lost on the way are retired: should one still
        arrive, it is dropped as WORKER_DIED. This also keeps memory O(1) after a crash that
        left gaps. Gradients of the old incarnation still in flight stay in flight: apply
        them, or drop them with `drop_in_flight(DropReason.WORKER_DIED, worker)`.
        """
        seqs = self._workers.get(worker)
        if seqs is None:
            return self.first_sequence
        start = seqs.next_sequence()
        seqs.retired.update(q for q in range(seqs.high, start) if q not in seqs.ahead)
        seqs.ahead.clear()
        seqs.high = start
        return start

    # -- checkpoints -------------------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        """Plain data for a checkpoint (str keys, lists)."""
        return {
            "first_sequence": self.first_sequence,
            "sent": self.sent,
            "applied": self.applied,
            "dropped": {str(r): n for r, n in sorted(self.dropped_by_reason.items())},
            "workers": {
                str(w): {
                    "high": s.high,
                    "ahead": sorted(s.ahead),
                    "retired": sorted(s.retired),
                    # Only where a local phase made it non-zero: other checkpoints keep their
                    # layout, and one without it reads as 0.
                    **({"extra_batches": s.extra_batches} if s.extra_batches else {}),
                }
                for w, s in sorted(self._workers.items())
            },
            "in_flight": [[w, q] for w, q in sorted(self._in_flight)],
        }

    @classmethod
    def from_plain(
        cls, data: dict[str, Any], in_flight_reason: DropReason | str = DropReason.ROLLED_BACK
    ) -> GradientLedger:
        """Rebuild from `to_plain`. Gradients in flight when the checkpoint was taken are not
        in its weights and their server is gone, so they are counted dropped with
        `in_flight_reason`. New worker incarnations should start at `next_sequence(w)`.
        """
        ledger = cls(first_sequence=int(data["first_sequence"]))
        ledger.sent = int(data["sent"])
        ledger.applied = int(data["applied"])
        ledger.dropped_by_reason = Counter(
            {DropReason(r): int(n) for r, n in data["dropped"].items()}
        )
        for w, s in data["workers"].items():
            extra = int(s.get("extra_batches", 0))
            if extra < 0:
                raise ValueError(f"worker {w}'s extra_batches must be >= 0, not {extra}")
            ledger._workers[int(w)] = _Sequences(
                high=int(s["high"]),
                ahead=set(s["ahead"]),
                retired=set(s["retired"]),
                extra_batches=extra,
            )
        ledger.dropped_by_reason[DropReason(in_flight_reason)] += len(data["in_flight"])
        if ledger.dropped_by_reason[DropReason(in_flight_reason)] == 0:
            del ledger.dropped_by_reason[DropReason(in_flight_reason)]
        if ledger.unaccounted() != 0:
            raise LedgerError(
                f"ledger state does not add up: sent {ledger.sent} != applied {ledger.applied} "
                f"+ dropped {ledger.dropped}"
            )
        return ledger

    # -- internals ---------------------------------------------------------------------------

    def _sequences(self, worker: int, sequence: int) -> _Sequences:
        if type(sequence) is not int or sequence < self.first_sequence:
            raise ValueError(
                f"sequence {sequence!r} of worker {worker} must be an int >= {self.first_sequence}"
            )
        seqs = self._workers.get(worker)
        if seqs is None:
            seqs = self._workers[worker] = _Sequences(high=self.first_sequence)
        return seqs

    def _settle(self, worker: int, sequence: int, outcome: str) -> None:
        try:
            self._in_flight.remove((worker, sequence))
        except KeyError:
            state = (
                "was never recorded as arrived"
                if not self.seen(worker, sequence)
                else ("is already settled")
            )
            raise LedgerError(
                f"gradient (worker {worker}, sequence {sequence}) cannot be recorded "
                f"{outcome}: it {state}; each gradient is settled exactly once"
            ) from None
