"""The feed that turns run-directory streams into logger series (no Ray, no backend)."""

import numpy as np
import pytest

from syncswitch.core.sync.records import DropRecord, UpdateRecord
from syncswitch.loggers.base import Point, RunLogger
from syncswitch.loggers.feed import LoggerFeed
from syncswitch.records import Switch
from syncswitch.rundir.events import LoggerFailed, OnlineTimingDecided, ProtocolSwitched, of_kind
from syncswitch.rundir.reader import read_events
from syncswitch.rundir.writer import RunWriter
from tests.rundir.samples import sample_summary


class Recorder(RunLogger):
    """A backend that keeps what it is given, to check what the feed sends."""

    name = "recorder"

    def __init__(self, fail_on: str | None = None) -> None:
        self.points: list[Point] = []
        self.texts: list[tuple[str, str, int]] = []
        self.histograms: list[np.ndarray] = []
        self.closed_with: str | None = None
        self.fail_on = fail_on

    def start(self, config, resume_samples):
        self.config = config

    def scalars(self, points):
        if self.fail_on == "scalars":
            raise ConnectionError("tracking server unreachable\nsecond line")
        self.points.extend(points)

    def text(self, name, text, samples, wall_time_s):
        self.texts.append((name, text, samples))

    def histogram(self, name, values, samples, wall_time_s):
        self.histograms.append(values)

    def close(self, status):
        self.closed_with = status

    def series(self, name: str) -> list[tuple[int, float]]:
        return [(p.samples, p.value) for p in self.points if p.name == name]


def update(version, worker, staleness, protocol, samples, time_s, step_s=0.01):
    return UpdateRecord(
        version=version,
        worker=worker,
        sequence=version,
        computed_version=version - staleness,
        staleness=staleness,
        protocol=protocol,
        samples=samples,
        progress=samples / 1000,
        time_s=time_s,
        loss=1.0,
        step_time_s=step_s,
        lr=0.1,
        momentum=0.9,
    )


def row(samples, time_s, protocol, accuracy):
    return {
        "samples": samples,
        "time_s": time_s,
        "protocol": protocol,
        "val_accuracy": accuracy,
        "val_loss": 1.0,
        "train_loss": float("nan"),
        "samples_per_s": "",
    }


def test_per_gradient_figures_are_folded_per_interval_and_series_stay_in_order():
    recorder = Recorder()
    feed = LoggerFeed([recorder])
    feed.start({"schedule": "bsp:0.5,asp"}, None)
    feed.updates([update(1, 0, 0, "bsp", 100, 1.0, 0.02), update(1, 1, 0, "bsp", 100, 1.0, 0.04)])
    feed.event(
        ProtocolSwitched(
            Switch(
                at_samples=100,
                time_s=1.0,
                version=50,
                from_protocol="bsp",
                to_protocol="asp",
                at_fraction=0.5,
                overhead_s=0.0001,
                reason="schedule",
            )
        )
    )
    feed.updates([update(2, 0, 1, "asp", 150, 1.5), update(3, 1, 3, "asp", 200, 2.0)])
    feed.drops([DropRecord(0, 9, 1, "training_complete", 2.1)])
    # The evaluation of the BSP point arrives only now, after ASP gradients were applied.
    feed.metric(row(100, 1.0, "bsp", 0.5))
    feed.metric(row(200, 2.0, "asp", 0.6))
    feed.summary(sample_summary(final_value=0.6, wall_time_s=2.0))
    feed.close()

    assert recorder.series("validation/accuracy") == [(100, 0.5), (200, 0.6)]
    assert recorder.series("protocol/bsp") == [(100, 1.0), (200, 0.0)]
    assert recorder.series("protocol/asp") == [(100, 0.0), (200, 1.0)]
    assert recorder.series("switches/count") == [(100, 1.0)]
    # Gathered figures go out at the samples of the last gradient they include.
    assert recorder.series("staleness/mean")[0] == (200, pytest.approx(1.0))  # (0+0+1+3)/4
    assert recorder.series("staleness/max")[0] == (200, 3.0)
    assert recorder.series("workers/step_time_s/1")[0] == (200, pytest.approx(0.025))
    assert recorder.series("gradients/dropped/training_complete")[0] == (200, 1.0)
    assert sorted(recorder.histograms[0].tolist()) == [0, 0, 1, 3]
    assert recorder.series("final/accuracy") == [(200, 0.6)]
    assert "nan" not in str(recorder.series("train/loss"))  # no training step: not sent
    for name in {p.name for p in recorder.points}:
        steps = [s for s, _ in recorder.series(name)]
        assert steps == sorted(steps), name
    assert recorder.texts[0][0] == "switches" and "bsp -> asp at 50.0%" in recorder.texts[0][1]
    assert recorder.closed_with == "complete"
    # Wall times follow run times: one second of run time is one second of wall time.
    (first, second) = [p.wall_time_s for p in recorder.points if p.name == "validation/accuracy"]
    assert second - first == pytest.approx(1.0)


def test_a_failing_backend_is_switched_off_and_the_others_go_on():
    broken, working = Recorder(fail_on="scalars"), Recorder()
    failures = []
    feed = LoggerFeed([broken, working], on_failure=lambda name, why: failures.append((name, why)))
    feed.start({}, None)
    feed.updates([update(1, 0, 0, "asp", 10, 0.1)])
    feed.metric(row(10, 0.1, "asp", 0.3))
    feed.metric(row(20, 0.2, "asp", 0.4))
    assert failures == [("recorder", "ConnectionError: tracking server unreachable")]
    assert feed.loggers == [working]
    assert working.series("validation/accuracy") == [(10, 0.3), (20, 0.4)]


def test_a_backend_failing_under_the_run_writer_is_a_logger_failed_event(tmp_path):
    # The runtime hands the writer a LoggerFeed as its RecordSink; the writer tells the feed
    # where failures go, and records each as an events.jsonl line. The run goes on.
    broken, working = Recorder(fail_on="scalars"), Recorder()
    writer = RunWriter(tmp_path, {}, {}, sink=LoggerFeed([broken, working]))
    writer.updates([update(1, 0, 0, "asp", 10, 0.1)])
    writer.metric(row(10, 0.1, "asp", 0.3))
    writer.metric(row(20, 0.2, "asp", 0.4))
    writer.close()
    failed = of_kind(read_events(tmp_path), LoggerFailed)
    assert [(e.logger, e.reason) for e in failed] == [
        ("recorder", "ConnectionError: tracking server unreachable")
    ]
    assert working.series("validation/accuracy") == [(10, 0.3), (20, 0.4)]


def test_online_timing_signals_and_the_decision_reach_the_loggers() -> None:
    recorder = Recorder()
    feed = LoggerFeed([recorder])
    feed.start({"schedule": "online"}, None)
    row = {"samples": 640, "fraction": 0.2, "signal": 0.9, "threshold": 0.35, "drift_sq": None}
    feed.timing_signal(row)
    feed.timing_signal({**row, "samples": 1280, "signal": 0.3})
    assert recorder.series("timing/signal") == [(640, 0.9), (1280, 0.3)]
    assert recorder.series("timing/threshold") == [(640, 0.35), (1280, 0.35)]
    assert recorder.series("timing/drift_sq") == []  # no value: no point
    feed.event(
        OnlineTimingDecided(
            switch=True,
            reason="signal",
            rule="noise-scale",
            progress=0.4,
            values={},
            samples=1280,
            time_s=2.0,
            to="asp",
            describe="switch at 0.400 (...)",
        )
    )
    assert recorder.series("timing/switched_at") == [(1280, 0.4)]
    assert recorder.texts[-1] == ("online_timing", "online timing: switch at 0.400 (...)", 1280)
