"""Where a run's figures go besides its run directory: TensorBoard, MLflow.

`csv` is the run directory itself (always written). The others are optional extras
(`pip install 'syncswitch[tensorboard]'`, `'syncswitch[mlflow]'`), imported only when asked
for; `missing_packages` lets a config be refused before anything starts.

Dependencies point one way: `syncswitch.config` imports this package (to check --logger), and
nothing here imports the config; `make_loggers` takes the two values it needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from syncswitch.loggers.base import Point, RunLogger, installed

LOGGERS = ("csv", "tensorboard", "mlflow")


def missing_packages(logger: str, tracking_uri: str | None = None) -> list[str]:
    if logger == "tensorboard":
        return [] if installed("tensorboard") else ["tensorboard"]
    if logger == "mlflow":
        from syncswitch.loggers.mlflow import missing_packages as mlflow_missing

        return mlflow_missing(tracking_uri)
    return []


def make_loggers(names: Iterable[str], tracking_uri: str | None, run_dir: Path) -> list[RunLogger]:
    """The backends named (a config's `logger`; csv needs none: the run directory is it)."""
    loggers: list[RunLogger] = []
    names = set(names)
    if "tensorboard" in names:
        from syncswitch.loggers.tensorboard import TensorBoardLogger

        loggers.append(TensorBoardLogger(run_dir))
    if "mlflow" in names:
        from syncswitch.loggers.mlflow import MlflowLogger

        loggers.append(MlflowLogger(run_dir, tracking_uri))
    return loggers


__all__ = ["LOGGERS", "Point", "RunLogger", "installed", "make_loggers", "missing_packages"]
