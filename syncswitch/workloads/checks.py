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

import torch
import torch.nn.functional as F

from syncswitch.errors import WorkloadError
from syncswitch.records.metric import TEST, VALIDATION
from syncswitch.workloads.data import TRAIN, ArrayData, JobData
from syncswitch.workloads.task import Task

_IGNORED_CLASS = -100  # cross_entropy's default ignore_index (padding in sequence targets)
# Samples of each split put through the model: an odd count, so that a target shaped unlike
# the outputs does not broadcast against them by coincidence (as (2,) against (2, 2) would).
_SAMPLES = 5
_KEYWORD = {TRAIN: "train_data", VALIDATION: "val_data", TEST: "test_data"}
# True while a model is built only to be checked (a factory that reports its builds, such as
# the search's, tells this build apart from the run's own).
_CHECKING: ContextVar[bool] = ContextVar("checking", default=False)


def is_checking() -> bool:
    return _CHECKING.get()


def check_job(data: JobData, model_factory: Callable[[], torch.nn.Module], task: Task) -> None:
    """Refuse, in one line, a job whose parts do not fit together (see the module docstring).
    Leaves torch's random state as it found it."""
    state = torch.get_rng_state()
    token = _CHECKING.set(True)
    try:
        model = build_checked(model_factory)
        for split in (TRAIN, VALIDATION, TEST):
            if not data.has(split):
                continue
            if data.size(split) == 0:
                raise WorkloadError(f"{_KEYWORD[split]}= is empty: it needs at least one sample")
        inputs, targets = data.sample_batch(TRAIN, _SAMPLES)
        outputs = _forward(model, inputs)
        if task.loss_fn is F.cross_entropy:
            _check_classes(data, outputs, targets)
        _check_loss(task, outputs, inputs, targets)
        if data.has(VALIDATION):
            # Other splits must fit the same model (e.g. a test set of another length).
            for split in (VALIDATION, TEST):
                if data.has(split):
                    x, y = data.sample_batch(split, _SAMPLES)
                    _check_loss(task, _forward(model, x, split), x, y, split)
    finally:
        _CHECKING.reset(token)
        torch.set_rng_state(state)


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
    model = model_factory()
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"model_factory= returned a {type(model).__name__}, not a torch.nn.Module"
        )
    if not any(p.requires_grad for p in model.parameters()):
        raise WorkloadError(
            f"model_factory= built a {type(model).__name__} with no trainable parameters: "
            "there is nothing to train"
        )
    return model


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
        loss = task.loss_fn(outputs, targets)
    except Exception as error:
        raise WorkloadError(f"the loss fails {where}: {_first_line(error)}") from None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise WorkloadError(f"the loss must return one number (a scalar tensor) {where}")
    for name, fn in task.metrics.items():
        try:
            float(fn(outputs, targets))
        except Exception as error:
            raise WorkloadError(
                f"metric {name!r} fails {where}: {_first_line(error)}; a metric returns one "
                "number per batch"
            ) from None


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
    if targets.is_floating_point():
        if targets.shape != outputs.shape:
            raise WorkloadError(
                f"cross-entropy targets are {targets.dtype} of shape {_shape(targets)}: class "
                "ids must be integers (or class probabilities shaped like the outputs "
                f"{_shape(outputs)})"
            )
        return
    ids = targets[targets != _IGNORED_CLASS]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= classes):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise WorkloadError(
            f"class id {bad} in train_data= is out of range: the model outputs {classes} "
            f"classes, so targets must be 0 to {classes - 1}"
        )


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_shape(v) for v in value) + ")"
    return type(value).__name__


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()
