"""A real run logged to TensorBoard and MLflow, read back with their own readers."""

import csv
import json
import sys

import numpy as np
import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.workloads import load_dataset

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def logged_run(ray_session, tmp_path_factory):
    from syncswitch.runtime.train import train

    config = TrainConfig(
        workers=2,
        schedule="bsp:0.25,asp",
        epochs=1.0,
        mnist1d_samples=1000,
        eval_every=0.1,
        progress=False,
        out=str(tmp_path_factory.mktemp("logged") / "run"),
        logger=["tensorboard", "mlflow"],
    )
    return train(config, dataset=load_dataset("mnist1d", mnist1d_samples=1000)).run_dir


def read_csv(path):
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_tensorboard_events_hold_the_run_against_samples_and_wall_time(logged_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(
        str(logged_run / "tensorboard"), size_guidance={"scalars": 0, "histograms": 0}
    )
    events.Reload()
    tags = events.Tags()
    for tag in (
        "validation/accuracy",
        "validation/loss",
        "train/loss",
        "throughput/samples_per_s",
        "protocol/bsp",
        "protocol/asp",
        "switches/count",
        "staleness/mean",
        "workers/step_time_s/0",
        "workers/step_time_p90_s/1",
        "gradients/applied",
        "final/accuracy",
    ):
        assert tag in tags["scalars"], tag
    metrics = read_csv(logged_run / "metrics.csv")
    accuracy = events.Scalars("validation/accuracy")
    assert [e.step for e in accuracy] == [int(r["samples"]) for r in metrics]
    np.testing.assert_allclose(
        [e.value for e in accuracy], [float(r["val_accuracy"]) for r in metrics], rtol=1e-6
    )
    # Wall time: the same intervals as the run's own clock.
    np.testing.assert_allclose(
        np.diff([e.wall_time for e in accuracy]),
        np.diff([float(r["time_s"]) for r in metrics]),
        atol=1e-3,
    )
    # One value per evaluation, in order (two points may share a sample count at a switch).
    for protocol in ("bsp", "asp"):
        assert [(e.step, e.value) for e in events.Scalars(f"protocol/{protocol}")] == [
            (int(r["samples"]), float(r["protocol"] == protocol)) for r in metrics
        ]
    (switch,) = [
        json.loads(line)
        for line in (logged_run / "events.jsonl").read_text().splitlines()
        if '"switch"' in line
    ]
    assert [(e.step, e.value) for e in events.Scalars("switches/count")] == [
        (switch["at_samples"], 1.0)
    ]
    # The staleness histograms together count every applied gradient once.
    applied = read_csv(logged_run / "updates.csv")
    assert sum(h.histogram_value.num for h in events.Histograms("staleness")) == len(applied)
    assert events.Scalars("gradients/applied")[-1].value == len(applied)


def test_mlflow_store_in_the_run_directory_holds_the_metrics(logged_run):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{logged_run / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("syncswitch")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == logged_run.name
    assert run.data.params["workers"] == "2" and run.data.params["schedule"] == "bsp:0.25,asp"
    assert run.data.tags["syncswitch.recurring"] == "real"
    assert "bsp -> asp" in run.data.tags["syncswitch.last_switches"]
    metrics = read_csv(logged_run / "metrics.csv")
    history = client.get_metric_history(run.info.run_id, "validation/accuracy")
    assert [(m.step, m.value) for m in history] == [
        (int(r["samples"]), pytest.approx(float(r["val_accuracy"]))) for r in metrics
    ]
    summary = json.loads((logged_run / "summary.json").read_text())
    assert run.data.metrics["final/accuracy"] == pytest.approx(summary["final_value"])
    assert "staleness/mean" in run.data.metrics and "workers/steps/0" in run.data.metrics


def test_loggers_are_chosen_by_flag_and_checked_before_anything_starts(monkeypatch, capsys):
    import argparse

    from syncswitch.cli.train import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    for argv in (
        ["--logger", "tensorboard,MLflow"],
        ["--logger", "tensorboard", "--logger", "mlflow"],
    ):
        config = config_from_args(parser.parse_args(["train", *argv]))
        assert config.logger == ["tensorboard", "mlflow"]

    def error(argv):
        assert main(["train", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        return err

    assert "logger 'wandb' is not allowed; choose from csv, tensorboard, mlflow" in error(
        ["--logger", "wandb"]
    )
    assert "tracking_uri applies to logger mlflow" in error(["--tracking-uri", "http://x"])
    # Without the optional package: one line naming the extra to install.
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert "pip install 'syncswitch[tensorboard]'" in error(["--logger", "tensorboard"])
