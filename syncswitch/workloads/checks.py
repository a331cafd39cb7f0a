"""A job's parts checked together before any file or process exists: the model factory, and
a first batch of each split through the model and the loss.

A mistake here (a factory that returns no module, targets the loss cannot take, class ids
beyond the model's outputs, an empty split) would otherwise surface mid-run, on Ray wrapped
in a remote traceback; here it is one line naming the keyword argument and the shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from syncswitch.errors import WorkloadError
from syncswitch.records.metric import TEST, VALIDATION
from syncswitch.user_code import raised
from syncswitch.workloads.data import TRAIN, ArrayData, JobData, TorchData
from syncswitch.workloads.loss_checks import (
    check_loss_fits,
    check_metrics_fit,
    check_whole_split_memory,
    class_id_targets,
)
from syncswitch.workloads.scores import IGNORED_CLASS
from syncswitch.workloads.task import Task

# Samples of each split put through the model: an odd count, so that a target shaped unlike
# the outputs does not broadcast against them by coincidence (as (2,) against (2, 2) would).
_SAMPLES = 5
_KEYWORD = {TRAIN: "train_data", VALIDATION: "val_data", TEST: "test_data"}
# A split's __len__ beyond this is refused before anything is sized by it (index arrays,
# shards): 10^8 samples are 0.8 GB of int64 indices per permutation.
MAX_SPLIT_SAMPLES = 100_000_000
# Class ids are checked over every sample of in-memory data (arrays, a TensorDataset), in
# one vectorised pass; another Dataset is read through its __getitem__ at this many samples
# per split, spread evenly from the first to the last, so the check's time is bounded.
_LABEL_SAMPLES = 1024
# True while a model is built only to be checked (a factory that reports its builds, such as
# the search's, tells this build apart from the run's own).
_CHECKING: ContextVar[bool] = ContextVar("checking", default=False)


def is_checking() -> bool:
    return _CHECKING.get()


def check_job(
    data: JobData,
    model_factory: Callable[[], torch.nn.Module],
    task: Task,
    workers: int | None = None,
) -> Task:
    """Refuse, in one line, a job whose parts do not fit together (see the module docstring).
    Returns the task, with accuracy measured where it was left to the data and a first batch
    shows class ids (loss_checks.py). Leaves torch's random state as it found it."""
    state = torch.get_rng_state()
    token = _CHECKING.set(True)
    try:
        model = build_checked(model_factory)
        _check_same_model(model, build_checked(model_factory))
        _check_sizes(data, workers)
        inputs, targets = data.sample_batch(TRAIN, _SAMPLES)
        outputs = _forward(model, inputs)
        if task.loss_fn is F.cross_entropy:
            _check_classes(data, outputs, targets)
        if task.accuracy_if_classes and class_id_targets(outputs, targets):
            task = task.with_accuracy()
        _check_loss(task, outputs, inputs, targets)
        sizes = {s: data.size(s) for s in (VALIDATION, TEST) if data.has(s)}
        check_whole_split_memory(task, outputs, targets, sizes)
        _check_gradient(model, task, inputs, targets)
        if data.has(VALIDATION):
            # Other splits must fit the same model (e.g. a test set of another length).
            for split in (VALIDATION, TEST):
                if data.has(split):
                    x, y = data.sample_batch(split, _SAMPLES)
                    _check_loss(task, _forward(model, x, split), x, y, split)
    finally:
        _CHECKING.reset(token)
        torch.set_rng_state(state)
    return task


def build_checked(model_factory: Any) -> torch.nn.Module:
    """The model a factory builds, or one line saying what is wrong with the factory."""
    if isinstance(model_factory, torch.nn.Module):
        raise WorkloadError(
            f"model_factory= is a model instance ({type(model_factory).__name__}); give "
            "something that builds one: the class itself, or e.g. lambda: Net()"
        )
    if not callable(model_factory):
        raise WorkloadError(
            f"model_factory= must be a callable that returns an nn.Module, not "
            f"{type(model_factory).__name__}"
        )
    try:
        model = model_factory()
    except Exception as error:  # the user's factory: one line, not a traceback
        raise WorkloadError(f"model_factory= raised {raised(error)}") from None
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"model_factory= returned a {type(model).__name__}, not a torch.nn.Module"
        )
    odd = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()} - {"float32"})
    if odd:
        raise WorkloadError(
            f"model_factory= built parameters of dtype {', '.join(odd)}; the parameter server "
            "keeps float32 weights: build the model in float32 (no .double() or .half(); "
            "--wire-dtype chooses what travels)"
        )
    if not any(p.requires_grad for p in model.parameters()):
        raise WorkloadError(
            f"model_factory= built a {type(model).__name__} with no trainable parameters: "
            "there is nothing to train"
        )
    return model


def _check_same_model(first: torch.nn.Module, second: torch.nn.Module) -> None:
    """Every process builds its own model from the factory: each call must build the same."""
    shapes = [tuple(p.shape) for p in first.parameters()]
    again = [tuple(p.shape) for p in second.parameters()]
    if shapes != again:
        count, recount = (
            sum(p.numel() for p in first.parameters()),
            sum(p.numel() for p in second.parameters()),
        )
        raise WorkloadError(
            f"model_factory= built {count:,} parameters ({len(shapes)} tensors), then "
            f"{recount:,} ({len(again)} tensors) on a second call: every call must build the "
            "same model (the server and each worker build their own)"
        )


def _check_sizes(data: JobData, workers: int | None) -> None:
    """Each split's __len__ is believable before anything is sized by it, and the training
    split has a sample for every worker."""
    for split in (TRAIN, VALIDATION, TEST):
        if not data.has(split):
            continue
        try:
            size = data.size(split)
        except Exception as error:  # the user's __len__
            raise WorkloadError(f"len({_KEYWORD[split]}=) raised {raised(error)}") from None
        if size == 0:
            raise WorkloadError(f"{_KEYWORD[split]}= is empty: it needs at least one sample")
        if size > MAX_SPLIT_SAMPLES:
            raise WorkloadError(
                f"{_KEYWORD[split]}= says it holds {size:,} samples (its __len__); at most "
                f"{MAX_SPLIT_SAMPLES:,} are allowed (a run sizes its index arrays by it)"
            )
        if split == TRAIN and workers is not None and size < workers:
            raise WorkloadError(
                f"{_KEYWORD[split]}= holds {size} samples for {workers} workers; every worker "
                f"needs at least one: give at least {workers} samples, or fewer --workers"
            )


def _check_gradient(model: torch.nn.Module, task: Task, inputs: Any, targets: Any) -> None:
    """The loss, computed as training computes it, must have a gradient to follow."""
    model.train()
    try:
        with torch.enable_grad():
            loss = task.loss_fn(model(inputs), targets)
    except Exception as error:
        raise WorkloadError(
            f"a batch of train_data= fails in training mode: {_first_line(error)}"
        ) from None
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise WorkloadError(
            "the loss on a batch of train_data= has no gradient (requires_grad is False): "
            "compute it from the model's outputs, without .detach(), .item() or no_grad()"
        )


def _forward(model: torch.nn.Module, inputs: Any, split: str = TRAIN) -> torch.Tensor:
    model.eval()
    try:
        with torch.no_grad():
            outputs = model(inputs)
    except Exception as error:
        raise WorkloadError(
            f"a batch of {_KEYWORD[split]}= (inputs {_shape(inputs)}) does not go through "
            f"the model: {_first_line(error)}"
        ) from None
    if not isinstance(outputs, torch.Tensor):
        raise WorkloadError(
            f"the model returns a {type(outputs).__name__}; it must return a tensor (the "
            "outputs the loss and the metrics read)"
        )
    return outputs


def _check_loss(
    task: Task, outputs: torch.Tensor, inputs: Any, targets: Any, split: str = TRAIN
) -> None:
    where = (
        f"on a batch of {_KEYWORD[split]}= (inputs {_shape(inputs)}, outputs "
        f"{_shape(outputs)}, targets {_shape(targets)})"
    )
    try:
        check_loss_fits(task, outputs, targets, where)
    except WorkloadError:
        raise
    except Exception as error:
        raise WorkloadError(f"the loss fails {where}: {_first_line(error)}") from None
    check_metrics_fit(task, outputs, targets, where)


def _check_classes(data: JobData, outputs: torch.Tensor, targets: Any) -> None:
    """Classification: the model's outputs per class agree with the data's classes, and the
    targets are class ids within them."""
    if outputs.ndim < 2:
        raise WorkloadError(
            f"cross-entropy needs outputs (batch, classes, ...); the model returns "
            f"{_shape(outputs)}"
        )
    classes = int(outputs.shape[1])
    if isinstance(data, ArrayData) and data.dataset.num_classes != classes:
        raise WorkloadError(
            f"dataset {data.name!r} has num_classes={data.dataset.num_classes} but the model "
            f"outputs {classes} values per sample; they must agree"
        )
    if not isinstance(targets, torch.Tensor):
        return
    if targets.is_floating_point():  # class probabilities, or refused (loss_checks.py)
        return
    batch = [(TRAIN, targets)]  # the first batch's, then each split's
    splits = [(split, _labels(data, split) if data.has(split) else None) for split in _KEYWORD]
    for split, labels in batch + splits:
        if labels is None or labels.is_floating_point():
            continue
        ids = labels[labels != IGNORED_CLASS]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= classes):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise WorkloadError(
                f"class id {bad} in {_KEYWORD[split]}= is out of range: the model outputs "
                f"{classes} classes, so targets must be 0 to {classes - 1}"
            )


def _labels(data: JobData, split: str) -> torch.Tensor | None:
    """`split`'s class ids: all of a TensorDataset's, else `_LABEL_SAMPLES` spread over the
    split (None: arrays, checked already, or targets that are not one tensor)."""
    # An ArrayDataset checked all of its labels against num_classes when it was made, and
    # num_classes against the model's outputs above.
    if isinstance(data, TorchData):
        dataset = data.dataset(split)
        if type(dataset) is TensorDataset and len(dataset.tensors) == 2:
            return dataset.tensors[1]
        size = data.size(split)
        indices = np.unique(np.linspace(0, size - 1, min(size, _LABEL_SAMPLES)).astype(np.int64))
        try:
            targets = data.batch_at(split, indices)[1]
        except WorkloadError:
            raise
        except Exception as error:  # the user's __getitem__ or collate_fn
            raise WorkloadError(
                f"reading {_KEYWORD[split]}= (its samples' class ids) raised {raised(error)}"
            ) from None
        return targets if isinstance(targets, torch.Tensor) else None
    return None


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_shape(v) for v in value) + ")"
    return type(value).__name__


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()
