"""What a worker computes its forward pass and loss in (`--precision`).

`32`: float32 throughout, the default. `bf16-mixed`: the forward pass and the loss run under
`torch.autocast(..., dtype=torch.bfloat16)`, so autocast's eligible ops (matrix products,
convolutions) compute in bfloat16 while the parameters stay float32; backward follows the
forward's dtypes and leaves float32 gradients on the float32 parameters. The servers'
master weights and optimizer state are float32 whatever the precision, and what travels is
`--wire-dtype`'s business (wire_dtype.py), a separate choice.

Unlike float16, bfloat16 has float32's exponent range, so no loss scaling is needed.
Evaluation stays float32 (runtime/evaluator.py does not use this): every decision the run
makes reads the validation metric, and measuring it on the weights as they are keeps it
comparable between runs of either precision.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from enum import StrEnum

import torch


class Precision(StrEnum):
    FLOAT32 = "32"
    BF16_MIXED = "bf16-mixed"


@contextlib.contextmanager
def forward_precision(precision: Precision, device: torch.device) -> Iterator[None]:
    """The context a worker's forward pass and loss run in, on `device` (its model's)."""
    if precision is Precision.FLOAT32:
        yield
        return
    # Backward runs outside it (autocast's own advice): its ops follow the forward's dtypes.
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        yield
