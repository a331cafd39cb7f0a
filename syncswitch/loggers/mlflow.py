"""MLflow: one MLflow run per Sync-Switch run, through MlflowClient (no global MLflow state).

By default the store is a SQLite file in the run directory (sqlite:///RUN_DIR/mlflow.db):
local, nothing to start, and MLflow's supported local backend (its ./mlruns file store is in
maintenance mode and refused by default since MLflow 3.7). `--tracking-uri` names any other
store or server. Steps are samples processed; timestamps are the points' wall times.

A resumed run continues its MLflow run, found by a tag holding a hash of the run directory's
path, so the metrics of one training run stay in one place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Any

from syncswitch.errors import ConfigError
from syncswitch.files import UnsafeFileError, require_regular_if_present
from syncswitch.loggers.base import Point, RunLogger, installed

EXPERIMENT = "syncswitch"
DATABASE = "mlflow.db"
_RESUME_TAG = "syncswitch.run_key"
_BATCH = 1000  # MLflow's limit of metrics per log_batch call
_PARAM_CHARS = 500
# A tracking server that does not answer is one line within seconds, not minutes of MLflow's
# default retries (120 s timeout, 7 retries with backoff). Set before the client is made,
# unless the user's environment says otherwise.
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "3",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}


def default_tracking_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / DATABASE).resolve()}"


def viewing_hint(tracking_uri: str) -> str:
    """A command that shows the logged runs with what the `[mlflow]` extra installs (the
    MLflow client's CLI; `mlflow ui` needs the full `mlflow` package, which it lacks)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = shlex.quote(tracking_uri)
    try:
        experiment = MlflowClient(tracking_uri=tracking_uri).get_experiment_by_name(EXPERIMENT)
    except MlflowException:
        experiment = None
    listing = (
        f"mlflow runs list --experiment-id {experiment.experiment_id}"
        if experiment is not None
        else "mlflow experiments search"
    )
    return (
        f"MLFLOW_TRACKING_URI={uri} {listing}   (web UI: pip install mlflow, then "
        f"mlflow ui --backend-store-uri {uri})"
    )


def missing_packages(tracking_uri: str | None) -> list[str]:
    """What `--logger mlflow` needs that is not installed (a SQLite store needs alembic)."""
    needed = ["mlflow"]
    if tracking_uri is None or tracking_uri.startswith("sqlite:"):
        needed += ["alembic", "sqlalchemy"]
    return [name for name in needed if not installed(name)]


class MlflowLogger(RunLogger):
    name = "mlflow"

    def __init__(self, run_dir: Path, tracking_uri: str | None) -> None:
        missing = missing_packages(tracking_uri)
        if missing:
            raise ConfigError(
                f"logger 'mlflow' needs {', '.join(missing)}: pip install 'syncswitch[mlflow]'"
            )
        self.run_dir = run_dir
        if tracking_uri is None:
            _check_database_files(run_dir)
        self.tracking_uri = tracking_uri or default_tracking_uri(run_dir)
        self.run_id: str | None = None
        self._client: Any = None

    def start(self, config: dict[str, Any], resume_samples: int | None) -> None:
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        for name, value in HTTP_LIMITS.items():
            os.environ.setdefault(name, value)
        self._client = client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment = client.get_experiment_by_name(EXPERIMENT)
        experiment_id = (
            experiment.experiment_id if experiment else client.create_experiment(EXPERIMENT)
        )
        key = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:32]
        if resume_samples is not None:
            found = client.search_runs(
                [experiment_id], filter_string=f"tags.`{_RESUME_TAG}` = '{key}'", max_results=1
            )
            if found:
                self.run_id = found[0].info.run_id
                client.update_run(self.run_id, status="RUNNING")
                return
        emulation = config.get("emulation") or {}
        tags = {
            _RESUME_TAG: key,
            "syncswitch.run_dir": str(self.run_dir),
            "syncswitch.schedule": str(config.get("schedule")),
            "syncswitch.recurring": timing_kind(config),
        }
        run = client.create_run(experiment_id, run_name=self.run_dir.name, tags=tags)
        self.run_id = run.info.run_id
        params = [
            Param(name, _param_value(value))
            for name, value in sorted(config.items())
            if name not in ("emulation", "faults_injected", "out", "tracking_uri")
        ]
        params.append(Param("emulation", _param_value(emulation)))
        client.log_batch(
            self.run_id, params=params, tags=[RunTag("mlflow.source.name", "syncswitch")]
        )

    def scalars(self, points: list[Point]) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(p.name, p.value, int(p.wall_time_s * 1000), p.samples) for p in points]
        for start in range(0, len(metrics), _BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[start : start + _BATCH])

    def text(self, name: str, text: str, samples: int, wall_time_s: float) -> None:
        # MLflow has no text series: the latest note of each kind is a tag of the run.
        self._client.set_tag(self.run_id, f"syncswitch.last_{name}", text[:5000])

    def histogram(self, name: str, values: Any, samples: int, wall_time_s: float) -> None:
        """MLflow has no histograms; staleness/mean and staleness/max carry the figures."""

    def where(self) -> str:
        return viewing_hint(self.tracking_uri)

    def close(self, status: str) -> None:
        if self._client is None or self.run_id is None:
            return
        self._client.set_tag(self.run_id, "syncswitch.status", status[:5000])
        state = "FINISHED" if status == "complete" else "FAILED" if status else "KILLED"
        self._client.set_terminated(self.run_id, status=state)


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _PARAM_CHARS else text[: _PARAM_CHARS - 3] + "..."


def _check_database_files(run_dir: Path) -> None:
    """SQLite opens the store by name and follows links: on --resume the run directory is
    not trusted, so mlflow.db and SQLite's side files, where present, must be regular files
    (a link would add MLflow's tables to whatever it points at; a FIFO would hang)."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        try:
            require_regular_if_present(run_dir / (DATABASE + suffix))
        except UnsafeFileError as error:
            raise ConfigError(f"run directory: {error}") from None


def timing_kind(config: dict[str, Any]) -> str:
    """How the run's times were made, as the report's `timing` column says it: a simulator's
    virtual clock, emulated device time on real workers, or real hardware."""
    if config.get("runtime") == "sim":
        return "simulated"
    emulation = config.get("emulation") or {}
    return "emulated" if isinstance(emulation, dict) and emulation.get("enabled") else "real"
