"""What the values of a message are rounded to on their way between a worker and a server
(`--wire-dtype`): gradients, local deltas and weights replies alike.

The server keeps float32 master weights and optimizer state, and a worker computes in
float32: only the copies that travel are rounded, by torch's round-to-nearest-even conversion
(`tensor.to(torch.bfloat16)`), and widened back to float32 on arrival. Every runtime rounds
with `round_trip` (the simulator) or `encode`/`decode` (the data plane's bytes), which give
the same float32 values, so a run on the simulator still equals the same run on Ray.

float16 holds magnitudes up to 65504 only: a larger gradient value becomes inf, and the
server's admission check drops such a message as `non_finite` (counted in the summary's
accounting, as any non-finite gradient is; three in a row quarantine the worker). bfloat16
has float32's range and 8 bits of mantissa; it is the one to use for gradients.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import torch


class WireDtype(StrEnum):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"

    @property
    def torch_dtype(self) -> torch.dtype:
        return _TORCH[self]

    @property
    def itemsize(self) -> int:
        """Bytes per value on the wire."""
        return 4 if self is WireDtype.FLOAT32 else 2

    @property
    def raw_numpy(self) -> np.dtype:
        """The numpy dtype a message's bytes are received into (numpy has no bfloat16: the
        16-bit kinds travel as raw 16-bit words and are reinterpreted by torch)."""
        return np.dtype("<f4") if self is WireDtype.FLOAT32 else np.dtype("<u2")


_TORCH = {
    WireDtype.FLOAT32: torch.float32,
    WireDtype.BFLOAT16: torch.bfloat16,
    WireDtype.FLOAT16: torch.float16,
}


def encode(values: np.ndarray, dtype: WireDtype) -> np.ndarray:
    """float32 `values` as they travel: themselves for float32, else a new array of raw
    16-bit words (round to nearest even)."""
    if dtype is WireDtype.FLOAT32:
        return values
    narrow = torch.from_numpy(np.ascontiguousarray(values)).to(dtype.torch_dtype)
    return narrow.view(torch.int16).numpy().view(np.uint16)


def decode(raw: np.ndarray, dtype: WireDtype) -> np.ndarray:
    """What `encode` made, widened back to float32 (a new, writable array unless float32)."""
    if dtype is WireDtype.FLOAT32:
        return raw
    words = torch.from_numpy(raw.view(np.int16))
    return words.view(dtype.torch_dtype).to(torch.float32).numpy()


def round_trip(values: np.ndarray, dtype: WireDtype) -> np.ndarray:
    """float32 `values` as the receiver gets them: `decode(encode(values))`, in one step."""
    if dtype is WireDtype.FLOAT32:
        return values
    narrow = torch.from_numpy(np.ascontiguousarray(values)).to(dtype.torch_dtype)
    return narrow.to(torch.float32).numpy()
