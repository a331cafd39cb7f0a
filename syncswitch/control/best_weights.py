"""The best evaluation's weights as the run record keeps them (control/best.py keeps them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from syncswitch.core.sync.state import StateFormatError

# What summary.json's test_weights says: the test split is measured on the final weights.
TEST_WEIGHTS = "final"


@dataclass(frozen=True)
class BestWeights:
    """The weights of the best evaluation so far, and where in training it was."""

    value: float  # the primary metric there
    samples: int
    version: int
    fraction: float
    weights: np.ndarray  # the flat parameters evaluated there

    def describe(self) -> dict[str, Any]:
        """summary.json's "best" block (the weights are in best_weights.pt)."""
        return {
            "value": self.value,
            "samples": self.samples,
            "version": self.version,
            "fraction": self.fraction,
        }

    def to_plain(self) -> dict[str, Any]:
        return {**self.describe(), "weights": torch.from_numpy(self.weights.copy())}

    @classmethod
    def from_plain(cls, plain: Any, parameters: int | None = None) -> BestWeights:
        """Back from `to_plain()` (a checkpoint: untrusted); StateFormatError, one line, on a
        malformed one. `parameters`: the size the weights must have, when known."""
        if not isinstance(plain, dict):
            raise StateFormatError("the best weights are not a mapping")
        weights = plain.get("weights")
        if not (
            isinstance(weights, torch.Tensor)
            and weights.dim() == 1
            and weights.dtype == torch.float32
        ):
            raise StateFormatError("the best weights are not a 1-D float32 tensor")
        if parameters is not None and weights.numel() != parameters:
            raise StateFormatError(
                f"the best weights hold {weights.numel()} values, the model {parameters}"
            )
        value: Any = plain.get("value")
        fraction: Any = plain.get("fraction")
        samples: Any = plain.get("samples")
        version: Any = plain.get("version")
        numbers = (value, fraction)
        if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
            raise StateFormatError("the best weights' value or fraction is not a number")
        if not all(type(n) is int and n >= 0 for n in (samples, version)):
            raise StateFormatError("the best weights' samples or version is not a count")
        return cls(
            float(value), int(samples), int(version), float(fraction), weights.numpy().copy()
        )
