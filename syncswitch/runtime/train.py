"""`train()`: one job from a config to a finished run directory.

It prepares what every runtime needs (the dataset, a model factory, the run directory, a
resumed checkpoint, the resolved `RunPlan` and the `RunController`), then hands the run to
the Ray runtime, which drives the controller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from syncswitch.config import TrainConfig
from syncswitch.control.controller import (
    CHECKPOINT_DIR,
    RunController,
    resume_point,
    run_dir_in_use,
)
from syncswitch.control.plan import RunPlan
from syncswitch.control.resume_check import ResumeCheck, say_refused
from syncswitch.core.checkpoint import CheckpointError, CheckpointStore, LoadedCheckpoint
from syncswitch.errors import ConfigError, RunDirError
from syncswitch.loggers import make_loggers
from syncswitch.rundir import RunWriter, Summary, default_run_dir, names, read_summary_if_any
from syncswitch.workloads import ArrayDataset, build_model, load_dataset


@dataclass
class RunResult:
    summary: Summary  # also in RUN_DIR/summary.json
    run_dir: Path
    final_weights: np.ndarray


@dataclass(frozen=True)
class BuiltinModel:
    """A picklable model factory for the built-in models (carries no training data)."""

    name: str
    dataset: ArrayDataset

    def __call__(self) -> torch.nn.Module:
        return build_model(self.name, self.dataset)


def train(
    config: TrainConfig,
    *,
    model_factory: Callable[[], torch.nn.Module] | None = None,
    dataset: ArrayDataset | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    schedule_source: dict[str, Any] | None = None,
    resume: bool = False,
) -> RunResult:
    """Train one job and return its summary; results are written to the run directory.

    `schedule_source` says where the schedule came from (e.g. a stored timing decision); it
    is written to summary.json as is, and defaults to `{"kind": "given"}`. With `resume`, the
    run continues in `config.out` from its last good checkpoint, appending to its files.
    """
    check_runnable(config)
    dataset = dataset or load_dataset(
        config.dataset, config.data_dir, mnist1d_samples=config.mnist1d_samples
    )
    if model_factory is None:
        model_factory = BuiltinModel(config.model_name, shape_only(dataset))
    plan = RunPlan.resolve(config, train_samples=len(dataset.y_train))
    run_dir = Path(config.out or default_run_dir(config.schedule))
    if resume:
        refuse_finished_run(run_dir)
        # The directory is not trusted: each candidate state must fit this run's shapes.
        parameters = sum(p.numel() for p in model_factory().parameters())
        checkpoint = load_resume_checkpoint(run_dir, ResumeCheck(plan, parameters))
        refuse_changed_workload(run_dir, checkpoint, plan.total_samples)
    else:
        checkpoint = refuse_used_run_dir(run_dir)
    writer = RunWriter(
        run_dir,
        config.to_dict(),
        plan.timing_label(),
        simulated=plan.simulated,
        faults=plan.faults.describe(),
        resume_at=resume_point(checkpoint),
        loggers=make_loggers(config.logger or (), config.tracking_uri, run_dir),
    )
    if plan.simulated:
        return _simulate(plan, writer, dataset, model_factory, loss_fn, checkpoint, schedule_source)
    controller = RunController(
        plan, writer, resumed_from=checkpoint, schedule_source=schedule_source
    )
    # Imported here: the controller and everything above load without Ray.
    from syncswitch.runtime.ray.launch import run_on_ray

    try:
        summary, final_weights = run_on_ray(config, controller, dataset, model_factory, loss_fn)
        return RunResult(summary, writer.dir, final_weights)
    finally:
        writer.close()


def check_runnable(config: TrainConfig) -> None:
    """Refuse, in one line and before any file or process exists, what the runtime cannot
    run here (e.g. --device cuda on a machine without CUDA)."""
    if config.runtime == "sim":
        # One process computes every simulated gradient, on this machine's CPU.
        if "cuda" in (config.device, config.evaluator_device, config.server_device):
            raise ConfigError(
                "--device cuda: the simulator (--runtime sim) computes on the CPU; use "
                "--device auto or cpu with it"
            )
        return
    from syncswitch.runtime.ray.launch import check_before_start

    check_before_start(config)


def _simulate(
    plan: RunPlan,
    writer: RunWriter,
    dataset: ArrayDataset,
    model_factory: Callable[[], torch.nn.Module],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    checkpoint: LoadedCheckpoint | None,
    schedule_source: dict[str, Any] | None,
) -> RunResult:
    """The same run on the simulator: one process, a virtual clock, no Ray."""
    from syncswitch.runtime.sim.engine import EventQueue
    from syncswitch.runtime.sim.runtime import SimRuntime

    assert plan.cluster is not None
    events = EventQueue()
    controller = RunController(
        plan,
        writer,
        resumed_from=checkpoint,
        schedule_source=schedule_source,
        clock=lambda: events.now_s,
    )
    threads = torch.get_num_threads()
    try:
        runtime = SimRuntime(
            controller,
            dataset,
            model_factory,
            loss_fn,
            plan.cluster,
            events,
            progress=plan.job.progress,
        )
        summary, final_weights = runtime.execute()
        return RunResult(summary, writer.dir, final_weights)
    finally:
        writer.close()
        torch.set_num_threads(threads)  # one thread while simulating, as each Ray worker has


def refuse_used_run_dir(run_dir: Path) -> None:
    """A new run never writes into an earlier run's directory.

    Its files would append to the old ones, and the old checkpoints would be taken for its
    own by a server recovery or a divergence rollback before it has written any.
    """
    used = run_dir_in_use(run_dir)
    if used:
        raise ConfigError(
            f"--out {str(run_dir)!r} already holds a run ({', '.join(used)}); choose another "
            f"directory, remove this one, or continue that run with --resume {run_dir}"
        )


def refuse_finished_run(run_dir: Path) -> None:
    """A finished run is not resumed: it would train past its end and rewrite its summary."""
    try:
        summary = read_summary_if_any(run_dir)
    except RunDirError as error:
        raise ConfigError(f"cannot resume {str(run_dir)!r}: {error}") from None
    if summary is not None and summary.complete:
        raise ConfigError(
            f"cannot resume {str(run_dir)!r}: the run is finished (its {names.SUMMARY} says "
            "complete); start a new run with another --out"
        )


def refuse_changed_workload(run_dir: Path, checkpoint: LoadedCheckpoint, total: int) -> None:
    """A checkpoint taken at or past the whole workload config.json now describes means the
    workload was changed (e.g. `epochs` lowered): resuming would report "complete" at some
    multiple of it."""
    samples = checkpoint.contents.samples if checkpoint.contents is not None else None
    if isinstance(samples, int) and samples >= total:
        raise ConfigError(
            f"cannot resume {str(run_dir)!r}: its checkpoint was taken after {samples} samples, "
            f"but {names.CONFIG} now describes a workload of {total} samples (epochs x training "
            "samples); the config no longer matches the checkpoint"
        )


def load_resume_checkpoint(run_dir: Path, fits: ResumeCheck | None = None) -> LoadedCheckpoint:
    """The last good checkpoint of a run directory, or a one-line error saying why not.

    `fits` refuses a state this run cannot continue from (the directory is not trusted);
    a checkpoint passed over on the way is said on the terminal, not only in events.jsonl.
    """
    store = CheckpointStore(run_dir / CHECKPOINT_DIR)
    try:
        if fits is None:
            loaded = store.load_latest()
        else:
            loaded = store.load_latest(max_bytes=fits.max_bytes, validate=fits)
    except CheckpointError as error:
        raise ConfigError(f"cannot resume {str(run_dir)!r}: {error}") from None
    if loaded.refused:
        say_refused(loaded, "resuming")
    return loaded


def shape_only(dataset: ArrayDataset) -> ArrayDataset:
    """The dataset's shape and kind without its samples, for a model factory to carry."""
    return replace(
        dataset,
        x_train=dataset.x_train[:1],
        y_train=dataset.y_train[:1],
        x_test=dataset.x_test[:1],
        y_test=dataset.y_test[:1],
    )
