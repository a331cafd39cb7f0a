"""What a logger backend receives: named values at a point of the run, and a little text."""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Point:
    """One value of one series. Every series is plotted against samples (the step) and wall
    time, so a point carries both."""

    name: str  # e.g. "test/accuracy"; "/" groups series in TensorBoard and MLflow alike
    value: float
    samples: int
    wall_time_s: float  # Unix time


class RunLogger(ABC):
    """A backend: TensorBoard, MLflow. The feed (feed.py) calls it; it never sees a record."""

    name: str

    @abstractmethod
    def start(self, config: dict[str, Any], resume_samples: int | None) -> None:
        """Open the backend's run; `resume_samples` when a killed run continues from there."""

    @abstractmethod
    def scalars(self, points: list[Point]) -> None: ...

    @abstractmethod
    def text(self, name: str, text: str, samples: int, wall_time_s: float) -> None:
        """A note at a point of the run (a switch, a detection)."""

    @abstractmethod
    def histogram(self, name: str, values: np.ndarray, samples: int, wall_time_s: float) -> None:
        """A distribution (staleness)."""

    def where(self) -> str:
        """Where the results can be seen, for the end-of-run summary."""
        return ""

    @abstractmethod
    def close(self, status: str) -> None:
        """Flush and close; `status` is summary.json's (complete, failed: ..., running)."""


def installed(package: str) -> bool:
    """Whether an optional backend's package can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except ValueError:  # in sys.modules without a spec (e.g. blocked with None)
        return False
