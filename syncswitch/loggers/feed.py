"""The feed: turns what the run directory writer receives into series for logger backends.

RunWriter hands the feed the same streams it writes to disk (evaluation rows, applied and
dropped gradients, events as their records (rundir/events.py), worker statistics, the
summary): the feed is the writer's RecordSink (rundir/sink.py), which the runtime builds
around the configured backends and hands to the writer. Per-gradient figures are only
folded into running totals as they arrive (a few additions per gradient, on the driver) and
sent once per evaluation point, so a logger costs nothing per gradient on the wire:

    test/accuracy, test/loss, train/loss, throughput/samples_per_s    per evaluation
    protocol/<name> (1 while in force)                                per evaluation
    staleness/mean, staleness/max, staleness (histogram)               per evaluation interval
    workers/step_time_s/<w> (mean of its applied gradients)           per evaluation interval
    gradients/applied, gradients/dropped[/<reason>]                   per evaluation interval
    switches/count (and a text note)                                  per switch
    stragglers/detected, stragglers/flagged (and a text note)         per detection, recovery
    timing/signal, timing/threshold, timing/noise_trace, ...          per online-timing check
    timing/switched_at (and a text note: where and why)               at the online switch
    final/accuracy, final/wall_time_s, ...; workers/<stat>/<w>        at the end

Every series is against samples (the step) and wall time. A backend that fails is switched
off with an event in events.jsonl and the run goes on: a logging outage must not cost a run.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from syncswitch.core.sync.protocol import Schedule, ScheduleError
from syncswitch.core.sync.records import DropRecord, UpdateRecord
from syncswitch.errors import ConfigError
from syncswitch.loggers.base import Point, RunLogger
from syncswitch.records import Switch
from syncswitch.records.metric import COLUMN_PREFIX
from syncswitch.rundir.events import (
    OnlineTimingDecided,
    ProtocolSwitched,
    RunEvent,
    StragglerChanged,
)
from syncswitch.rundir.summary import RUNNING, Summary

log = logging.getLogger(__name__)

# Columns of worker_steps.csv sent at the end, one series per worker.
_WORKER_STATS = ("steps", "step_time_p50_s", "step_time_p90_s", "step_time_max_s", "wait_mean_s")


class LoggerFeed:
    def __init__(
        self,
        loggers: Sequence[RunLogger],
        on_failure: Callable[[str, str], None] = lambda name, error: None,
    ) -> None:
        self._loggers = list(loggers)
        self._on_failure = on_failure
        self._origin_s: float | None = None  # Unix time at run time 0
        self._samples = 0
        self._time_s = 0.0
        self._protocols: list[str] = []  # every protocol seen, in order
        self._protocol: str | None = None
        self._switches = 0
        self._applied = 0
        self._dropped: Counter[str] = Counter()
        self._detections = 0
        self._flagged: set[int] = set()
        self._interval_staleness: Counter[int] = Counter()
        self._interval_step_s: dict[int, list[float]] = defaultdict(lambda: [0.0, 0])
        self._status = RUNNING  # summary.json's, as of its last final write

    @property
    def loggers(self) -> list[RunLogger]:
        return list(self._loggers)

    # -- what RunWriter hands over --------------------------------------------------------

    def start(
        self,
        config: dict[str, Any],
        resume_samples: int | None,
        on_failure: Callable[[str, str], None] | None = None,
    ) -> None:
        """Open every backend's run; one that cannot start stops the run before it begins.
        `on_failure`, where given (the run directory writer's: a LoggerFailed event), is told
        of a backend switched off later, in place of the one given at construction."""
        if on_failure is not None:
            self._on_failure = on_failure
        # Every scheduled protocol has its series from the first point on (a straggler policy
        # may add one later).
        try:
            scheduled = [p.spec.name for p in Schedule.parse(str(config.get("schedule"))).phases]
        except ScheduleError:
            scheduled = []
        self._protocols = list(dict.fromkeys(scheduled))
        for logger in self._loggers:
            try:
                logger.start(config, resume_samples)
            except ConfigError:
                raise
            except Exception as error:
                raise ConfigError(
                    f"logger {logger.name!r} cannot start: {_one_line(error)}"
                ) from None

    def updates(self, records: list[UpdateRecord]) -> None:
        if not records:
            return
        staleness, step_s = self._interval_staleness, self._interval_step_s
        for record in records:
            staleness[record.staleness] += 1
            total = step_s[record.worker]
            total[0] += record.step_time_s
            total[1] += 1
        last = records[-1]
        self._applied += len(records)
        self._at(last.samples, last.time_s)
        if self._protocol is None:
            self._protocol = last.protocol
            self._protocols.append(last.protocol)

    def drops(self, records: list[DropRecord]) -> None:
        for record in records:
            self._dropped[record.reason] += 1

    def metric(self, row: dict[str, Any]) -> None:
        """An evaluation point: its figures, and what was gathered since the last one.

        Evaluation runs off the critical path, so a row arrives after later gradients were
        applied. Its own figures go out at its samples; the gathered ones at the samples of
        the last gradient they include. Each series thus comes from one source, in order.
        """
        samples, time_s = int(row["samples"]), float(row["time_s"])
        self._wall(time_s)
        protocol = str(row.get("protocol") or self._protocol or "")
        if protocol and protocol not in self._protocols:
            self._protocols.append(protocol)
        evaluated = {
            **measures_of(row),
            "train/loss": row.get("train_loss"),
            "throughput/samples_per_s": row.get("samples_per_s"),
            **{f"protocol/{p}": float(p == protocol) for p in self._protocols},
        }
        self._send(evaluated, samples, time_s)
        self._send(self._gathered(), self._samples, self._time_s)

    def _gathered(self) -> dict[str, float]:
        values: dict[str, float] = {
            "gradients/applied": self._applied,
            "gradients/dropped": sum(self._dropped.values()),
            **{f"gradients/dropped/{r}": n for r, n in self._dropped.items()},
        }
        counts = self._interval_staleness
        if counts:
            gradients = sum(counts.values())
            values["staleness/mean"] = sum(s * n for s, n in counts.items()) / gradients
            values["staleness/max"] = max(counts)
            spread = np.repeat(
                np.fromiter(counts.keys(), dtype=float), np.fromiter(counts.values(), dtype=int)
            )
            self._call("histogram", "staleness", spread, self._samples, self._wall(self._time_s))
        for worker, (total_s, count) in sorted(self._interval_step_s.items()):
            values[f"workers/step_time_s/{worker}"] = total_s / count
        self._interval_staleness = Counter()
        self._interval_step_s = defaultdict(lambda: [0.0, 0])
        return values

    def timing_signal(self, row: dict[str, Any]) -> None:
        """One check of an online phase's rule: its signal against its threshold."""
        samples = int(row.get("samples") or self._samples)
        names = ("signal", "threshold", "noise_trace", "grad_sq", "drift_sq", "noise_scale", "loss")
        self._send({f"timing/{name}": row.get(name) for name in names}, samples, self._time_s)

    def event(self, event: RunEvent) -> None:
        if isinstance(event, OnlineTimingDecided):
            samples, time_s = event.samples, event.time_s
            self._send({"timing/switched_at": event.progress}, samples, time_s)
            text = f"online timing: {event.describe}"
            self._call("text", "online_timing", text, samples, self._wall(time_s))
        elif isinstance(event, ProtocolSwitched):
            self._switch(event.switch.rounded())
        elif isinstance(event, StragglerChanged):
            self._straggler(event)

    def worker_stats(self, rows: list[dict[str, Any]]) -> None:
        values = {}
        for row in rows:
            for column in _WORKER_STATS:
                if column in row:
                    values[f"workers/{column}/{row['worker']}"] = row[column]
        self._send(values, self._samples, self._time_s)

    def summary(self, summary: Summary) -> None:
        status = summary.status
        if status == RUNNING:
            return  # rewritten after every evaluation; the metrics went out already
        self._send(self._gathered(), self._samples, self._time_s)  # what came after the last
        self._send(
            {
                f"final/{summary.metric.name}": summary.final_value,
                f"final/best_{summary.metric.name}": summary.best_value,
                **{f"final/test/{k}": v for k, v in (summary.test or {}).items()},
                "final/wall_time_s": summary.wall_time_s,
                "final/samples_per_s": summary.samples_per_s,
            },
            self._samples,
            self._time_s,
        )
        self._status = status

    def close(self) -> None:
        self._call("close", self._status)

    # -- internals ----------------------------------------------------------------------------

    def _switch(self, switch: Switch) -> None:
        samples, time_s = switch.at_samples, switch.time_s
        self._switches += 1
        previous, protocol = switch.from_protocol, switch.to_protocol
        for name in (previous, protocol):
            if name and name not in self._protocols:
                self._protocols.append(name)
        self._protocol = protocol
        self._send({"switches/count": self._switches}, samples, time_s)
        overhead_ms = 1000 * switch.overhead_s
        text = (
            f"{previous} -> {protocol} at {switch.at_fraction:.1%} of samples "
            f"({switch.reason}; overhead {overhead_ms:.2f} ms)"
        )
        self._call("text", "switches", text, samples, self._wall(time_s))

    def _straggler(self, event: StragglerChanged) -> None:
        worker, time_s = event.worker, event.time_s
        if event.detected:
            self._detections += 1
            self._flagged.add(worker)
        else:
            self._flagged.discard(worker)
        values = {"stragglers/detected": self._detections, "stragglers/flagged": len(self._flagged)}
        self._send(values, self._samples, time_s)
        text = f"worker {worker} {event.kind}: {event.reason or ''}"
        self._call("text", "stragglers", text, self._samples, self._wall(time_s))

    def _at(self, samples: int, time_s: float) -> None:
        if self._origin_s is None:
            self._origin_s = time.time() - time_s
        self._samples, self._time_s = max(self._samples, samples), time_s

    def _wall(self, time_s: float) -> float:
        if self._origin_s is None:
            self._origin_s = time.time() - time_s
        return self._origin_s + time_s

    def _send(self, values: dict[str, Any], samples: int, time_s: float) -> None:
        wall = self._wall(time_s)
        points = [
            Point(name, float(value), samples, wall)
            for name, value in values.items()
            if _is_number(value)
        ]
        if points:
            self._call("scalars", points)

    def _call(self, method: str, *args: Any) -> None:
        for logger in list(self._loggers):
            try:
                getattr(logger, method)(*args)
            except Exception as error:  # a logging outage must not stop the run
                self._loggers.remove(logger)
                reason = _one_line(error)
                log.warning("logger %s failed and is switched off: %s", logger.name, reason)
                self._on_failure(logger.name, reason)


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return (text.splitlines() or [""])[0][:300]


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or value is None or value == "":
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def measures_of(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row's measures by logger name: val_accuracy -> validation/accuracy (and
    test_loss -> test/loss in runs whose evaluations read the test set)."""
    named: dict[str, Any] = {}
    for split, prefix in COLUMN_PREFIX.items():
        for key, value in row.items():
            if key.startswith(prefix + "_"):
                named[f"{split}/{key[len(prefix) + 1 :]}"] = value
    return named
