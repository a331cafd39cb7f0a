"""A resumed run continues its TensorBoard and MLflow records instead of starting new ones."""

from syncswitch.loggers.base import Point
from syncswitch.loggers.mlflow import MlflowLogger
from syncswitch.loggers.tensorboard import TensorBoardLogger

CONFIG = {"schedule": "bsp:0.5,asp", "workers": 2}


def accuracy(samples: int, value: float) -> list[Point]:
    return [Point("test/accuracy", value, samples, 1_000_000.0 + samples / 100)]


def test_tensorboard_drops_what_a_resumed_run_does_again(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    killed = TensorBoardLogger(tmp_path)
    killed.start(CONFIG, None)
    for samples, value in ((100, 0.1), (200, 0.2), (300, 0.3)):
        killed.scalars(accuracy(samples, value))
    killed.close("running")
    resumed = TensorBoardLogger(tmp_path)  # from a checkpoint at 200 samples
    resumed.start(CONFIG, 200)
    for samples, value in ((200, 0.25), (300, 0.35)):
        resumed.scalars(accuracy(samples, value))
    resumed.close("complete")

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, round(e.value, 2)) for e in events.Scalars("test/accuracy")] == [
        (100, 0.1),
        (200, 0.25),
        (300, 0.35),
    ]


def test_mlflow_continues_the_run_of_the_same_directory(tmp_path):
    from mlflow.tracking import MlflowClient

    killed = MlflowLogger(tmp_path, None)
    killed.start(CONFIG, None)
    killed.scalars(accuracy(100, 0.1))
    killed.close("running")
    resumed = MlflowLogger(tmp_path, None)
    resumed.start(CONFIG, 100)
    resumed.scalars(accuracy(200, 0.2))
    resumed.close("complete")

    assert resumed.run_id == killed.run_id
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = client.get_metric_history(resumed.run_id, "test/accuracy")
    assert [(m.step, m.value) for m in history] == [(100, 0.1), (200, 0.2)]
    assert client.get_run(resumed.run_id).info.status == "FINISHED"
