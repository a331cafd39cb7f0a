"""`train()`: one job from a config to a finished run directory.

It prepares what every runtime needs (the data, a model factory, the task, the run
directory, a resumed checkpoint, the resolved `RunPlan` and the `RunController`), then hands
the run to the Ray runtime or the simulator, which drives the controller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncswitch.config import TrainConfig
from syncswitch.control.callback_runner import CallbackRunner
from syncswitch.control.callbacks import Callback, check_callbacks
from syncswitch.control.controller import (
    RunController,
    resume_point,
)
from syncswitch.control.memory import MemoryEstimate
from syncswitch.control.plan import RunPlan
from syncswitch.control.resume_check import (
    ResumeCheck,
    checkpoint_or_none,
    say_resumed,
)
from syncswitch.core.reliability.checkpoints import (
    LoadedCheckpoint,
)
from syncswitch.errors import CallbackError, ConfigError, RunDirError
from syncswitch.import_path import is_import_path
from syncswitch.loggers import make_loggers
from syncswitch.loggers.feed import LoggerFeed
from syncswitch.records.metric import TEST, VALIDATION, column
from syncswitch.rundir import (
    RunWriter,
    Summary,
    default_run_dir,
)
from syncswitch.rundir.weights import read_best_weights
from syncswitch.runtime.announce import announce_memory, announce_staleness_rules
from syncswitch.runtime.job_parts import JobParts, builtin_task, job_parts
from syncswitch.runtime.progress import starting, startup_status
from syncswitch.runtime.run_dir_checks import (
    as_it_began,
    refuse_changed_workload,
    refuse_finished_run,
    refuse_used_run_dir,
)
from syncswitch.workloads import ArrayDataset
from syncswitch.workloads.causal_lm import CausalLM, collate_causal_lm
from syncswitch.workloads.data import TRAIN, DataSource, JobData
from syncswitch.workloads.identity import Workload
from syncswitch.workloads.imports import user_code_arguments
from syncswitch.workloads.task import LossFn, Task


@dataclass
class RunResult:
    summary: Summary  # also in RUN_DIR/summary.json
    run_dir: Path
    final_weights: np.ndarray  # the flat parameter vector
    workload: Workload  # the dataset and model trained, as config.json names them
    model_factory: Callable[[], torch.nn.Module] | None = None
    state_dict: dict[str, torch.Tensor] | None = None  # also in RUN_DIR/final_weights.pt

    def model(self, *, best: bool = False) -> torch.nn.Module:
        """A new instance of the trained model holding the final weights, in eval mode;
        `best`: the weights of the best evaluation instead (the primary metric on
        validation; RUN_DIR/best_weights.pt, summary.json's "best" says where it was)."""
        if self.model_factory is None or self.state_dict is None:
            raise ConfigError("this run result holds no model (it was not made by train())")
        state = read_best_weights(self.run_dir) if best else self.state_dict
        model = self.model_factory()
        try:
            model.load_state_dict(state)
        except RuntimeError as error:  # a file that is not this model's: one line
            first = str(error).splitlines()[0]
            message = f"{self.run_dir}: weights that do not fit the model: {first}"
            raise RunDirError(message) from None
        return model.eval()


def train(
    config: TrainConfig,
    *,
    model_factory: Callable[[], torch.nn.Module] | None = None,
    train_data: DataSource | None = None,
    val_data: DataSource | None = None,
    test_data: DataSource | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    dataset: ArrayDataset | None = None,
    loss_fn: LossFn | None = None,
    metrics: Mapping[str, Any] | list[str] | None = None,
    primary_metric: str | None = None,
    higher_is_better: bool | None = None,
    model_name: str | None = None,
    dataset_name: str | None = None,
    schedule_source: dict[str, Any] | None = None,
    resume: bool = False,
    callbacks: Sequence[Callback] | None = None,
    print_summary: bool = True,
) -> RunResult:
    """Train one job and return its result; results are written to the run directory.

    Data, one of:

    - `train_data`, `val_data` and optionally `test_data`: map-style `torch.utils.data.Dataset`s,
      each given as the dataset or as a picklable callable that builds it (a *factory*: on
      Ray each worker then builds its own, and reads only its shard); samples are
      ``(inputs, target)`` pairs of any tensors, batched by `collate_fn` (default: torch's
      `default_collate`). Needs `model_factory`.
    - `dataset`: an in-memory `ArrayDataset` (the fast path for classification); without a
      validation split, `config.val_fraction` of its training samples become one.
    - neither: the config's built-in dataset (MNIST-1D or CIFAR), with a validation split of
      `config.val_fraction` of its training samples.

    Task: `loss_fn` (default cross-entropy), `metrics` (name -> a built-in name such as
    "f1", a torchmetrics-style object with update/compute/reset, or fn(outputs, targets) ->
    float; or a list of built-in names), each measured exactly over the whole split
    (workloads/metrics.py); default accuracy whenever the targets are class ids. The
    `primary_metric` every decision reads on the validation split, with `higher_is_better`
    (known for common names such as accuracy, loss, mse). The test split is measured once,
    on the final weights, and never drives a decision. summary.json holds both, under
    "validation" and "test".

    A `model_factory` wrapped by `syncswitch.workloads.causal_lm.causal_lm` (a Hugging Face
    causal LM) brings its own batches (dict samples, next-token targets) and task (the loss
    in nats per token, perplexity, bits per byte); summary.json then gives tokens/s.

    A model and data of the user's own are recorded by name (`model_name`, else the factory's
    own name; `dataset_name`, else the dataset's) in config.json, the report and the job's
    fingerprint. final_weights.pt holds the trained model's state_dict; `RunResult.model()`
    returns the model itself.

    `schedule_source` says where the schedule came from (e.g. a stored timing decision); it
    is written to summary.json as is, and defaults to `{"kind": "given"}`. With `resume`, the
    run continues in `config.out` from its last good checkpoint, appending to its files.

    `callbacks`: objects whose hooks (`syncswitch.Callback`) are called on this process as
    the run goes, and may end it early (`StopRun`); one that raises stops the run, its files
    written, and train() then raises `CallbackError`. At the end train() prints the summary
    `syncswitch train` prints, unless `print_summary=False`.
    """
    runner = CallbackRunner(check_callbacks(callbacks))
    check_runnable(config)
    if resume:
        config = as_it_began(config)
    with startup_status(config.progress, "loading data"):
        # A config naming a model or dataset by import path (MODULE:NAME) supplies what the
        # call does not give itself.
        wanted = (model_factory is None and is_import_path(config.model)) or (
            train_data is None and dataset is None and is_import_path(config.dataset)
        )
        named = user_code_arguments(config) if wanted else {}
        if model_factory is None and "model_factory" in named:
            model_factory, model_name = named["model_factory"], model_name or named["model_name"]
        if train_data is None and dataset is None and "dataset_name" in named:
            train_data, val_data = named.get("train_data"), named.get("val_data", val_data)
            test_data = named.get("test_data", test_data)
            collate_fn = named.get("collate_fn", collate_fn)
            dataset, dataset_name = named.get("dataset"), dataset_name or named["dataset_name"]
        task = Task.of(loss_fn, metrics, primary_metric, higher_is_better)
        if isinstance(model_factory, CausalLM):
            # The adapter's own batches and task (workloads/causal_lm.py): dict samples,
            # next-token targets, the loss per token, perplexity and bits per byte.
            collate_fn = collate_fn or collate_causal_lm
            if loss_fn is None and metrics is None:
                task = model_factory.task(primary_metric)
        if train_data is None and dataset is None and loss_fn is None and metrics is None:
            # A built-in dataset's own task (pysource's: next-byte loss and perplexity).
            task = builtin_task(config, primary_metric) or task
        parts = job_parts(
            config,
            model_factory=model_factory,
            train_data=train_data,
            val_data=val_data,
            test_data=test_data,
            collate_fn=collate_fn,
            dataset=dataset,
            task=task,
            model_name=model_name,
            dataset_name=dataset_name,
        )
        result = _train(config, parts, schedule_source, resume, runner)
    if print_summary:  # what `syncswitch train` prints; its own call passes False
        from syncswitch.run_summary import logger_lines
        from syncswitch.run_summary import print_summary as show

        loggers = logger_lines(config, result.run_dir)
        show(result.summary, result.run_dir, library_log=None, loggers=loggers)
    if runner.failure is not None:  # the run stopped cleanly; the error is still an error
        raise CallbackError(
            f"{runner.failure}; the run ended cleanly, its files are in {result.run_dir}"
        ) from runner.error
    return result


def _train(
    config: TrainConfig,
    parts: JobParts,
    schedule_source: dict[str, Any] | None,
    resume: bool,
    callbacks: CallbackRunner,
) -> RunResult:
    data, model_factory, workload = parts.data, parts.model_factory, parts.workload
    starting("preparing the run")
    weights_state = ModelState(model_factory, data, parts.task, workload)
    plan = RunPlan.resolve(
        config, train_samples=data.size(TRAIN), metric=parts.task.spec(data.decision_split)
    )
    plan = replace(plan, tokens_per_sample=parts.tokens_per_sample)
    parameters = sum(p.numel() for p in model_factory().parameters())
    announce_staleness_rules(plan, parameters)
    memory = announce_memory(plan, parameters)
    if not plan.simulated:  # what Ray sends to its actors, checked before a file is written
        from syncswitch.runtime.ray.launch import check_memory, check_sendable

        check_sendable(data, model_factory, parts.task)
        check_memory(config, memory)
    run_dir = Path(config.out or default_run_dir(config.schedule))
    checkpoint: LoadedCheckpoint | None = None
    if resume:
        refuse_finished_run(run_dir)
        # The directory is not trusted: each candidate state must fit this run's shapes.
        checkpoint = checkpoint_or_none(run_dir, ResumeCheck(plan, parameters))
        if checkpoint is not None:
            refuse_changed_workload(run_dir, checkpoint, plan.total_samples)
            say_resumed(run_dir, checkpoint, plan.total_samples)
    else:
        refuse_used_run_dir(run_dir)
    writer = RunWriter(
        run_dir,
        {**config.to_plain(), **workload.config_entries()},
        plan.timing_label(),
        simulated=plan.simulated,
        faults=plan.faults.describe(),
        # Resumed without a checkpoint: its logs are cut back to nothing, and it starts over.
        resume_at=resume_point(checkpoint) if checkpoint or not resume else (0, 0.0),
        sink=_logger_feed(config, run_dir),
        measured=tuple(column(plan.metric.split, n) for n in parts.task.names),
    )
    if plan.simulated:
        return _simulate(
            plan, writer, parts, checkpoint, schedule_source, weights_state, memory, callbacks
        )
    controller = RunController(
        plan,
        writer,
        resumed_from=checkpoint,
        schedule_source=schedule_source,
        weights_state=weights_state,
        memory=memory.to_plain(),
        test_metrics=weights_state.test_metrics if weights_state.tests(plan) else None,
        callbacks=callbacks,
    )
    # Imported here: the controller and everything above load without Ray.
    from syncswitch.runtime.ray.launch import run_on_ray

    try:
        summary, final_weights = run_on_ray(config, controller, data, model_factory, parts.task)
        return weights_state.result(summary, writer.dir, final_weights)
    finally:
        writer.close()


class ModelState:
    """final_weights.pt's content: the trained model's state_dict, with BatchNorm running
    statistics measured as the run's evaluations measured them (so it reproduces the run's
    final accuracy); kept for the RunResult too."""

    def __init__(
        self,
        model_factory: Callable[[], torch.nn.Module],
        data: JobData,
        task: Task,
        workload: Workload,
    ) -> None:
        self.model_factory = model_factory
        self.workload = workload
        self.data = data
        self.task = task
        self.state_dict: dict[str, torch.Tensor] | None = None
        self._evaluator: Any = None

    def __call__(self, final_weights: np.ndarray) -> dict[str, torch.Tensor]:
        model = self.evaluator.trained_model(final_weights)
        self.state_dict = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        return self.state_dict

    def tests(self, plan: RunPlan) -> bool:
        """Whether the final weights are measured on a test split apart: the data has one and
        the run's evaluations read validation (else they already read the test set)."""
        return self.data.has(TEST) and plan.metric.split == VALIDATION

    def test_metrics(self, final_weights: np.ndarray) -> dict[str, float]:
        """The final weights' measures on the test split."""
        return self.evaluator.evaluate(final_weights, TEST)

    @property
    def evaluator(self) -> Any:
        from syncswitch.runtime.evaluator import Evaluator

        if self._evaluator is None:
            self._evaluator = Evaluator(
                self.data, self.model_factory, self.task, threads=torch.get_num_threads()
            )
        return self._evaluator

    def result(self, summary: Summary, run_dir: Path, final_weights: np.ndarray) -> RunResult:
        return RunResult(
            summary, run_dir, final_weights, self.workload, self.model_factory, self.state_dict
        )


def _logger_feed(config: TrainConfig, run_dir: Path) -> LoggerFeed | None:
    """The run directory's sink: the configured loggers (TensorBoard, MLflow) behind one
    feed, or none (csv alone: the run directory is it)."""
    loggers = make_loggers(config.logger or (), config.tracking_uri, run_dir)
    return LoggerFeed(loggers) if loggers else None


def check_runnable(config: TrainConfig) -> None:
    """Refuse, in one line and before any file or process exists, what the runtime cannot
    run here (e.g. --device cuda on a machine without CUDA)."""
    if config.runtime == "sim":
        # One process computes every simulated gradient, on this machine's CPU.
        if "cuda" in (config.device, config.evaluator_device, config.server_device):
            raise ConfigError(
                "device 'cuda' (--device cuda): the simulator (runtime 'sim') computes on the "
                "CPU; use device 'auto' or 'cpu' with it"
            )
        return
    from syncswitch.runtime.ray.launch import check_before_start

    check_before_start(config)


def _simulate(
    plan: RunPlan,
    writer: RunWriter,
    parts: JobParts,
    checkpoint: LoadedCheckpoint | None,
    schedule_source: dict[str, Any] | None,
    weights_state: ModelState,
    memory: MemoryEstimate,
    callbacks: CallbackRunner,
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
        memory=memory.to_plain(),  # of a Ray run of the same job (control/memory.py)
        test_metrics=weights_state.test_metrics if weights_state.tests(plan) else None,
        callbacks=callbacks,
    )
    threads = torch.get_num_threads()
    try:
        runtime = SimRuntime(
            controller,
            parts.data,
            parts.model_factory,
            parts.task,
            plan.cluster,
            events,
            progress=plan.job.progress,
        )
        summary, final_weights = runtime.execute()
        return weights_state.result(summary, writer.dir, final_weights)
    finally:
        writer.close()
        torch.set_num_threads(threads)  # one thread while simulating, as each Ray worker has
