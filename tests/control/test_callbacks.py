"""Callbacks without a run (control/callbacks.py, callback_runner.py, early_stopping.py): the
checks of what train() is given, the runner's stops and failures, early stopping's rule."""

import pytest

from syncswitch.control.callback_runner import CallbackRunner
from syncswitch.control.callbacks import Callback, StopRun, check_callbacks
from syncswitch.control.early_stopping import EarlyStopping
from syncswitch.control.evaluations import MetricsRow
from syncswitch.errors import ConfigError
from syncswitch.records.metric import MetricSpec

ACCURACY = MetricSpec("accuracy", higher_is_better=True)


def row(value: float, samples: int) -> MetricsRow:
    values = {"accuracy": value, "loss": 1.0}
    return MetricsRow(0.5, samples, samples / 1000, samples // 10, "bsp", values, 2.0, None)


class Recorder(Callback):
    def __init__(self, stop_at: int | None = None) -> None:
        self.seen: list[float] = []
        self.stop_at = stop_at

    def on_evaluation(self, event):
        self.seen.append(event.value)
        if len(self.seen) == self.stop_at:
            return StopRun(f"seen {self.stop_at}")
        return None


def runner_of(*callbacks) -> CallbackRunner:
    runner = CallbackRunner(check_callbacks(list(callbacks)))
    runner.install([], ACCURACY)
    return runner


def test_an_evaluation_event_carries_the_row_and_the_metric() -> None:
    recorder = Recorder()
    events = []
    recorder.on_evaluation = lambda event: events.append(event)  # type: ignore[method-assign]
    runner_of(recorder).evaluated(row(0.75, 200))
    (event,) = events
    assert (event.value, event.metrics["loss"], event.metric) == (0.75, 1.0, ACCURACY)
    assert (event.samples, event.fraction, event.version, event.protocol) == (200, 0.2, 20, "bsp")
    assert (event.time_s, event.train_loss) == (0.5, 2.0)
    with pytest.raises(TypeError):
        event.metrics["accuracy"] = 1.0  # a frozen event: read-only values too


def test_the_first_stop_asked_for_wins_and_is_taken_once() -> None:
    first, second = Recorder(stop_at=2), Recorder(stop_at=1)
    runner = runner_of(first, second)
    runner.evaluated(row(0.5, 100))
    assert runner.take_stop() == "seen 1" and runner.take_stop() is None
    runner.evaluated(row(0.6, 200))  # `first` asks now: too late, one stop per run
    assert runner.take_stop() is None
    assert first.seen == second.seen == [0.5, 0.6]  # both still called after the stop


def test_a_raising_callback_stops_the_run_once_and_is_not_called_again(capsys) -> None:
    class Boom(Callback):
        calls = 0

        def on_evaluation(self, event):
            self.calls += 1
            raise ValueError("no good\nsecond line")

    boom, after = Boom(), Recorder()
    runner = runner_of(boom, after)
    runner.evaluated(row(0.5, 100))
    runner.evaluated(row(0.6, 200))
    assert boom.calls == 1 and after.seen == [0.5, 0.6]
    assert runner.failure == "callback Boom.on_evaluation raised ValueError: no good"
    assert isinstance(runner.error, ValueError)
    assert runner.take_stop() == runner.failure
    assert capsys.readouterr().err == f"syncswitch: {runner.failure}; the run stops\n"


def test_a_hook_answering_anything_but_a_stop_is_a_failure(capsys) -> None:
    class Truthy(Callback):
        def on_evaluation(self, event):
            return True

    runner = runner_of(Truthy())
    runner.evaluated(row(0.5, 100))
    assert runner.failure == (
        "callback Truthy.on_evaluation returned True; a hook returns None or StopRun(reason)"
    )
    assert runner.error is None and runner.take_stop() == runner.failure


def test_what_train_is_given_as_callbacks_is_checked_in_one_line() -> None:
    class Mine(Callback):
        pass

    class OnlyEnd:  # a protocol: no base class needed
        def on_end(self, summary):
            pass

    assert check_callbacks(None) == ()
    assert len(check_callbacks([Mine(), OnlyEnd()])) == 2
    for given, says in [
        (Mine(), "give a list of callback objects"),
        ("early", "give a list of callback objects"),
        ([Mine], "Mine is a class; give an instance (Mine())"),
        ([object()], "is not a callback: it has none of the methods on_start"),
    ]:
        with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")) as e:
            check_callbacks(given)
        assert "\n" not in str(e.value)


def test_a_stop_needs_a_reason_and_early_stopping_sound_settings() -> None:
    with pytest.raises(ConfigError, match="StopRun reason ''"):
        StopRun("")
    with pytest.raises(ConfigError, match="patience 0: give a whole number >= 1"):
        EarlyStopping(0)
    with pytest.raises(ConfigError, match=r"min_delta -0\.1: give a number >= 0"):
        EarlyStopping(2, min_delta=-0.1)


def test_early_stopping_stops_once_and_a_resumed_run_counts_what_came_before() -> None:
    values = [(0.5, 100), (0.7, 200), (0.6, 300), (0.65, 400), (0.1, 500)]
    stopping = EarlyStopping(patience=1)
    runner = runner_of(stopping)
    runner.started(1000, resumed=False, earlier=[])
    stops = []
    for value, samples in values:
        runner.evaluated(row(value, samples))
        stops.append(runner.take_stop())
    assert [s is not None for s in stops] == [False, False, True, False, False]
    assert (
        stops[2]
        == "early stopping: accuracy has not improved on 70.00% by more than 0 in 1 evaluations"
    )
    # Resumed after the second: the same stop at the same evaluation.
    resumed = runner_of(EarlyStopping(patience=1))
    resumed.started(1000, resumed=True, earlier=[row(v, s) for v, s in values[:2]])
    resumed.evaluated(row(*values[2]))
    assert resumed.take_stop() == stops[2]
