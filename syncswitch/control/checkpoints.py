"""Checkpoint keeping: shards snapshot at the same points (per label: scheduled, timed, final),
and a checkpoint is written once every shard has; a timed checkpoint is due by the injected
clock, counted from the last one written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from syncswitch.control.record import RunRecord
from syncswitch.control.run_state import RunCheckpoint
from syncswitch.control.shard import ShardReport
from syncswitch.core.reliability.checkpoints import (
    CheckpointInfo,
    CheckpointStore,
    LoadedCheckpoint,
)
from syncswitch.core.sync.records import Snapshot
from syncswitch.rundir import RunWriter, events, names

CHECKPOINT_DIR = names.CHECKPOINTS


class CheckpointKeeper:
    def __init__(
        self,
        writer: RunWriter,
        record: RunRecord,
        *,
        every_s: float,
        clock: Callable[[], float],
        total_samples: int | None = None,
        on_written: Callable[[CheckpointInfo], None] | None = None,
    ) -> None:
        """`record` is the controller's RunRecord, checkpointed with the servers so that a
        resumed run knows what this one had learnt; `total_samples`, the workload, so that it
        can tell when it is resumed under another; `on_written` is told of each checkpoint
        once it is on disk (the callbacks' hook)."""
        self.on_written = on_written
        self.writer = writer
        self.total_samples = total_samples
        self.store = CheckpointStore(writer.dir / CHECKPOINT_DIR)
        self.record = record
        self.every_s = every_s
        self.clock = clock
        self._queues: dict[str, list[list[Snapshot]]] = {}  # label -> per shard
        self._last_at = clock()

    def collect(
        self,
        reports: list[ShardReport],
        max_samples: float | None,
        hold_from: int | None = None,
    ) -> None:
        """Queue this drain's snapshots; write a checkpoint for each set every shard has sent.
        Snapshots past `max_samples` (where the loss was last healthy) are not kept; see
        `release` for `hold_from`."""
        for index, report in enumerate(reports):
            for snapshot in report.outcome.snapshots:
                if max_samples is not None and snapshot.samples > max_samples:
                    continue
                queues = self._queues.setdefault(snapshot.label, [])
                while len(queues) < len(reports):
                    queues.append([])
                queues[index].append(snapshot)
        self.release(hold_from)

    def release(self, hold_from: int | None) -> None:
        """Write every complete set of snapshots, oldest first, but hold those at or past
        `hold_from`, the earliest evaluation point whose metrics row is not written yet: a
        checkpoint past it would let a crash (or a full disk) lose that row for good, as a
        resumed run does not evaluate the points behind its checkpoint again."""
        while True:
            ready = [q for q in self._queues.values() if q and all(q)]
            if not ready:
                return
            oldest = min(ready, key=lambda queues: queues[0][0].samples)
            if hold_from is not None and oldest[0][0].samples >= hold_from:
                return
            self.write([queue.pop(0) for queue in oldest])

    def write(self, shard_snapshots: list[Snapshot]) -> None:
        first = shard_snapshots[0]
        record = self.record
        kept = replace(
            record,
            metrics=[m for m in record.metrics if m.samples <= first.samples],
            # The best as of this checkpoint; the record needs it and any found since.
            bests=[b for b in record.bests if b.samples <= first.samples][-1:],
        )
        record.bests = kept.bests + [b for b in record.bests if b.samples > first.samples]
        checkpoint = RunCheckpoint(
            tuple(s.state for s in shard_snapshots), kept, self.total_samples
        )
        info = self.store.save(
            checkpoint.to_plain(),
            samples=first.samples,
            label=first.label,
            meta={
                "progress": round(first.progress, 6),
                "version": first.version,
                "time_s": round(first.time_s, 3),
            },
        )
        record.checkpoints += 1
        self._last_at = self.clock()
        self.writer.event(events.CheckpointWritten.from_plain(info.to_plain()))
        if self.on_written is not None:
            self.on_written(info)

    def timed_due(self) -> bool:
        """A timed checkpoint is due (and counted as asked for, so it is asked for once)."""
        now = self.clock()
        if not self.every_s or now - self._last_at < self.every_s:
            return False
        self._last_at = now
        return True

    def load_latest(self, max_samples: int | None = None) -> LoadedCheckpoint:
        """The newest checkpoint whose run state parses (one that does not is passed over
        like a damaged one), at or before `max_samples` if given."""
        return self.store.load_latest(max_samples=max_samples, validate=RunCheckpoint.from_plain)

    def forget_snapshots(self) -> None:
        """Snapshots that only some shards had sent belong to a timeline the servers lost."""
        self._queues.clear()
