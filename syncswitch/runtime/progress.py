"""Live progress on the terminal: protocol, samples, test accuracy and throughput."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from syncswitch.control.shard import ShardState
from syncswitch.terminal import project_console


class ProgressDisplay:
    def __init__(self, enabled: bool, total_samples: int) -> None:
        self._enabled = enabled
        self._total = total_samples
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> ProgressDisplay:
        if self._enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.fields[protocol]:>6}"),
                BarColumn(),
                TextColumn("{task.completed:>9,.0f}/{task.total:,.0f} samples"),
                TextColumn("acc {task.fields[accuracy]}"),
                TextColumn("{task.fields[rate]} samples/s"),
                TextColumn("{task.fields[excluded]}"),
                TimeElapsedColumn(),
                console=project_console(),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                "train", total=self._total, protocol="", accuracy="  -  ", rate="-", excluded=""
            )
        return self

    def update(self, state: ShardState, last_metric: dict[str, Any] | None) -> None:
        if self._progress is None:
            return
        time_s = state.time_s or 0.0
        rate = f"{state.samples / time_s:,.0f}" if time_s > 0 else "-"
        accuracy = f"{100 * last_metric['test_accuracy']:5.1f}%" if last_metric else "  -  "
        excluded = state.excluded
        self._progress.update(
            self._task,
            completed=min(state.samples, self._total),
            protocol=state.protocol.name if state.protocol else "",
            accuracy=accuracy,
            rate=rate,
            # Elastic BSP: whom the barrier is not waiting for right now.
            excluded=f"not waiting for {','.join(map(str, excluded))}" if excluded else "",
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)
