"""In-memory datasets and the numpy -> tensor batch conversion the trainer uses.

Datasets are held as numpy arrays so that sharding and minibatch slicing stay cheap and
framework-free; only :func:`prepare_batch` turns a slice into tensors.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from syncswitch.errors import WorkloadError
from syncswitch.workloads.cifar import read_cifar

AUGMENTATIONS: tuple[str, ...] = ("none", "cifar")

_MNIST1D_CLASSES = 10
_CIFAR_PAD = 4

# Commonly quoted per-channel statistics of the CIFAR training sets (RGB, pixel values in
# [0, 1]). Fixed constants keep normalisation identical across workers and shards, which
# statistics recomputed from each worker's shard would not.
_CHANNEL_STATS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


# eq=False: the generated __eq__/__hash__ would compare or hash numpy arrays, which raises.
# The validation split's seed: fixed, not the run's, so that every run of a job (every seed
# of a study, every trial of a search) trains and is judged on the same samples.
VALIDATION_SEED = 20_261_206


def carve(samples: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(training indices, validation indices) with `fraction` of `samples` for validation,
    both sorted (the order of the remaining training samples is kept); None when either
    would be empty."""
    held_out = round(samples * fraction)
    if held_out < 1 or held_out >= samples:
        return None
    order = np.random.default_rng(seed).permutation(samples)
    return np.sort(order[held_out:]), np.sort(order[:held_out])


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """Train, validation and test splits held in memory: the fast path for classification.

    ``x_*`` are float32 ``(N, 1, 40)`` for MNIST-1D and uint8 NCHW ``(N, 3, 32, 32)`` for
    CIFAR (uint8 keeps CIFAR-10 at ~150 MB instead of ~600 MB); labels are int64 ``(N,)``.
    Without ``x_val``/``y_val``, `with_validation` carves a validation split from training.
    """

    name: str
    x_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    x_test: np.ndarray = field(repr=False)
    y_test: np.ndarray = field(repr=False)
    num_classes: int
    augment: str = "none"
    x_val: np.ndarray | None = field(default=None, repr=False)
    y_val: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.augment not in AUGMENTATIONS:
            raise WorkloadError(
                f"unknown augmentation {self.augment!r}; allowed: {', '.join(AUGMENTATIONS)}"
            )
        if self.num_classes < 1:
            raise WorkloadError(f"num_classes must be >= 1, got {self.num_classes}")
        if (self.x_val is None) != (self.y_val is None):
            raise WorkloadError(f"dataset {self.name!r}: give both x_val and y_val, or neither")
        for split, x, y in self.splits():
            if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
                raise WorkloadError(
                    f"dataset {self.name!r} {split} split must be numpy arrays, not "
                    f"{type(x).__name__} and {type(y).__name__}"
                )
            if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
                raise WorkloadError(
                    f"dataset {self.name!r} {split} split is malformed: x{x.shape} vs y{y.shape}"
                )
            if x.shape[1:] != self.x_train.shape[1:]:
                raise WorkloadError(
                    f"dataset {self.name!r}: train samples {self.x_train.shape[1:]} and "
                    f"{split} samples {x.shape[1:]} differ in shape"
                )
            self._check_labels(split, y)

    def _check_labels(self, split: str, y: np.ndarray) -> None:
        """Class ids in [0, num_classes): a float label would be truncated, one out of range
        would fail mid-run."""
        if len(y) == 0:
            raise WorkloadError(f"dataset {self.name!r}: the {split} split is empty")
        if not np.issubdtype(y.dtype, np.integer):
            raise WorkloadError(
                f"dataset {self.name!r}: {split} labels are {y.dtype}; an ArrayDataset holds "
                "class ids (integers) - give a torch Dataset as train_data= for other targets"
            )
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= self.num_classes:
            bad = low if low < 0 else high
            raise WorkloadError(
                f"dataset {self.name!r}: {split} label {bad} is out of range; with "
                f"num_classes={self.num_classes} labels must be 0 to {self.num_classes - 1}"
            )

    def splits(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """(name, inputs, labels) of each split it holds."""
        held = [("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)]
        if self.x_val is not None and self.y_val is not None:
            held.insert(1, ("validation", self.x_val, self.y_val))
        return held

    def with_validation(self, fraction: float, seed: int = VALIDATION_SEED) -> ArrayDataset:
        """This dataset with `fraction` of its training samples set aside as a validation
        split (chosen by `seed`, the same for every run of a job, so every run of it trains
        on the same samples); itself if it has a validation split or `fraction` is 0."""
        if self.x_val is not None or fraction <= 0:
            return self
        chosen = carve(len(self.y_train), fraction, seed)
        if chosen is None:
            raise WorkloadError(
                f"dataset {self.name!r}: a validation share of {fraction:g} of its "
                f"{len(self.y_train)} training samples leaves no validation or no training "
                "sample; give more samples or another share"
            )
        train, val = chosen
        return replace(
            self,
            x_train=self.x_train[train],
            y_train=self.y_train[train],
            x_val=self.x_train[val],
            y_val=self.y_train[val],
        )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 40)`` or ``(3, 32, 32)``."""
        return tuple(int(d) for d in self.x_train.shape[1:])


def load_cifar(name: str, data_dir: str | None) -> ArrayDataset:
    """CIFAR-10 or CIFAR-100 (`name`), read from `data_dir`, never fetched."""
    arrays = read_cifar(name, data_dir)
    return ArrayDataset(
        name=name,
        x_train=arrays.x_train,
        y_train=arrays.y_train,
        x_test=arrays.x_test,
        y_test=arrays.y_test,
        num_classes=arrays.num_classes,
        augment="cifar",
    )


def make_mnist1d(num_samples: int, seed: int) -> ArrayDataset:
    """Generate MNIST-1D locally (seconds), or read the arrays generated before from the
    per-user cache (milliseconds; mnist1d_cache.py), so runs need no network."""
    from syncswitch.workloads import mnist1d_cache

    # make_dataset draws num_samples // 10 samples per class, so fewer than 10 yields nothing.
    if num_samples < _MNIST1D_CLASSES:
        raise WorkloadError(f"mnist1d_samples must be >= {_MNIST1D_CLASSES}, got {num_samples}")
    arrays = mnist1d_cache.cached(num_samples, seed, lambda: _generate_mnist1d(num_samples, seed))
    return ArrayDataset(
        name="mnist1d",
        x_train=arrays["x_train"],
        y_train=arrays["y_train"],
        x_test=arrays["x_test"],
        y_test=arrays["y_test"],
        num_classes=_MNIST1D_CLASSES,
    )


def _generate_mnist1d(num_samples: int, seed: int) -> dict[str, np.ndarray]:
    """mnist1d's make_dataset, as the arrays a dataset holds (float32 x of shape (n, 1, 40),
    int64 labels)."""
    import mnist1d.data

    args = mnist1d.data.get_dataset_args()
    args.num_samples = num_samples
    args.seed = seed
    # make_dataset reseeds the global `random` and numpy generators; restoring them keeps
    # loading data from silently changing the caller's seeded randomness.
    py_state = random.getstate()
    np_state = np.random.get_state()
    try:
        raw = mnist1d.data.make_dataset(args)
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)

    def to_x(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32).reshape(len(a), 1, -1)

    def to_y(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.int64).reshape(-1)

    return {
        "x_train": to_x(raw["x"]),
        "y_train": to_y(raw["y"]),
        "x_test": to_x(raw["x_test"]),
        "y_test": to_y(raw["y_test"]),
    }


def prepare_batch(
    dataset: ArrayDataset,
    x: np.ndarray,
    y: np.ndarray,
    *,
    train: bool,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn a numpy slice of ``dataset`` into model-ready ``(float32 inputs, int64 labels)``.

    uint8 images are scaled to [0, 1], augmented (training batches of ``augment="cifar"``
    datasets only, drawing from ``generator``) and normalised per channel. Tensors are on
    the CPU; moving them is the caller's choice.
    """
    if len(x) != len(y):
        raise WorkloadError(f"batch has {len(x)} inputs but {len(y)} labels")
    is_image = x.dtype == np.uint8
    labels = torch.from_numpy(np.array(y, dtype=np.int64))
    # np.array copies, so neither the in-place ops below nor the caller write into the dataset.
    inputs = torch.from_numpy(np.array(x, dtype=np.float32))
    if is_image:
        inputs.div_(255.0)
    if train and dataset.augment == "cifar":
        inputs = random_crop_flip(inputs, _CIFAR_PAD, generator)
    if is_image:
        inputs = _normalise(inputs, dataset.name)
    return inputs, labels


def random_crop_flip(
    images: torch.Tensor, pad: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Zero-pad NCHW ``images`` by ``pad``, take a random same-size crop, flip half of them.

    Vectorised with one gather for the whole batch: a per-sample Python loop would dominate
    step time for small CIFAR models on the CPU.
    """
    if images.ndim != 4:
        raise WorkloadError(f"crop/flip augmentation needs NCHW images, got {tuple(images.shape)}")
    n, c, h, w = images.shape
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad))
    top = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    left = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    rows = top[:, None] + torch.arange(h)
    cols = left[:, None] + torch.arange(w)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    batch_idx = torch.arange(n)[:, None, None, None]
    chan_idx = torch.arange(c)[None, :, None, None]
    return padded[batch_idx, chan_idx, rows[:, None, :, None], cols[:, None, None, :]]


def _normalise(images: torch.Tensor, name: str) -> torch.Tensor:
    stats = _CHANNEL_STATS.get(name)
    if stats is None:
        raise WorkloadError(
            f"no channel statistics for uint8 dataset {name!r}; known: {', '.join(_CHANNEL_STATS)}"
        )
    if images.ndim != 4 or images.shape[1] != len(stats[0]):
        raise WorkloadError(
            f"{name} batches must be NCHW with {len(stats[0])} channels, got {tuple(images.shape)}"
        )
    mean = torch.tensor(stats[0], dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(stats[1], dtype=torch.float32).view(1, -1, 1, 1)
    return (images - mean) / std
