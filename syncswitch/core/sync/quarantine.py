"""Quarantine of workers that keep sending bad gradients (admission.py says what is bad)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from syncswitch.core.sync.admission import DropReason
from syncswitch.core.sync.records import Action, Decision


@dataclass(frozen=True)
class Quarantine:
    """Decision: stop admitting `worker`'s gradients until it is restarted and released."""

    worker: int
    reason: str
    bad_count: int  # bad gradients that led to it (consecutive, or total since release)
    problems: dict[str, int]  # what it sent, by drop reason

    def to_decision(self, time_s: float, progress: float) -> Decision:
        return Decision(
            action=Action.QUARANTINE,
            policy="gradient_admission",
            reason=self.reason,
            time_s=time_s,
            progress=progress,
            worker=self.worker,
        )


@dataclass
class _Record:
    consecutive: int = 0
    total: int = 0
    problems: Counter[str] = field(default_factory=Counter)  # of the current streak
    total_problems: Counter[str] = field(default_factory=Counter)


class QuarantinePolicy:
    """Quarantines a worker that keeps sending bad gradients.

    A worker is quarantined after `max_consecutive_bad` bad gradients in a row, or, when
    `max_total_bad` is set, after that many since its last release (so one that alternates
    good and bad is caught too). One bad gradient is not enough by default: a single overflow
    can happen to a healthy worker, and it is dropped anyway. A quarantined worker is never
    released by the policy itself: the runtime restarts it, then calls `release`.
    """

    def __init__(self, max_consecutive_bad: int = 3, max_total_bad: int | None = None) -> None:
        if type(max_consecutive_bad) is not int or max_consecutive_bad < 1:
            raise ValueError(f"max_consecutive_bad {max_consecutive_bad!r} must be an int >= 1")
        if max_total_bad is not None and (
            type(max_total_bad) is not int or max_total_bad < max_consecutive_bad
        ):
            raise ValueError(
                f"max_total_bad {max_total_bad!r} must be None or an int >= "
                f"max_consecutive_bad ({max_consecutive_bad})"
            )
        self.max_consecutive_bad = max_consecutive_bad
        self.max_total_bad = max_total_bad
        self._records: dict[int, _Record] = {}
        self._quarantined: set[int] = set()

    @property
    def quarantined(self) -> frozenset[int]:
        return frozenset(self._quarantined)

    def is_quarantined(self, worker: int) -> bool:
        return worker in self._quarantined

    def observe(self, worker: int, problem: DropReason | str | None) -> Quarantine | None:
        """One admission verdict for `worker` (None = a good gradient); returns a decision the
        first time the worker crosses a limit. Verdicts for a quarantined worker are ignored."""
        if worker in self._quarantined:
            return None
        record = self._records.get(worker)
        if problem is None:
            # The common case, once per applied gradient: nothing to build or count.
            if record is not None and record.consecutive:
                record.consecutive = 0
                record.problems.clear()
            return None
        if record is None:
            record = self._records[worker] = _Record()
        problem = str(problem)
        record.consecutive += 1
        record.total += 1
        record.problems[problem] += 1
        record.total_problems[problem] += 1
        if record.consecutive >= self.max_consecutive_bad:
            count, problems = record.consecutive, record.problems
            how = "in a row"
        elif self.max_total_bad is not None and record.total >= self.max_total_bad:
            count, problems = record.total, record.total_problems
            how = f"since it was last admitted (limit {self.max_total_bad})"
        else:
            return None
        self._quarantined.add(worker)
        sent = ", ".join(f"{name} x{n}" for name, n in sorted(problems.items()))
        return Quarantine(
            worker=worker,
            reason=(
                f"worker {worker} sent {count} bad gradients {how} ({sent}); quarantined "
                f"until it is restarted"
            ),
            bad_count=count,
            problems=dict(sorted(problems.items())),
        )

    def release(self, worker: int) -> None:
        """Admit `worker` again (after the runtime restarted it), with a clean record."""
        self._quarantined.discard(worker)
        self._records.pop(worker, None)
