"""One worker step's gradient, as every runtime computes it.

The Ray worker and the simulator call this same function, so a simulated worker computes
exactly the gradient its Ray twin would (tests/sim/test_gradients.py checks they agree), in
float32 or under bfloat16 autocast alike (core/sync/precision.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.core.sync.precision import Precision, forward_precision
from syncswitch.errors import RunStopped, WorkloadError
from syncswitch.user_code import described
from syncswitch.workloads.data import JobData, to_device


def backward_on_batch(
    model: torch.nn.Module,
    flat: FlatParameters,
    data: JobData,
    indices: np.ndarray,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    generator: torch.Generator,
    precision: Precision = Precision.FLOAT32,
) -> float:
    """The training batch `indices` (augmented from `generator`) forward and backward on the
    weights loaded in `flat`; the gradient is left in `flat.gradient` (float32, as the
    parameters are, whatever `precision` the forward pass ran in), the loss returned."""
    x, y = data.train_batch(indices, generator)
    if flat.staged:
        x, y = to_device(x, flat.device), to_device(y, flat.device)
    flat.zero_grad()
    with forward_precision(precision, flat.device):
        outputs = model(x)
        try:
            loss = loss_fn(outputs, y)
        except RunStopped:  # SIGTERM/SIGINT's stop, raised wherever the main thread is
            raise
        except Exception as error:  # e.g. a class id out of range that the checks did not read
            message = f"the loss failed on a training batch: {described(error)}"
            raise WorkloadError(message) from None
    loss.backward()
    return float(loss.detach())
