"""Whether the loss and the metrics fit the job, on a first batch, before anything starts.

A wrong loss does not fail: a regression target under the default cross-entropy trains to a
loss of -0.0, an output (B, 1) against a target (B,) under a mean squared error compares every
output with every target. Each such mistake is refused here in one line naming what was seen
and what is allowed (checks.py calls these on a first batch of each split).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from syncswitch.errors import WorkloadError
from syncswitch.workloads.meter import own_copies
from syncswitch.workloads.metrics import PerSampleMean, WholeSplit, computed, too_large
from syncswitch.workloads.task import Task

# torch's own losses (mse_loss, l1_loss, smooth_l1_loss, huber_loss) say this when they
# broadcast a target of another shape against the input.
_BROADCAST_WARNING = "different to the input size"
# Class probabilities as a float target: each row sums to 1 within this.
_PROBABILITY_TOLERANCE = 1e-3


def check_loss_fits(task: Task, outputs: torch.Tensor, targets: Any, where: str) -> None:
    """The loss on one batch: no broadcast of unlike shapes, one finite number."""
    if task.loss_fn is F.cross_entropy and isinstance(targets, torch.Tensor):
        _check_cross_entropy_targets(outputs, targets)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loss = task.loss_fn(outputs, targets)
    if any(_BROADCAST_WARNING in str(w.message) for w in seen):
        raise _broadcast_error(outputs, targets, where)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        got = (
            f"shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        )
        raise WorkloadError(
            f"the loss must return one number (a scalar tensor) {where}; it returned {got} "
            "(a loss with reduction='none' needs a .mean())"
        )
    value = float(loss)
    if not math.isfinite(value):
        raise WorkloadError(
            f"the loss is {value} {where}: it must be a finite number on the model's first "
            "outputs (a log of 0, a division by 0, or targets the loss cannot take)"
        )
    if _broadcasts(task, outputs, targets, value):
        raise _broadcast_error(outputs, targets, where)


def _broadcasts(task: Task, outputs: torch.Tensor, targets: Any, value: float) -> bool:
    """Whether a loss of the user's own broadcasts outputs and targets of unlike shapes with
    as many values (it gives another value than on the outputs reshaped like the targets; a
    loss that reshapes them itself gives the same)."""
    if (
        task.loss_fn is F.cross_entropy
        or not isinstance(targets, torch.Tensor)
        or not (outputs.is_floating_point() and targets.is_floating_point())
        or outputs.shape == targets.shape
        or outputs.numel() != targets.numel()
    ):
        return False
    try:
        torch.broadcast_shapes(outputs.shape, targets.shape)
    except RuntimeError:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reshaped = float(task.loss_fn(outputs.reshape(targets.shape), targets))
    except Exception:  # a loss that takes only its own shapes: nothing seen to refuse
        return False
    return not math.isclose(value, reshaped, rel_tol=1e-5, abs_tol=1e-8)


def _broadcast_error(outputs: torch.Tensor, targets: torch.Tensor, where: str) -> WorkloadError:
    return WorkloadError(
        f"the loss broadcasts outputs {tuple(outputs.shape)} against targets "
        f"{tuple(targets.shape)} {where}: it would compare every output with every target; "
        "give them one shape (e.g. the model's output .squeeze(-1), or targets .unsqueeze(-1))"
    )


def _check_cross_entropy_targets(outputs: torch.Tensor, targets: torch.Tensor) -> None:
    """Cross-entropy takes class ids, or class probabilities shaped like the outputs; a
    float target of any other kind is a regression target without its loss."""
    if not targets.is_floating_point():
        return
    dtype = str(targets.dtype).removeprefix("torch.")
    shape, out = tuple(targets.shape), tuple(outputs.shape)
    if targets.shape != outputs.shape or outputs.ndim < 2 or outputs.shape[1] < 2:
        raise WorkloadError(
            f"targets are {dtype} {shape} against outputs {out}, and the loss is cross-entropy "
            "(the default), which takes integer class ids or class probabilities shaped like "
            "the outputs: for a regression target give train() a loss_fn= (e.g. F.mse_loss)"
        )
    sums = targets.sum(dim=1)
    in_range = bool(((targets >= 0) & (targets <= 1)).all())
    if not in_range or not torch.allclose(sums, torch.ones_like(sums), atol=_PROBABILITY_TOLERANCE):
        raise WorkloadError(
            f"targets are {dtype} {shape} but not class probabilities (each in [0, 1], summing "
            "to 1 over the classes), and the loss is cross-entropy (the default): for a "
            "regression target give train() a loss_fn= (e.g. F.mse_loss)"
        )


def check_metrics_fit(task: Task, outputs: torch.Tensor, targets: Any, where: str) -> None:
    """Each metric takes a first batch (its update). A plain function must also give one
    number on it, as it always had to; an update/compute/reset object is first computed at
    the first evaluation, as a few samples may leave it undefined (an F1 with no positive:
    0/0), which a split does not."""
    for name, metric in own_copies(task.metrics).items():
        try:
            metric.reset()
            metric.update(outputs, targets)
            if isinstance(metric, WholeSplit | PerSampleMean):
                computed(name, metric.compute())
        except Exception as error:
            text = str(error).strip().splitlines()
            raise WorkloadError(
                f"metric {name!r} fails {where}: {type(error).__name__}: {text[0] if text else ''}"
            ) from None


def check_whole_split_memory(
    task: Task, outputs: torch.Tensor, targets: Any, split_sizes: dict[str, int]
) -> None:
    """A plain-function metric holds a split's outputs and targets: refused when the largest
    split would take more than its limit, estimated from a first batch."""
    whole = {n: m for n, m in task.metrics.items() if isinstance(m, WholeSplit)}
    if not whole or not isinstance(targets, torch.Tensor) or targets.ndim == 0:
        return
    samples = int(targets.shape[0])
    per_sample = (
        outputs.numel() * outputs.element_size() + targets.numel() * targets.element_size()
    ) / samples
    largest = max(split_sizes.values(), default=0)
    for name, metric in whole.items():
        estimate = int(per_sample * largest)
        if estimate > metric.limit_bytes:
            raise WorkloadError(too_large(name, estimate, metric.limit_bytes))


def class_id_targets(outputs: torch.Tensor, targets: Any) -> bool:
    """Whether a batch is a classification's: integer class ids (batch, ...) against outputs
    (batch, classes, ...) with at least two classes."""
    return (
        isinstance(targets, torch.Tensor)
        and not targets.is_floating_point()
        and targets.dtype is not torch.bool
        and outputs.ndim >= 2
        and outputs.shape[1] >= 2
        and targets.shape == outputs.shape[:1] + outputs.shape[2:]
    )
