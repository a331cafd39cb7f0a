"""Random number generator state as plain data, for checkpoint tests.

The states of `random.Random`, a numpy Generator and a torch generator, in the form
`syncswitch.core.reliability.checkpoints.check_plain` accepts, and back. Only the tests use them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def python_rng_state(rng: random.Random) -> dict[str, Any]:
    """A `random.Random` state as plain data (getstate() is a tuple holding a tuple of ints)."""
    version, internal, gauss_next = rng.getstate()
    return {"version": version, "internal": list(internal), "gauss_next": gauss_next}


def restore_python_rng(rng: random.Random, data: Mapping[str, Any]) -> None:
    try:
        state = (int(data["version"]), tuple(int(x) for x in data["internal"]), data["gauss_next"])
        rng.setstate(state)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"python RNG state {_short(data)} is not one python_rng_state wrote: {exc}"
        ) from exc


def numpy_rng_state(gen: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's bit-generator state as plain data.

    PCG64's state is already dicts of Python ints (128-bit ints pickle fine); MT19937 carries a
    uint32 array, stored as {"ndarray": dtype, "values": list} so it comes back with its dtype.
    """
    return _numpy_to_plain(gen.bit_generator.state)


def restore_numpy_rng(gen: np.random.Generator, data: Mapping[str, Any]) -> None:
    try:
        gen.bit_generator.state = _numpy_from_plain(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"numpy RNG state for {type(gen.bit_generator).__name__} {_short(data)} does not "
            f"fit: {exc}"
        ) from exc


def _numpy_to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _numpy_to_plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return {"ndarray": str(value.dtype), "values": value.tolist()}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _numpy_from_plain(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"ndarray", "values"}:
            return np.asarray(value["values"], dtype=np.dtype(value["ndarray"]))
        return {k: _numpy_from_plain(v) for k, v in value.items()}
    return value


def torch_rng_state(gen: torch.Generator | None = None) -> torch.Tensor:
    """A torch generator's state (a uint8 tensor); None means the global CPU generator."""
    state = gen.get_state() if gen is not None else torch.random.get_rng_state()
    return state.clone()


def restore_torch_rng(gen: torch.Generator | None, data: torch.Tensor) -> None:
    if type(data) is not torch.Tensor or data.dtype != torch.uint8 or data.dim() != 1:
        raise ValueError(
            f"torch RNG state {_short(data)} must be a 1-D uint8 tensor as torch_rng_state wrote"
        )
    try:
        if gen is None:
            torch.random.set_rng_state(data)
        else:
            gen.set_state(data)
    except RuntimeError as exc:
        raise ValueError(f"torch RNG state of {data.numel()} bytes does not fit: {exc}") from exc


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
