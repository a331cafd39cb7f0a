"""Replaying a run's job on the simulator under a cluster model, and comparing the replay
with what the run measured (`Replay`)."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from syncswitch.calibration.runs import CalibrationRun, seconds_per_step
from syncswitch.core.cluster.model import ClusterModel
from syncswitch.errors import ConfigError, UserError
from syncswitch.rundir import load_run
from syncswitch.runtime.train import train

_PROBE_GRADIENTS = 3000  # a replay during the fit is shortened to about this many gradients


@dataclass(frozen=True)
class Replay:
    """A run's measured figures against the model's replay of its whole job."""

    run: str
    workers: int
    measured: dict[str, float]  # "wall" (s) and each protocol's seconds per step
    simulated: dict[str, float]

    def errors(self) -> dict[str, float]:
        return {
            key: self.simulated[key] / value - 1
            for key, value in self.measured.items()
            if value > 0 and key in self.simulated
        }

    def worst(self) -> tuple[str, float]:
        """The figure furthest off, and its relative error (inf: the replay lacks it)."""
        missing = [key for key in self.measured if key not in self.simulated]
        if missing:
            return missing[0], math.inf
        errors = self.errors()
        key = max(errors, key=lambda k: abs(errors[k]))
        return key, errors[key]

    def to_plain(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "workers": self.workers,
            "measured": self.measured,
            "simulated": self.simulated,
        }


def cluster_yaml(model: ClusterModel) -> str:
    """The model as a cluster file (what `--cluster FILE` reads)."""
    import yaml

    described = model.describe()
    return yaml.safe_dump(described, sort_keys=False, default_flow_style=None)


def replay(model: ClusterModel, run: CalibrationRun, *, probe: bool) -> dict[str, float]:
    """The run's job on the simulator under `model`: its seconds per step per protocol, and
    (whole, not a probe) its wall time. A probe is shortened to about `_PROBE_GRADIENTS`
    gradients, evaluated as often per second as the whole job."""
    job = run.job
    trained = len(run.dataset.with_validation(job.val_fraction).y_train)
    gradients = job.epochs * trained / job.batch_size
    share = min(1.0, _PROBE_GRADIENTS / gradients) if probe else 1.0
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "cluster.yaml"
        path.write_text(cluster_yaml(model))
        replayed = replace(
            job,
            runtime="sim",
            cluster=str(path),
            # The cluster model gives the compute and the network (an emulated link too).
            step_time_ms=0.0,
            jitter_sigma=0.0,
            speed_factors=None,
            link_gbps=0.0,
            link_latency_ms=0.0,
            server_link_gbps=0.0,
            epochs=job.epochs * share,
            eval_every=min(1.0, job.eval_every / share),
            checkpoint_every=0.0 if probe else job.checkpoint_every,
            divergence_guard=job.divergence_guard and not probe,
            out=str(Path(scratch) / "run"),
        )
        # The user's model comes from the command line's --model (run.model_factory), never
        # from the path config.json names: train() is given it, so it imports nothing.
        own = run.model_factory is not None
        try:
            summary = train(
                replayed,
                dataset=run.dataset,
                model_factory=run.model_factory,
                model_name=job.model if own else None,
                print_summary=False,  # a replay's: calibrate prints its own comparison
            ).summary
            simulated = seconds_per_step(load_run(Path(scratch) / "run"), required=False)
        except UserError as error:
            # The replay's files are calibrate's own, in a temporary directory the user never
            # named: the message names the run replayed instead.
            said = (
                str(error)
                .replace(str(Path(scratch) / "run"), "the replay")
                .replace(str(path), "the fitted cluster model")
                .replace(scratch, "the replay's directory")
            )
            raise ConfigError(
                f"replaying {str(run.path)!r} on the simulator failed: {said}"
            ) from None
    if not probe:
        simulated["wall"] = summary.wall_time_s
    return simulated


def replay_whole(model: ClusterModel, run: CalibrationRun) -> Replay:
    return Replay(
        run=run.path.name,
        workers=run.workers,
        measured={"wall": run.wall_s, **run.measured},
        simulated=replay(model, run, probe=False),
    )
