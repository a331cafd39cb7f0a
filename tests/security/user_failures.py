"""The user's code for test_user_code_failures.py, importable by path
(`tests.security.user_failures:Net`) on the driver and, by pickle, on Ray's workers."""

from __future__ import annotations

import os

import torch
from torch.utils.data import Dataset, TensorDataset

ESCAPE = "\x1b[31m"  # a colour code in an exception's message: printed escaped, never raw
BROKEN = {"model": False, "samples": False}  # switched on by the tests


def Net() -> torch.nn.Module:  # a factory, named like the class it builds
    if BROKEN["model"]:
        raise RuntimeError(f"{ESCAPE}boom in the factory")
    return torch.nn.Linear(8, 2)


def _split(samples: int, seed: int) -> TensorDataset:
    x = torch.randn(samples, 8, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x[:, 0] > 0).long())


_READS = [0]  # samples read in this process


class FailsAfter(Dataset):
    """A map-style dataset that raises (a corrupt file, say) once this process has read
    `good` samples (the checks before the start read each of 256 once, and 5 more), or,
    with `off_driver`, in any process but the one that made it (a Ray worker)."""

    def __init__(self, size: int, good: int | None, off_driver: bool = False) -> None:
        self.data = _split(size, 0)
        self.good = good
        self.driver = os.getpid() if off_driver else None

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        _READS[0] += 1
        late = self.good is not None and _READS[0] > self.good
        if late or self.driver not in (None, os.getpid()):
            raise ValueError(f"{ESCAPE}bad sample {index}")
        return self.data[index]


def data() -> dict:
    _READS[0] = 0
    good = 300 if BROKEN["samples"] else None
    return {"train": FailsAfter(256, good), "val": _split(64, 1)}


def broken_data() -> dict:
    raise OSError(f"{ESCAPE}cannot read the data")


def broken_on_workers() -> dict:
    return {"train": FailsAfter(256, None, off_driver=True), "val": _split(64, 1)}
