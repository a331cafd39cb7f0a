"""Live progress on the terminal: what the run is doing from its first second, then protocol,
samples, test accuracy, throughput and an ETA; its last frame is the run's summary figures.

Before the first step a status line says what is starting (`starting(...)`: loading data,
starting Ray, starting worker processes), each step ending in a line with its elapsed time;
`train()` opens it, the runtimes name their steps, and the
progress bar replaces it when training begins. On the simulator the bar shows the simulated
seconds beside the host's elapsed time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.status import Status

from syncswitch.control.evaluations import MetricsRow
from syncswitch.control.shard import ShardState
from syncswitch.records.metric import MetricSpec
from syncswitch.terminal import project_console


class StartupSteps:
    """The start-up's steps as they go: a spinner on the step under way, and a line with its
    elapsed time for each step done, so a slow start says where its time goes."""

    def __init__(self, first_step: str) -> None:
        self.status: Status = project_console().status(f"syncswitch: {first_step} ...")
        self.step, self.started_s = first_step, time.monotonic()

    def next(self, step: str) -> None:
        self._done()
        self.step, self.started_s = step, time.monotonic()
        self.status.update(f"syncswitch: {step} ...")

    def stop(self) -> None:
        self._done()
        self.status.stop()

    def _done(self) -> None:
        elapsed_s = time.monotonic() - self.started_s
        self.status.console.print(f"syncswitch: {self.step}: {elapsed_s:.1f} s", highlight=False)


# The start-up steps of the run being set up in this process (one run at a time), and when
# its start-up began (shown or not).
_startup: StartupSteps | None = None
_startup_began_s: float | None = None


@contextmanager
def startup_status(enabled: bool, first_step: str) -> Iterator[None]:
    """Show `first_step` at once and each later `starting(...)` step until the bar starts."""
    global _startup, _startup_began_s
    _startup_began_s = time.monotonic()
    steps = StartupSteps(first_step) if enabled else None
    if steps is not None:
        steps.status.start()
    _startup = steps
    try:
        yield
    finally:
        _end_startup()
        _startup_began_s = None


def starting(step: str) -> None:
    """Name the start-up step now under way ("starting Ray", "starting 8 worker processes", ...)."""
    if _startup is not None:
        _startup.next(step)


def startup_elapsed_s(since_s: float) -> float:
    """Seconds since this run's start-up began (its first step, "loading data"), so that the
    start-up a summary reports is the sum of the steps it listed; from `since_s` (a
    `time.monotonic()` reading) when no start-up was opened in this process."""
    began = _startup_began_s if _startup_began_s is not None else since_s
    return time.monotonic() - min(began, since_s)


def _end_startup() -> None:
    global _startup
    if _startup is not None:
        _startup.stop()
        _startup = None


class ProgressDisplay:
    def __init__(
        self,
        enabled: bool,
        total_samples: int,
        *,
        simulated: bool = False,
        metric: MetricSpec | None = None,
    ) -> None:
        self._enabled = enabled
        self._metric = metric or MetricSpec()
        self._total = total_samples
        self._simulated = simulated
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> ProgressDisplay:
        if self._enabled:
            _end_startup()
            clock = (
                # The bar's own clocks are the host's; the run's time is the simulator's.
                [TextColumn("sim {task.fields[run_time]}"), TextColumn("host")]
                if self._simulated
                else []
            )
            self._progress = Progress(
                TextColumn("[bold]{task.fields[protocol]:>6}"),
                BarColumn(),
                TextColumn("{task.completed:>9,.0f}/{task.total:,.0f} samples"),
                TextColumn(f"{_short_name(self._metric)} {{task.fields[accuracy]}}"),
                TextColumn("{task.fields[rate]} samples/s"),
                TextColumn("{task.fields[excluded]}"),
                *clock,
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=project_console(),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                "train",
                total=self._total,
                protocol="",
                accuracy="  -  ",
                rate="-",
                excluded="",
                run_time="-",
            )
        return self

    def update(self, state: ShardState, last_metric: MetricsRow | None) -> None:
        if self._progress is None:
            return
        time_s = state.time_s or 0.0
        rate = f"{state.samples / time_s:,.0f}" if time_s > 0 else "-"
        accuracy = self._metric.show(last_metric.value) if last_metric else "  -  "
        excluded = state.excluded
        self._progress.update(
            self._task,
            completed=min(state.samples, self._total),
            protocol=state.protocol.name if state.protocol else "",
            accuracy=accuracy,
            rate=rate,
            # Elastic BSP: whom the barrier is not waiting for right now.
            excluded=f"not waiting for {','.join(map(str, excluded))}" if excluded else "",
            run_time=f"{time_s:,.1f} s",
        )

    def finish(self, state: ShardState, final_metric: MetricsRow | None) -> None:
        """The last frame: the whole workload and the final evaluation, as the summary
        reports them (the loop's last frame was drawn before the final evaluation)."""
        if self._progress is None:
            return
        self.update(state, final_metric)
        if final_metric is not None:  # summary.json's time and rate are the final point's
            time_s = float(final_metric.time_s)
            self._progress.update(
                self._task,
                rate=f"{state.samples / time_s:,.0f}" if time_s > 0 else "-",
                run_time=f"{time_s:,.1f} s",
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)


def _short_name(metric: MetricSpec) -> str:
    """The bar's label of the metric decisions read: "val acc", "val mse"."""
    name = "acc" if metric.name == "accuracy" else metric.name
    return f"val {name}" if metric.split == "validation" else name
