"""A run's data as every runtime reads it: training batches by index, and evaluation batches
of the validation and test splits.

Two kinds, one interface (`JobData`):

- `ArrayData`: an `ArrayDataset` held in memory, sliced as numpy arrays (the fast path of the
  built-in workloads; CIFAR's augmentation runs vectorised on the batch).
- `TorchData`: map-style `torch.utils.data.Dataset`s, each given as the dataset itself or as a
  *factory* (a picklable callable that builds it). Samples and targets may be any tensors of
  any dtype; a batch is ``collate_fn([dataset[i] for i in indices])``. A factory is called
  where the data is read, so on Ray each worker builds its own training set (reading only the
  indices of its shard) and no copy travels through the driver; a dataset object is pickled
  to each worker that reads it.

A worker only ever reads the training split; the evaluator reads validation and test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset, default_collate

from syncswitch.errors import WorkloadError
from syncswitch.records.metric import TEST, VALIDATION
from syncswitch.workloads.datasets import ArrayDataset, prepare_batch

Batch = tuple[Any, Any]  # (inputs, targets): tensors, or what collate_fn made of them
DataSource = Any  # a map-style Dataset, or a callable returning one
TRAIN = "train"
# Samples per evaluation batch: only how much goes through the model at once, as every
# measure is exact over the whole split whatever its batches (workloads/meter.py).
_EVAL_BATCH = 1000  # ArrayData
_TORCH_EVAL_BATCH = 256  # a Dataset: its samples may be large


class JobData:
    """What a run trains on and is judged by (see the module docstring)."""

    name: str

    def size(self, split: str) -> int:
        raise NotImplementedError

    def has(self, split: str) -> bool:
        raise NotImplementedError

    def train_batch(self, indices: np.ndarray, generator: torch.Generator | None) -> Batch:
        """The training samples `indices`, augmented (if the data augments) from
        `generator`."""
        raise NotImplementedError

    def eval_batches(self, split: str) -> Iterator[Batch]:
        """Every sample of `split` ("validation" or "test"), in order, unaugmented."""
        raise NotImplementedError

    def calibration_inputs(self, indices: np.ndarray) -> Any:
        """Training inputs `indices`, unaugmented (BatchNorm statistics are measured on
        them)."""
        raise NotImplementedError

    def sample_batch(self, split: str, samples: int = 2) -> Batch:
        """The first `samples` of `split`, unaugmented (the checks before a run)."""
        raise NotImplementedError

    @property
    def decision_split(self) -> str:
        """The split decisions read: validation, or the test set for runs made before
        validation splits existed (an ArrayDataset resumed without one)."""
        return VALIDATION if self.has(VALIDATION) else TEST


class ArrayData(JobData):
    def __init__(self, dataset: ArrayDataset) -> None:
        self.dataset = dataset
        self.name = dataset.name
        self._splits = {split: (x, y) for split, x, y in dataset.splits()}

    def size(self, split: str) -> int:
        return len(self._splits[split][1]) if split in self._splits else 0

    def has(self, split: str) -> bool:
        return split in self._splits

    def train_batch(self, indices: np.ndarray, generator: torch.Generator | None) -> Batch:
        x, y = self._splits[TRAIN]
        return prepare_batch(self.dataset, x[indices], y[indices], train=True, generator=generator)

    def eval_batches(self, split: str) -> Iterator[Batch]:
        x, y = self._splits[split]
        for start in range(0, len(y), _EVAL_BATCH):
            end = start + _EVAL_BATCH
            yield prepare_batch(self.dataset, x[start:end], y[start:end], train=False)

    def calibration_inputs(self, indices: np.ndarray) -> Any:
        x, y = self._splits[TRAIN]
        return prepare_batch(self.dataset, x[indices], y[indices], train=False)[0]

    def sample_batch(self, split: str, samples: int = 2) -> Batch:
        x, y = self._splits[split]
        return prepare_batch(self.dataset, x[:samples], y[:samples], train=False)


class TorchData(JobData):
    """Map-style datasets (or factories of them) for the train, validation and test splits."""

    def __init__(
        self,
        train: DataSource,
        val: DataSource,
        test: DataSource | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        name: str | None = None,
    ) -> None:
        self._sources: dict[str, DataSource] = {TRAIN: train, VALIDATION: val}
        if test is not None:
            self._sources[TEST] = test
        for split, source in self._sources.items():
            _check_source(split, source)
        if collate_fn is not None and not callable(collate_fn):
            raise WorkloadError(f"collate_fn= must be a callable, not {collate_fn!r}")
        self.collate_fn = collate_fn or default_collate
        self.name = name or _source_name(train)
        self._built: dict[str, Dataset] = {}

    def __getstate__(self) -> dict[str, Any]:
        # What a factory built stays where it was built: each process builds its own.
        state = dict(self.__dict__)
        state["_built"] = {}
        return state

    def dataset(self, split: str) -> Dataset:
        """`split`'s dataset, built from its factory on first use in this process."""
        built = self._built.get(split)
        if built is None:
            source = self._sources[split]
            built = source if _is_dataset(source) else _build(split, source)
            self._built[split] = built
        return built

    def size(self, split: str) -> int:
        return len(self.dataset(split)) if split in self._sources else 0  # type: ignore[arg-type]

    def has(self, split: str) -> bool:
        return split in self._sources

    def train_batch(self, indices: np.ndarray, generator: torch.Generator | None) -> Batch:
        return self._batch(self.dataset(TRAIN), indices)

    def eval_batches(self, split: str) -> Iterator[Batch]:
        dataset = self.dataset(split)
        total = len(dataset)  # type: ignore[arg-type]
        for start in range(0, total, _TORCH_EVAL_BATCH):
            yield self._batch(dataset, np.arange(start, min(start + _TORCH_EVAL_BATCH, total)))

    def calibration_inputs(self, indices: np.ndarray) -> Any:
        return self._batch(self.dataset(TRAIN), indices)[0]

    def sample_batch(self, split: str, samples: int = 2) -> Batch:
        dataset = self.dataset(split)
        return self._batch(dataset, np.arange(min(samples, len(dataset))))  # type: ignore[arg-type]

    def batch_at(self, split: str, indices: np.ndarray) -> Batch:
        """The samples `indices` of `split`, collated, unaugmented (the checks before a run)."""
        return self._batch(self.dataset(split), indices)

    def _batch(self, dataset: Dataset, indices: np.ndarray) -> Batch:
        if type(dataset) is TensorDataset and self.collate_fn is default_collate:
            # What default_collate makes of its samples, one index per tensor: a per-sample
            # loop would cost about 5 us a sample (docs/your-job.md, "Measured").
            index = torch.from_numpy(np.asarray(indices, dtype=np.int64))
            return as_batch(tuple(tensor[index] for tensor in dataset.tensors))
        wanted = [int(i) for i in indices]
        # A dataset that reads many samples at once says so with __getitems__ (as torch's own
        # DataLoader asks); otherwise one sample at a time.
        many = getattr(dataset, "__getitems__", None)
        samples = many(wanted) if many is not None else [dataset[i] for i in wanted]
        return as_batch(self.collate_fn(samples))


def as_batch(batch: Any) -> Batch:
    """A collated batch as (inputs, targets); anything else is refused in one line."""
    if isinstance(batch, Sequence) and not isinstance(batch, str) and len(batch) == 2:
        return batch[0], batch[1]
    kind = type(batch).__name__
    size = f" of {len(batch)}" if isinstance(batch, Sequence) else ""
    raise WorkloadError(
        f"a batch must be (inputs, targets): each sample a pair, or a collate_fn that returns "
        f"one; got a {kind}{size}"
    )


def to_device(value: Any, device: torch.device) -> Any:
    """Tensors (and tuples, lists and dicts of them) moved to `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, tuple | list):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def batch_size_of(targets: Any) -> int:
    """Samples in a batch, from its targets (or the first tensor they hold)."""
    if isinstance(targets, torch.Tensor):
        return int(targets.shape[0]) if targets.ndim else 1
    if isinstance(targets, tuple | list) and targets:
        return batch_size_of(targets[0])
    if isinstance(targets, dict) and targets:
        return batch_size_of(next(iter(targets.values())))
    raise WorkloadError(f"cannot tell a batch's size from targets of type {type(targets).__name__}")


def _is_dataset(source: Any) -> bool:
    return isinstance(source, Dataset) or (
        hasattr(source, "__getitem__") and hasattr(source, "__len__")
    )


def _check_source(split: str, source: Any) -> None:
    keyword = {TRAIN: "train_data", VALIDATION: "val_data", TEST: "test_data"}[split]
    if isinstance(source, IterableDataset):
        raise WorkloadError(
            f"{keyword}= is an IterableDataset; give a map-style Dataset (with __len__ and "
            "__getitem__): each worker reads its own shard of indices"
        )
    if not _is_dataset(source) and not callable(source):
        raise WorkloadError(
            f"{keyword}= must be a map-style torch Dataset or a callable that returns one, "
            f"not {type(source).__name__}"
        )


def _build(split: str, factory: Callable[[], Any]) -> Dataset:
    built = factory()
    if isinstance(built, IterableDataset) or not _is_dataset(built):
        raise WorkloadError(
            f"the {split} data factory {_source_name(factory)!r} returned a "
            f"{type(built).__name__}, not a map-style Dataset (with __len__ and __getitem__)"
        )
    return built


def _source_name(source: Any) -> str:
    if _is_dataset(source):
        return type(source).__name__
    name = getattr(source, "__qualname__", None) or getattr(source, "__name__", None)
    func = getattr(source, "func", None)  # functools.partial
    if name is None and func is not None:
        return _source_name(func)
    return str(name or type(source).__name__)
