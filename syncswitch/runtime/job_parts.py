"""A job's parts as the Python API gives them: its data, model factory and task, checked
together and named as the run records them (`job_parts`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from syncswitch.config import TrainConfig
from syncswitch.errors import ConfigError
from syncswitch.terminal import project_console
from syncswitch.workloads import ArrayDataset, build_model, datasets_of, load_dataset
from syncswitch.workloads.catalog import DataOptions, load_builtin
from syncswitch.workloads.char_transformer import CHAR_TRANSFORMER, CharTransformerFactory
from syncswitch.workloads.checks import check_job
from syncswitch.workloads.data import TRAIN, ArrayData, DataSource, JobData, TorchData
from syncswitch.workloads.identity import Workload, model_name_of
from syncswitch.workloads.language import language_task
from syncswitch.workloads.pysource import PYSOURCE, corpus_sha256
from syncswitch.workloads.task import Task


@dataclass(frozen=True)
class BuiltinModel:
    """A picklable model factory for the built-in models (carries no training data)."""

    name: str
    dataset: ArrayDataset

    def __call__(self) -> torch.nn.Module:
        return build_model(self.name, self.dataset)


@dataclass(frozen=True)
class JobParts:
    """What the Python API was given beside the config, checked and with defaults filled."""

    data: JobData
    model_factory: Callable[[], torch.nn.Module]
    task: Task
    workload: Workload
    tokens_per_sample: int | None = None  # a language model's: tokens/s = this x samples/s


def job_parts(
    config: TrainConfig,
    *,
    model_factory: Callable[[], torch.nn.Module] | None,
    train_data: DataSource | None,
    val_data: DataSource | None,
    test_data: DataSource | None,
    collate_fn: Callable[[list[Any]], Any] | None,
    dataset: ArrayDataset | None,
    task: Task,
    model_name: str | None,
    dataset_name: str | None,
) -> JobParts:
    """The data, model factory and task of a job, each checked before any file or process
    exists (a first batch goes through the model and the loss)."""
    data: JobData
    if train_data is not None:
        if dataset is not None:
            raise ConfigError("give train_data= (with val_data=) or dataset=, not both")
        if val_data is None:
            raise ConfigError(
                "train_data= needs val_data= (the validation split every decision reads); "
                "torch.utils.data.random_split can carve one from your training set"
            )
        if model_factory is None:
            raise ConfigError(
                "train_data= needs model_factory= (the built-in models take built-in data only)"
            )
        data = TorchData(train_data, val_data, test_data, collate_fn, dataset_name)
    else:
        if val_data is not None or test_data is not None or collate_fn is not None:
            raise ConfigError(
                "val_data=, test_data= and collate_fn= go with train_data=; give it too"
            )
        if dataset is not None and not isinstance(dataset, ArrayDataset):
            raise ConfigError(
                f"dataset= takes a syncswitch.workloads.ArrayDataset, not "
                f"{type(dataset).__name__}; give a torch Dataset as train_data= and val_data="
            )
        if dataset is None and config.dataset == PYSOURCE:
            return _pysource_parts(config, model_factory, task, model_name)
        arrays = dataset or load_dataset(
            config.dataset, config.data_dir, mnist1d_samples=config.mnist1d_samples
        )
        data = ArrayData(arrays.with_validation(config.val_fraction))
        if model_factory is None:
            model_factory = BuiltinModel(config.model_name, shape_only(arrays))
    checked = check_job(data, model_factory, task, config.workers)
    say_chosen_metrics(task, checked)
    task = checked
    named = dataset_name or (data.name if train_data is not None or dataset is not None else None)
    workload = workload_of(config, named, model_factory, model_name)
    return JobParts(data, model_factory, task, workload, tokens_per_sample(data, task))


def tokens_per_sample(data: JobData, task: Task) -> int | None:
    """A language model's target positions per sample (padding included: a position costs
    its compute whether or not it is counted), read from a first training sample; None for
    other jobs."""
    if not task.per_token:
        return None
    _, targets = data.sample_batch(TRAIN, 1)
    if not isinstance(targets, torch.Tensor) or targets.ndim < 1:
        return None
    return int(targets[0].numel())


def say_chosen_metrics(given: Task, checked: Task) -> None:
    """Where the data chose the metrics (a loss of the user's own, no metrics=), say which
    and why (one line on the terminal): a run measuring its loss alone is not a surprise."""
    if not given.accuracy_if_classes:
        return
    if "accuracy" in checked.metrics:
        line = "accuracy (the targets are class ids) and the loss"
    else:
        line = "the loss only (loss_fn= without metrics=, and the targets are not class ids)"
    project_console().print(f"syncswitch: metrics: {line}; metrics= chooses others", markup=False)


def _pysource_parts(
    config: TrainConfig,
    model_factory: Callable[[], torch.nn.Module] | None,
    task: Task,
    model_name: str | None,
) -> JobParts:
    """The built-in language-model job: the interpreter's own source text, char-transformer
    by default (another built-in model is refused: none of them reads byte ids)."""
    model_factory = model_factory or pysource_model(config)
    data = load_builtin(PYSOURCE, data_options(config))
    assert isinstance(data, TorchData)  # registered with arrays=False: its splits made
    task = check_job(data, model_factory, task, config.workers)
    workload = replace(
        workload_of(config, PYSOURCE, model_factory, model_name),
        corpus_sha256=corpus_sha256(config.pysource_bytes),  # the text the data was read from
    )
    return JobParts(data, model_factory, task, workload, tokens_per_sample(data, task))


def data_options(config: TrainConfig) -> DataOptions:
    """What a built-in dataset's loader reads of the job."""
    return DataOptions(
        config.data_dir,
        mnist1d_samples=config.mnist1d_samples,
        pysource_bytes=config.pysource_bytes,
        val_fraction=config.val_fraction,
    )


def pysource_model(config: TrainConfig) -> CharTransformerFactory:
    """pysource's built-in model; another built-in one is refused (none reads byte ids)."""
    if config.model_name != CHAR_TRANSFORMER:
        raise ConfigError(
            f"model {config.model_name!r} does not fit dataset 'pysource': it is built for "
            f"{' / '.join(datasets_of(config.model_name))}; for pysource use {CHAR_TRANSFORMER}"
        )
    return CharTransformerFactory()


def builtin_task(config: TrainConfig, primary_metric: str | None) -> Task | None:
    """The task of a built-in dataset that is not classification (pysource's language
    model), or None: classification's defaults apply."""
    return language_task(primary_metric) if config.dataset == PYSOURCE else None


def workload_of(
    config: TrainConfig,
    dataset_name: str | None = None,
    model_factory: Callable[[], torch.nn.Module] | None = None,
    model_name: str | None = None,
) -> Workload:
    """The dataset and model a run trains, by name: the config's built-in ones, or the
    objects the Python API was given (`dataset_name`, else the dataset's name; `model_name`,
    else the factory's own name)."""
    dataset_name = dataset_name or config.dataset
    if model_name is None:
        model_name = config.model_name if model_factory is None else model_name_of(model_factory)
    return Workload(dataset=dataset_name, model=model_name)


def shape_only(dataset: ArrayDataset) -> ArrayDataset:
    """The dataset's shape and kind without its samples, for a model factory to carry."""
    return replace(
        dataset,
        x_train=dataset.x_train[:1],
        y_train=dataset.y_train[:1],
        x_test=dataset.x_test[:1],
        y_test=dataset.y_test[:1],
        x_val=None,
        y_val=None,
    )
