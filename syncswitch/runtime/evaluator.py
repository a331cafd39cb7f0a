"""The evaluator: test accuracy and loss of weight snapshots.

A plain object, called in place by the simulator; the Ray runtime makes an actor of it
(runtime/ray/evaluator.py), off the workers' path. No Ray here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from syncswitch.core.sync.optimizer import load_flat_parameters
from syncswitch.workloads import ArrayDataset, prepare_batch

if TYPE_CHECKING:  # Ray is imported only when a Ray actor asks where it runs
    pass

_BATCH = 1000
_BN_CALIBRATION_BATCHES = 8


class Evaluator:
    def __init__(
        self,
        dataset: ArrayDataset,
        model_factory: Callable[[], torch.nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        threads: int = 1,
        device: str = "cpu",
    ) -> None:
        torch.set_num_threads(threads)
        self.dataset = dataset
        self.device = torch.device(device)
        self.model = model_factory().to(self.device)
        self.loss_fn = loss_fn
        self._has_batchnorm = any(
            isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.model.modules()
        )

    def evaluate(self, weights: np.ndarray) -> tuple[float, float]:
        """(test accuracy in [0, 1], mean test loss) of the given flat weights."""
        load_flat_parameters(self.model, torch.tensor(weights, device=self.device))
        if self._has_batchnorm:
            self._calibrate_batchnorm()
        self.model.eval()
        correct, loss_sum, count = 0, 0.0, 0
        x_test, y_test = self.dataset.x_test, self.dataset.y_test
        with torch.no_grad():
            for start in range(0, len(y_test), _BATCH):
                x, y = prepare_batch(
                    self.dataset,
                    x_test[start : start + _BATCH],
                    y_test[start : start + _BATCH],
                    train=False,
                )
                x, y = x.to(self.device), y.to(self.device)
                logits = self.model(x)
                loss_sum += float(self.loss_fn(logits, y)) * len(y)
                correct += int((logits.argmax(dim=1) == y).sum())
                count += len(y)
        return correct / count, loss_sum / count

    def trained_model(self, weights: np.ndarray) -> torch.nn.Module:
        """The model holding the given flat weights, in eval mode, with the BatchNorm running
        statistics that `evaluate` measures it with: its state_dict reproduces the accuracy."""
        load_flat_parameters(self.model, torch.tensor(weights, device=self.device))
        if self._has_batchnorm:
            self._calibrate_batchnorm()
        return self.model.eval()

    def _calibrate_batchnorm(self) -> None:
        # The server holds parameters only; running statistics are re-estimated from training
        # batches under the snapshot's own weights (a cumulative average, not momentum).
        for module in self.model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.reset_running_stats()
                module.momentum = None
        self.model.train()
        rng = np.random.default_rng(0)
        with torch.no_grad():
            for _ in range(_BN_CALIBRATION_BATCHES):
                idx = rng.choice(len(self.dataset.y_train), size=256, replace=False)
                x, _ = prepare_batch(
                    self.dataset, self.dataset.x_train[idx], self.dataset.y_train[idx], train=False
                )
                self.model(x.to(self.device))
