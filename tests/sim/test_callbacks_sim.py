"""train(callbacks=...) end to end: what a callback sees, its stop, its failure, and the
summary train() prints; on the simulator, and one stop on the session's Ray."""

import json
import re

import pytest

from syncswitch import Callback, CallbackError, StopRun
from syncswitch.config import TrainConfig
from syncswitch.errors import ConfigError
from syncswitch.rundir import names
from syncswitch.runtime.train import train
from tests.sim.test_sim_runtime import JOB, accounted, rows

# 1,600 training samples, 2 workers: a second or two on the simulator.
SHORT = dict(workers=2, epochs=1.0, eval_every=0.25, schedule="bsp:0.5,asp")


def run(tmp_path, dataset, *callbacks, name="run", quiet=True, **overrides):
    values = {**JOB, **SHORT, "runtime": "sim", "out": str(tmp_path / name), **overrides}
    return train(
        TrainConfig(**values), dataset=dataset, callbacks=list(callbacks), print_summary=not quiet
    )


class Recorder(Callback):
    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.started, self.evaluations, self.switches, self.checkpoints = [], [], [], []
        self.ended = []

    def on_start(self, event):
        self.started.append(event)

    def on_evaluation(self, event):
        self.evaluations.append(event)
        if len(self.evaluations) == self.stop_after:
            return StopRun(f"enough after {self.stop_after} evaluations")
        return None

    def on_switch(self, event):
        self.switches.append(event)

    def on_checkpoint(self, event):
        self.checkpoints.append(event)

    def on_end(self, summary):
        self.ended.append(summary)


def test_a_callback_sees_every_evaluation_the_switch_checkpoints_and_the_end(
    mnist, tmp_path, capsys
) -> None:
    seen = Recorder()
    result = run(tmp_path, mnist, seen, checkpoint_every=0.5)
    assert capsys.readouterr().out == ""  # print_summary=False: nothing printed
    (start,) = seen.started
    assert not start.resumed and start.evaluations == () and start.metric.name == "accuracy"
    written = rows(result.run_dir, names.METRICS)
    assert [e.samples for e in seen.evaluations] == [int(r["samples"]) for r in written]
    for event, saved in zip(seen.evaluations, written, strict=True):
        assert event.value == pytest.approx(float(saved["val_accuracy"]))
        assert event.metrics["loss"] == pytest.approx(float(saved["val_loss"]))
        assert event.fraction == pytest.approx(float(saved["fraction"]))
        assert event.protocol == saved["protocol"]
    assert seen.evaluations[-1].fraction == 1.0
    (switch,) = seen.switches
    assert (switch.from_protocol, switch.to_protocol) == ("bsp", "asp")
    assert switch.at_fraction == pytest.approx(0.5, abs=0.02)
    assert [c.label for c in seen.checkpoints][-1] == "final"
    assert all(c.path.exists() or c.label != "final" for c in seen.checkpoints)
    assert [c.fraction for c in seen.checkpoints] == sorted(c.fraction for c in seen.checkpoints)
    (summary,) = seen.ended
    assert summary == result.summary and summary.stopped_early is None


def test_a_callback_stops_the_run_and_the_summary_says_why(mnist, tmp_path, capsys) -> None:
    stopper, watcher = Recorder(stop_after=2), Recorder()
    result = run(tmp_path, mnist, stopper, watcher, quiet=False)
    reason = "enough after 2 evaluations"
    # train() prints the table `syncswitch train` prints, the stop's reason in it.
    printed = capsys.readouterr().out
    assert printed.startswith("run complete: bsp:0.5,asp, 2 workers, SIMULATED timing")
    assert re.search(rf"stopped early +{reason}", printed)
    assert f"results written to {result.run_dir}/" in printed
    on_disk = json.loads((result.run_dir / names.SUMMARY).read_text())
    assert on_disk["status"] == "complete" and on_disk["stopped_early"] == reason
    assert result.summary.stopped_early == reason and result.summary.samples < 1600
    accounted(on_disk)
    assert (result.run_dir / names.FINAL_WEIGHTS).exists()
    # Every hook is still called after the stop: the evaluation points left are measured.
    assert len(watcher.evaluations) == len(stopper.evaluations) >= 2
    assert watcher.ended and watcher.ended[0].stopped_early == reason


def test_a_raising_callback_stops_the_run_keeps_its_files_and_says_so(
    mnist, tmp_path, capsys
) -> None:
    class Broken(Callback):
        def on_evaluation(self, event):
            if event.fraction >= 0.25:
                raise KeyError("the dashboard is down")

    watcher = Recorder()
    with pytest.raises(CallbackError) as error:
        run(tmp_path, mnist, Broken(), watcher)
    line = "callback Broken.on_evaluation raised KeyError: 'the dashboard is down'"
    assert str(error.value).startswith(f"{line}; the run ended cleanly, its files are in ")
    assert "\n" not in str(error.value) and isinstance(error.value.__cause__, KeyError)
    assert f"syncswitch: {line}; the run stops\n" in capsys.readouterr().err
    run_dir = tmp_path / "run"
    on_disk = json.loads((run_dir / names.SUMMARY).read_text())
    assert on_disk["status"] == "complete" and on_disk["stopped_early"] == line
    assert on_disk["samples"] < 1600 and (run_dir / names.FINAL_WEIGHTS).exists()
    assert len(rows(run_dir, names.METRICS)) == len(watcher.evaluations) >= 1
    assert watcher.ended  # the others end as usual


def test_callbacks_that_are_not_callbacks_are_refused_before_any_file(mnist, tmp_path) -> None:
    values = {**JOB, **SHORT, "runtime": "sim", "out": str(tmp_path / "run")}
    with pytest.raises(ConfigError, match="Recorder is a class; give an instance"):
        train(TrainConfig(**values), dataset=mnist, callbacks=[Recorder])
    assert not (tmp_path / "run").exists()


# 17 to 30 s here (mostly the actors' start-up): slow. The default set already stops a Ray
# run through a callback: early stopping is one (tests/sim/test_best_sim.py).
@pytest.mark.slow
@pytest.mark.ray
def test_a_callback_stops_a_run_on_ray(ray_session, mnist, tmp_path) -> None:
    stopper = Recorder(stop_after=1)
    # Emulated 20 ms steps: the first evaluation comes back long before the workload ends.
    values = {**JOB, **SHORT, "step_time_ms": 20.0, "out": str(tmp_path / "ray")}
    result = train(TrainConfig(**values), dataset=mnist, callbacks=[stopper], print_summary=False)
    summary = result.summary
    assert summary.runtime == "ray" and summary.status == "complete"
    assert summary.stopped_early == "enough after 1 evaluations" and summary.samples < 1600
    assert stopper.ended == [summary] and (result.run_dir / names.FINAL_WEIGHTS).exists()
    accounted(json.loads((result.run_dir / names.SUMMARY).read_text()))
