"""Which samples each worker trains on, in which order: pure and reproducible.

The training set is permuted once by the seed and split into one disjoint shard per worker.
Each worker walks its shard in a fresh seeded order every epoch and wraps across epoch ends, so
every batch has exactly the configured size (BSP's mean over n batches then equals the mean over
their concatenation).
"""

from __future__ import annotations

import itertools

import numpy as np


def worker_shard(num_samples: int, worker: int, workers: int, seed: int) -> np.ndarray:
    permutation = np.random.default_rng(seed).permutation(num_samples)
    return np.array_split(permutation, workers)[worker]


def parameter_shards(num_parameters: int, servers: int) -> list[slice]:
    """Contiguous, near-equal slices of the flat parameter vector, one per server."""
    bounds = np.linspace(0, num_parameters, servers + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


class BatchStream:
    def __init__(self, shard: np.ndarray, batch_size: int, seed: int, worker: int) -> None:
        if len(shard) == 0:
            raise ValueError(f"worker {worker} has an empty data shard: use fewer workers")
        self._shard = shard
        self._batch_size = batch_size
        self._rng = np.random.default_rng([seed, worker])
        self._order = self._rng.permutation(shard)
        self._position = 0

    def next_indices(self) -> np.ndarray:
        taken: list[np.ndarray] = []
        needed = self._batch_size
        while needed > 0:
            if self._position >= len(self._order):
                self._order = self._rng.permutation(self._shard)
                self._position = 0
            chunk = self._order[self._position : self._position + needed]
            self._position += len(chunk)
            needed -= len(chunk)
            taken.append(chunk)
        return np.concatenate(taken)
