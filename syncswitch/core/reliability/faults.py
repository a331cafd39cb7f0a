"""Injected faults, for testing what the runtime promises when things break.

Like emulated step times, injected faults are explicit in the config (`faults:`) and recorded
in every result file; a run without them is unchanged. Each fault names a worker and the
training progress (fraction of samples) from which it acts:

- `nan_gradient`: the worker sends gradients full of NaN from then on;
- `wrong_shape`: the worker sends gradients of the wrong size from then on;
- `crash`: the worker process exits at once (as a machine failure would end it), once;
- `hang`: the worker stops making progress without dying (a stuck device), once.

Killing processes from outside (the server, a worker, the driver) needs no config: the run
directory's `actors.json` lists every process id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from syncswitch.keys import unknown_key_problem


class FaultError(ValueError):
    """A fault spec that cannot describe a run."""


class FaultKind(StrEnum):
    NAN_GRADIENT = "nan_gradient"
    WRONG_SHAPE = "wrong_shape"
    CRASH = "crash"
    HANG = "hang"

    @property
    def once(self) -> bool:
        """Crash and hang end the incarnation; a restarted worker does not repeat them."""
        return self in (FaultKind.CRASH, FaultKind.HANG)


_KEYS = ("kind", "worker", "at")


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    worker: int
    at: float  # fraction of training samples from which the fault acts

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "worker": self.worker, "at": self.at}


@dataclass(frozen=True)
class FaultPlan:
    faults: tuple[Fault, ...] = ()

    def for_worker(self, worker: int) -> tuple[Fault, ...]:
        return tuple(f for f in self.faults if f.worker == worker)

    def describe(self) -> list[dict[str, Any]]:
        return [f.describe() for f in self.faults]


def parse_faults(data: object, workers: int) -> FaultPlan:
    """Reads a config's `faults:` value: a list of {kind, worker, at}."""
    if data is None:
        return FaultPlan()
    if not isinstance(data, list | tuple):
        raise FaultError(f"faults: expected a list of {{kind, worker, at}}, got {data!r}")
    faults = []
    for index, item in enumerate(data):
        where = f"faults[{index}]"
        if not isinstance(item, Mapping):
            raise FaultError(f"{where}: expected a mapping with keys {', '.join(_KEYS)}")
        problem = unknown_key_problem(item, _KEYS)
        if problem:
            raise FaultError(f"{where}: {problem}")
        kind = item.get("kind")
        if kind not in set(FaultKind):
            allowed = ", ".join(k.value for k in FaultKind)
            raise FaultError(f"{where}: kind {kind!r} is not allowed; choose one of {allowed}")
        worker = item.get("worker")
        if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < workers:
            raise FaultError(
                f"{where}: worker {worker!r} does not exist; allowed ids are 0..{workers - 1}"
            )
        at = item.get("at", 0.0)
        if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at < 1:
            raise FaultError(f"{where}: 'at' must be a fraction in [0, 1), got {at!r}")
        faults.append(Fault(FaultKind(kind), worker, float(at)))
    return FaultPlan(tuple(faults))


def inject(
    faults: Iterable[Fault], gradient: np.ndarray, progress: float
) -> tuple[np.ndarray, FaultKind | None]:
    """A worker's gradient with the faults active at `progress` applied, and the crash or
    hang now due (the runtime carries that out: a process exit, a silent worker)."""
    ends: FaultKind | None = None
    for fault in faults:
        if progress < fault.at:
            continue
        if fault.kind is FaultKind.NAN_GRADIENT:
            gradient = np.full_like(gradient, np.nan)
        elif fault.kind is FaultKind.WRONG_SHAPE:
            gradient = gradient[:-1].copy()
        elif ends is None:
            ends = fault.kind
    return gradient, ends
