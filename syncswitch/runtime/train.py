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
from syncswitch.core.reliability.checkpoints import (
    CheckpointError,
    CheckpointStore,
    LoadedCheckpoint,
)
from syncswitch.errors import ConfigError, RunDirError
from syncswitch.loggers import make_loggers
from syncswitch.rundir import RunWriter, Summary, default_run_dir, names, read_summary_if_any
from syncswitch.runtime.progress import starting, startup_status
from syncswitch.workloads import ArrayDataset, build_model, load_dataset
from syncswitch.workloads.identity import Workload, model_name_of


@dataclass
class RunResult:
    summary: Summary  # also in RUN_DIR/summary.json
    run_dir: Path
    final_weights: np.ndarray  # the flat parameter vector
    workload: Workload  # the dataset and model trained, as config.json names them
    model_factory: Callable[[], torch.nn.Module] | None = None
    state_dict: dict[str, torch.Tensor] | None = None  # also in RUN_DIR/final_weights.pt

    def model(self) -> torch.nn.Module:
        """A new instance of the trained model holding the final weights, in eval mode."""
        if self.model_factory is None or self.state_dict is None:
            raise ConfigError("this run result holds no model (it was not made by train())")
        model = self.model_factory()
        model.load_state_dict(self.state_dict)
        return model.eval()


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
    model_name: str | None = None,
) -> RunResult:
    """Train one job and return its summary; results are written to the run directory.

    A `dataset` and `model_factory` of the user's own are recorded by name (the dataset's
    `name`, the factory's function or class name, or `model_name`) in config.json, the
    summary's report and the job's fingerprint. final_weights.pt holds the trained model's
    state_dict; `RunResult.model()` returns the model itself.

    `schedule_source` says where the schedule came from (e.g. a stored timing decision); it
    is written to summary.json as is, and defaults to `{"kind": "given"}`. With `resume`, the
    run continues in `config.out` from its last good checkpoint, appending to its files.
    """
    check_runnable(config)
    with startup_status(config.progress, "loading data"):
        return _train(config, model_factory, dataset, loss_fn, schedule_source, resume, model_name)


def _train(
    config: TrainConfig,
    model_factory: Callable[[], torch.nn.Module] | None,
    dataset: ArrayDataset | None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    schedule_source: dict[str, Any] | None,
    resume: bool,
    model_name: str | None,
) -> RunResult:
    workload = workload_of(config, dataset, model_factory, model_name)
    dataset = dataset or load_dataset(
        config.dataset, config.data_dir, mnist1d_samples=config.mnist1d_samples
    )
    starting("preparing the run")
    if model_factory is None:
        model_factory = BuiltinModel(config.model_name, shape_only(dataset))
    weights_state = ModelState(model_factory, dataset, loss_fn, workload)
    plan = RunPlan.resolve(config, train_samples=len(dataset.y_train))
    run_dir = Path(config.out or default_run_dir(config.schedule))
    checkpoint: LoadedCheckpoint | None = None
    if resume:
        refuse_finished_run(run_dir)
        # The directory is not trusted: each candidate state must fit this run's shapes.
        parameters = sum(p.numel() for p in model_factory().parameters())
        checkpoint = load_resume_checkpoint(run_dir, ResumeCheck(plan, parameters))
        refuse_changed_workload(run_dir, checkpoint, plan.total_samples)
    else:
        refuse_used_run_dir(run_dir)
    writer = RunWriter(
        run_dir,
        {**config.to_plain(), **workload.config_entries()},
        plan.timing_label(),
        simulated=plan.simulated,
        faults=plan.faults.describe(),
        resume_at=resume_point(checkpoint),
        loggers=make_loggers(config.logger or (), config.tracking_uri, run_dir),
    )
    if plan.simulated:
        return _simulate(plan, writer, dataset, loss_fn, checkpoint, schedule_source, weights_state)
    controller = RunController(
        plan,
        writer,
        resumed_from=checkpoint,
        schedule_source=schedule_source,
        weights_state=weights_state,
    )
    # Imported here: the controller and everything above load without Ray.
    from syncswitch.runtime.ray.launch import run_on_ray

    try:
        summary, final_weights = run_on_ray(config, controller, dataset, model_factory, loss_fn)
        return weights_state.result(summary, writer.dir, final_weights)
    finally:
        writer.close()


def workload_of(
    config: TrainConfig,
    dataset: ArrayDataset | None = None,
    model_factory: Callable[[], torch.nn.Module] | None = None,
    model_name: str | None = None,
) -> Workload:
    """The dataset and model a run trains, by name: the config's built-in ones, or the
    objects the Python API was given (the dataset's `name`; `model_name`, else the
    factory's own name)."""
    dataset_name = dataset.name if dataset is not None else config.dataset
    if model_name is None:
        model_name = config.model_name if model_factory is None else model_name_of(model_factory)
    return Workload(dataset=dataset_name, model=model_name)


class ModelState:
    """final_weights.pt's content: the trained model's state_dict, with BatchNorm running
    statistics measured as the run's evaluations measured them (so it reproduces the run's
    final accuracy); kept for the RunResult too."""

    def __init__(
        self,
        model_factory: Callable[[], torch.nn.Module],
        dataset: ArrayDataset,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        workload: Workload,
    ) -> None:
        self.model_factory = model_factory
        self.workload = workload
        self.dataset = dataset
        self.loss_fn = loss_fn
        self.state_dict: dict[str, torch.Tensor] | None = None

    def __call__(self, final_weights: np.ndarray) -> dict[str, torch.Tensor]:
        from syncswitch.runtime.evaluator import Evaluator

        evaluator = Evaluator(
            self.dataset, self.model_factory, self.loss_fn, threads=torch.get_num_threads()
        )
        model = evaluator.trained_model(final_weights)
        self.state_dict = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        return self.state_dict

    def result(self, summary: Summary, run_dir: Path, final_weights: np.ndarray) -> RunResult:
        return RunResult(
            summary, run_dir, final_weights, self.workload, self.model_factory, self.state_dict
        )


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
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    checkpoint: LoadedCheckpoint | None,
    schedule_source: dict[str, Any] | None,
    weights_state: ModelState,
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
        weights_state=weights_state,
    )
    threads = torch.get_num_threads()
    try:
        runtime = SimRuntime(
            controller,
            dataset,
            weights_state.model_factory,
            loss_fn,
            plan.cluster,
            events,
            progress=plan.job.progress,
        )
        summary, final_weights = runtime.execute()
        return weights_state.result(summary, writer.dir, final_weights)
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
    """A checkpoint taken under another workload than config.json now describes (e.g.
    `epochs` lowered or raised): resuming would report "complete" at some multiple or
    fraction of it. Checkpoints say their workload; older ones are judged by their samples."""
    contents = checkpoint.contents
    recorded = getattr(contents, "total_samples", None)
    samples = getattr(contents, "samples", None)
    if isinstance(recorded, int) and recorded != total:
        said = f"was taken in a workload of {recorded} samples"
    elif isinstance(samples, int) and samples >= total:
        said = f"was taken after {samples} samples"
    else:
        return
    raise ConfigError(
        f"cannot resume {str(run_dir)!r}: its checkpoint {said}, but {names.CONFIG} now "
        f"describes a workload of {total} samples (epochs x training samples); the config no "
        "longer matches the checkpoint"
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
