"""The progress marks an update crosses (evaluation points, periodic checkpoints) and the time
a protocol was in force: the synchronizer's bookkeeping, on its `LiveState`."""

from __future__ import annotations

from collections.abc import Callable

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.live import LiveState
from syncswitch.core.sync.records import EvalPoint


class Milestones:
    def __init__(self, config: SyncConfig, now_s: Callable[[], float]) -> None:
        self.config = config
        self.now_s = now_s

    def evaluations(self, live: LiveState, *, all_left: bool = False) -> list[EvalPoint]:
        """The evaluation points progress has crossed and not taken yet (`all_left`: every
        one not taken yet, the workload having ended elsewhere), now taken. The last point,
        at 1.0, is the end's (`point`)."""
        cfg = self.config
        points = []
        while live.next_eval_index * cfg.eval_every < 1.0 - 1e-9 and (
            all_left or cfg.progress(live.samples) >= live.next_eval_index * cfg.eval_every - 1e-12
        ):
            points.append(self.point(live, live.next_eval_index * cfg.eval_every))
            live.next_eval_index += 1
        return points

    def point(self, live: LiveState, fraction: float) -> EvalPoint:
        return EvalPoint(
            fraction=fraction,
            samples=live.samples,
            version=live.version,
            time_s=self.now_s(),
            protocol=live.spec.name,
        )

    def checkpoint_label(self, live: LiveState) -> str:
        """Why a snapshot is due now ("" if none is): one asked for, or a periodic one whose
        progress mark was crossed (every mark crossed is counted taken)."""
        cfg = self.config
        label = live.snapshot_requested
        while (
            cfg.checkpoint_every > 0
            and cfg.progress(live.samples)
            >= live.next_checkpoint_index * cfg.checkpoint_every - 1e-12
        ):
            live.next_checkpoint_index += 1
            label = label or "periodic"
        return label

    def close_phase_time(self, live: LiveState, protocol: str) -> float:
        """Count the time since the last switch as `protocol`'s; returns the run seconds now,
        from which the next protocol's time counts."""
        now_s = self.now_s()
        live.time_by_protocol[protocol] += now_s - live.phase_started_s
        live.phase_started_s = now_s
        return now_s
