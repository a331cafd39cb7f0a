"""Exactly-once gradient accounting: one record for the synchronizer and summary.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from syncswitch.records.fields import Fields


@dataclass(frozen=True)
class Accounting:
    """Every gradient a worker sent: applied, dropped (by reason) or still waiting at a BSP
    barrier, so sent = applied + dropped + waiting (+ unaccounted, 0 unless there is a bug).

    The synchronizer makes one per shard (`Synchronizer.accounting()`); summary.json's
    "gradients" is its plain form. `unaccounted` is None only for a summary.json of an early
    run, which did not write it."""

    sent: int = 0
    applied: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # by reason, sorted
    waiting: int = 0  # at a BSP barrier
    unaccounted: int | None = 0

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def to_plain(self) -> dict[str, Any]:
        """summary.json's "gradients" (the key order it has always had)."""
        record: dict[str, Any] = {
            "sent": self.sent,
            "applied": self.applied,
            "dropped": dict(self.dropped),
            "waiting": self.waiting,
        }
        if self.unaccounted is not None:
            record["unaccounted"] = self.unaccounted
        return record

    @classmethod
    def from_plain(cls, data: Any, where: str) -> Accounting:
        """Back from `to_plain()`, checked: one RunDirError line naming `where` otherwise."""
        read = Fields(data, where)
        return cls(
            sent=read.integer("sent"),
            applied=read.integer("applied"),
            dropped=read.numbers_by_name("dropped", {}, integers=True),
            waiting=read.integer("waiting", 0),
            unaccounted=read.optional_integer("unaccounted", None, low=-(2**62)),
        )
