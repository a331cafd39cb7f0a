"""One split's measures, batch by batch: the loss and every metric of a `Task`, each exact
over the split however it is batched (the evaluator's batches, on Ray and the simulator
alike, are whatever the data's `eval_batches` gives)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from syncswitch.errors import RunStopped, WorkloadError
from syncswitch.user_code import described
from syncswitch.workloads.data import batch_size_of
from syncswitch.workloads.metrics import computed
from syncswitch.workloads.scores import IGNORED_CLASS

LOSS = "loss"


class LossMean:
    """The loss over a split. Cross-entropy is summed and divided by the positions it
    counts (padding -100 is not one), exactly as one call on the whole split would; another
    loss is taken to be a mean over its batch's samples, weighted by batch size."""

    def __init__(self, loss_fn: Any) -> None:
        self.loss_fn = loss_fn
        self.total, self.count = 0.0, 0

    def update(self, outputs: torch.Tensor, targets: Any) -> None:
        if self.loss_fn is F.cross_entropy and isinstance(targets, torch.Tensor):
            self.total += float(F.cross_entropy(outputs, targets, reduction="sum"))
            if targets.is_floating_point():  # class probabilities: every position counts
                self.count += outputs.numel() // max(int(outputs.shape[1]), 1)
            else:
                self.count += int((targets != IGNORED_CLASS).sum())
            return
        size = batch_size_of(targets)
        self.total += float(self.loss_fn(outputs, targets)) * size
        self.count += size

    def compute(self) -> float:
        return self.total / self.count if self.count else math.nan


class SplitMeter:
    """The loss and metrics of one split: `update` per evaluation batch, `result` once."""

    def __init__(self, loss_fn: Any, metrics: Mapping[str, Any]) -> None:
        self.loss = LossMean(loss_fn)
        self.metrics = dict(metrics)
        self._placed = False
        for metric in self.metrics.values():
            metric.reset()

    def update(self, outputs: torch.Tensor, targets: Any) -> None:
        if not self._placed:
            # A metric that is a module (torchmetrics') keeps its state where the outputs are.
            for metric in self.metrics.values():
                if isinstance(metric, torch.nn.Module):
                    metric.to(outputs.device)
            self._placed = True
        self._guarded(LOSS, lambda: self.loss.update(outputs, targets))
        for name, metric in self.metrics.items():
            self._guarded(name, lambda m=metric: m.update(outputs, targets))

    def result(self) -> dict[str, float]:
        values = {LOSS: self._guarded(LOSS, self.loss.compute)}
        for name, metric in self.metrics.items():
            values[name] = computed(name, self._guarded(name, metric.compute))
        return values

    @staticmethod
    def _guarded(name: str, step: Any) -> Any:
        try:
            return step()
        except (WorkloadError, RunStopped):  # a signal's stop passes through the user's code
            raise
        except Exception as error:  # the user's code: one line, as the checks say it
            raise WorkloadError(f"{name} failed on an evaluation: {described(error)}") from None


def own_copies(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metric objects of an evaluator's own: its state is not the caller's (a simulated run
    evaluates in the caller's process); one that cannot be copied is used as given."""
    try:
        return copy.deepcopy(dict(metrics))
    except Exception:  # e.g. an object holding a lock; on Ray it was pickled anyway
        return dict(metrics)
