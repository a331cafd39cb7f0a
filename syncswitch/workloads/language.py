"""Next-byte prediction on the `pysource` corpus: its samples, its splits and its task.

A sample is a window of CONTEXT bytes of one file (inputs, int64 ids 0-255) and the same
window shifted by one byte (targets: the next byte at every position). Windows are cut
CONTEXT + 1 bytes apart, so no byte is shared by two windows, and none crosses a file's end.
The last TEST_SHARE of each file's windows are the test split, so the test text is text the
model never trained on (the end of every module, not windows scattered among training ones);
`val_fraction` of the rest is carved as the validation split, seeded as for every dataset.

The vocabulary is the 256 byte values, not the corpus's characters: the model's output
layer then has the same size on every Python version and for every `--pysource-bytes`, and
the model never meets an id it has no output for (UTF-8 text is a few multi-byte ids more).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from syncswitch.errors import WorkloadError
from syncswitch.records.metric import TEST, VALIDATION
from syncswitch.workloads.data import TRAIN, TorchData
from syncswitch.workloads.datasets import VALIDATION_SEED, carve
from syncswitch.workloads.pysource import PYSOURCE, Corpus, read_corpus
from syncswitch.workloads.task import LOSS, DerivedFn, Task

CONTEXT = 64  # bytes a sample sees; the model's learned positions are as many
VOCABULARY = 256  # byte values
TEST_SHARE = 0.1  # of each file's windows, taken from its end
PERPLEXITY = "perplexity"
BITS_PER_BYTE = "bits_per_byte"
_MAX_LOG = math.log(1e30)  # exp beyond this only says "the model knows nothing"


def windows(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of one file's text: int64 arrays (windows, CONTEXT), the targets
    the inputs shifted by one byte."""
    count = len(text) // (CONTEXT + 1)
    ids = np.frombuffer(text, dtype=np.uint8)[: count * (CONTEXT + 1)].astype(np.int64)
    rows = ids.reshape(count, CONTEXT + 1)
    return rows[:, :-1], rows[:, 1:]


def split_corpus(corpus: Corpus) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": ..., "test": ...}: every file's windows, its last TEST_SHARE as test."""
    train: list[tuple[np.ndarray, np.ndarray]] = []
    test: list[tuple[np.ndarray, np.ndarray]] = []
    for _, text in corpus.parts:
        x, y = windows(text)
        held = math.ceil(len(x) * TEST_SHARE) if len(x) > 1 else 0
        train.append((x[: len(x) - held], y[: len(y) - held]))
        test.append((x[len(x) - held :], y[len(y) - held :]))
    return {TRAIN: _stack(train), TEST: _stack(test)}


@dataclass(frozen=True)
class PysourceSplit:
    """A factory of one split of the corpus (picklable): on Ray each process reads the text
    from its own interpreter and refuses it if it is not the text the run recorded."""

    size_bytes: int
    val_fraction: float
    split: str
    sha256: str

    def __call__(self) -> TensorDataset:
        corpus = read_corpus(self.size_bytes)
        if corpus.sha256 != self.sha256:
            raise WorkloadError(
                f"this process's pysource corpus (sha256 {corpus.sha256[:12]}...) is not the "
                f"run's ({self.sha256[:12]}...): its Python ships other standard-library text"
            )
        x, y = _splits(corpus, self.val_fraction)[self.split]
        # A TensorDataset is read a batch at a time, one index per tensor (data.py).
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


def pysource_data(corpus: Corpus, val_fraction: float) -> TorchData:
    """The corpus's train, validation and test splits as a run reads them (each built where
    it is read)."""
    _splits(corpus, val_fraction)  # refuses a corpus too small here, before any process

    def split(name: str) -> PysourceSplit:
        return PysourceSplit(corpus.size_bytes, val_fraction, name, corpus.sha256)

    return TorchData(split(TRAIN), split(VALIDATION), split(TEST), name=PYSOURCE)


@lru_cache(maxsize=2)
def _splits(corpus: Corpus, val_fraction: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    windowed = split_corpus(corpus)
    x, y = windowed[TRAIN]
    if len(windowed[TEST][0]) == 0:
        raise WorkloadError(
            f"the pysource corpus of {corpus.size_bytes} bytes leaves no test window; give "
            "more text (--pysource-bytes)"
        )
    chosen = carve(len(x), val_fraction, VALIDATION_SEED)
    if chosen is None:
        raise WorkloadError(
            f"a validation share of {val_fraction:g} of the pysource corpus's {len(x)} "
            "training windows leaves no validation or no training window; give another share "
            "or more text (--pysource-bytes)"
        )
    kept, held = chosen
    return {
        TRAIN: (x[kept], y[kept]),
        VALIDATION: (x[held], y[held]),
        TEST: windowed[TEST],
    }


def perplexity(measured: Mapping[str, float]) -> float:
    """exp of the split's mean loss (a mean of per-batch exps would overstate it)."""
    loss = measured[LOSS]
    return math.inf if loss > _MAX_LOG else math.exp(loss)  # a NaN loss stays NaN


@dataclass(frozen=True)
class BitsPerByte:
    """Bits per byte of text from the split's mean loss in nats per token: the loss divided
    by ln 2 and by the bytes a token stands for (1 for byte-level tokens, where it is the
    loss in bits exactly). Picklable: a task goes to Ray."""

    bytes_per_token: float = 1.0

    def __call__(self, measured: Mapping[str, float]) -> float:
        return measured[LOSS] / (math.log(2) * self.bytes_per_token)


def language_task(
    primary_metric: str | None = None, bytes_per_token: float | None = 1.0, job: str = PYSOURCE
) -> Task:
    """Next-token cross-entropy (nats per token, the mean over the positions counted),
    perplexity and, when `bytes_per_token` is known, bits per byte; all lower is better;
    decisions read the loss unless `primary_metric` names another of them."""
    derived: dict[str, DerivedFn] = {PERPLEXITY: perplexity}
    if bytes_per_token is not None:
        derived[BITS_PER_BYTE] = BitsPerByte(bytes_per_token)
    primary = primary_metric or LOSS
    if primary not in (LOSS, *derived):
        raise WorkloadError(
            f"primary_metric={primary!r} is not measured on {job}; allowed: "
            f"{', '.join((LOSS, *derived))}"
        )
    return Task(F.cross_entropy, {}, primary, False, derived=derived, per_token=True)


def _stack(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    empty = np.zeros((0, CONTEXT), dtype=np.int64)
    xs = [x for x, _ in pairs] or [empty]
    ys = [y for _, y in pairs] or [empty]
    return np.concatenate(xs), np.concatenate(ys)
