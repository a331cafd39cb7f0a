"""Which dataset and model a run trains, named from the objects it was given.

A run started from the command line trains a built-in dataset and model, named by its
config. Through the Python API, `train(config, model_factory=..., dataset=...)` trains
objects of the user's own; their names (the dataset's `name`, the factory's own name) are
what config.json, the report and the job fingerprint record, so that the run directory never
describes another job. The user may name the model explicitly (`model_name=`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class Workload:
    """The dataset and model a run trains, as it records them."""

    dataset: str
    model: str
    # The SHA-256 of a built-in corpus's text (pysource's), which another Python ships
    # otherwise: config.json and the job's fingerprint say which text was trained on.
    corpus_sha256: str | None = None

    def config_entries(self) -> dict[str, str]:
        """config.json's entries naming them (in place of the config's own)."""
        entries = {"dataset": self.dataset, "model": self.model}
        if self.corpus_sha256 is not None:
            entries["corpus_sha256"] = self.corpus_sha256
        return entries


def model_name_of(factory: Callable[[], Any]) -> str:
    """A model factory's name: its `name` attribute (a built-in model's), the function or
    class it is (through functools.partial), else its type's name."""
    named = getattr(factory, "name", None)
    if isinstance(named, str) and named:
        return _bounded(named)
    while isinstance(factory, functools.partial):
        factory = factory.func
    name = getattr(factory, "__qualname__", None) or getattr(factory, "__name__", None)
    return _bounded(str(name or type(factory).__qualname__))


def _bounded(name: str) -> str:
    flat = " ".join(name.split())
    return flat if len(flat) <= MAX_NAME_CHARS else flat[: MAX_NAME_CHARS - 3] + "..."
