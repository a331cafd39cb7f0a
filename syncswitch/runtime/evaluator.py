"""The evaluator: the loss and metrics of weight snapshots on the validation or test split.

A plain object, called in place by the simulator; the Ray runtime makes an actor of it
(runtime/ray/evaluator.py), off the workers' path. No Ray here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from syncswitch.core.sync.optimizer import load_flat_parameters
from syncswitch.workloads.data import TRAIN, JobData, to_device
from syncswitch.workloads.task import Task

_BN_CALIBRATION_BATCHES = 8
_BN_CALIBRATION_SAMPLES = 256


class Evaluator:
    def __init__(
        self,
        data: JobData,
        model_factory: Callable[[], torch.nn.Module],
        task: Task,
        threads: int = 1,
        device: str = "cpu",
    ) -> None:
        torch.set_num_threads(threads)
        self.data = data
        self.device = torch.device(device)
        self.model = model_factory().to(self.device)
        self.task = task
        self._has_batchnorm = any(
            isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.model.modules()
        )

    def evaluate(self, weights: np.ndarray, split: str | None = None) -> dict[str, float]:
        """The task's measures (the primary metric first, then the loss, then the others) of
        the given flat weights on `split` (by default the one decisions read)."""
        self.trained_model(weights)
        split = split or self.data.decision_split
        # Every measure over the whole split, whatever its batches (workloads/meter.py).
        meter = self.task.meter()
        with torch.no_grad():
            for x, y in self.data.eval_batches(split):
                x, y = to_device(x, self.device), to_device(y, self.device)
                meter.update(self.model(x), y)
        return self.task.finish(meter.result())

    def trained_model(self, weights: np.ndarray) -> torch.nn.Module:
        """The model holding the given flat weights, in eval mode, with the BatchNorm running
        statistics that `evaluate` measures it with: its state_dict reproduces the metrics."""
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
        samples = self.data.size(TRAIN)
        with torch.no_grad():
            for _ in range(_BN_CALIBRATION_BATCHES):
                idx = rng.choice(samples, size=min(_BN_CALIBRATION_SAMPLES, samples), replace=False)
                x = self.data.calibration_inputs(idx)
                self.model(to_device(x, self.device))
