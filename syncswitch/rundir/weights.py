"""final_weights.pt (and best_weights.pt) read back: a model's state_dict, or an earlier
run's flat vector.

Runs before 0.2 saved `{"flat_weights": tensor}` (the parameters as one vector, in the
model's parameter order); runs since save the model's standard `state_dict`. Both are read
here, with `torch.load(weights_only=True)`: the file may come from elsewhere and must not
run code.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn.utils import parameters_to_vector

from syncswitch.errors import RunDirError
from syncswitch.rundir import names

LEGACY_KEY = "flat_weights"


def read_final_weights(run_dir: str | Path) -> dict[str, torch.Tensor]:
    """The run's final_weights.pt as a dict of tensors (a state_dict, or {LEGACY_KEY: ...})."""
    return read_weights(Path(run_dir) / names.FINAL_WEIGHTS)


def read_best_weights(run_dir: str | Path) -> dict[str, torch.Tensor]:
    """The run's best_weights.pt (its best evaluation's state_dict: control/best.py)."""
    path = Path(run_dir) / names.BEST_WEIGHTS
    if not path.exists():
        raise RunDirError(f"{path}: missing (the run has made no evaluation yet)")
    return read_weights(path)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A weights file as a dict of tensors, or one RunDirError line."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # a torn or foreign file: one line, not a traceback
        raise RunDirError(f"{path}: not a weights file ({type(error).__name__})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise RunDirError(f"{path}: holds no tensors by name")
    return state


def flat_weights(
    state: dict[str, torch.Tensor], model: torch.nn.Module | None = None
) -> torch.Tensor:
    """The parameters as one vector, in the model's order, from either form. A state_dict
    needs the `model` it belongs to when that model has buffers (BatchNorm statistics),
    which are not parameters."""
    if set(state) == {LEGACY_KEY}:
        return state[LEGACY_KEY]
    if model is None:
        return torch.cat([tensor.flatten() for tensor in state.values()])
    model.load_state_dict(state)
    return parameters_to_vector(model.parameters()).detach()
