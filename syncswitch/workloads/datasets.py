"""In-memory datasets and the numpy -> tensor batch conversion the trainer uses.

Datasets are held as numpy arrays so that sharding and minibatch slicing stay cheap and
framework-free; only :func:`prepare_batch` turns a slice into tensors.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import torch

from syncswitch.errors import WorkloadError
from syncswitch.workloads.cifar import read_cifar

DATASETS: tuple[str, ...] = ("mnist1d", "cifar10", "cifar100")
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
@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """A train/test split held in memory.

    ``x_*`` are float32 ``(N, 1, 40)`` for MNIST-1D and uint8 NCHW ``(N, 3, 32, 32)`` for
    CIFAR (uint8 keeps CIFAR-10 at ~150 MB instead of ~600 MB); labels are int64 ``(N,)``.
    """

    name: str
    x_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    x_test: np.ndarray = field(repr=False)
    y_test: np.ndarray = field(repr=False)
    num_classes: int
    augment: str = "none"

    def __post_init__(self) -> None:
        if self.augment not in AUGMENTATIONS:
            raise WorkloadError(
                f"unknown augmentation {self.augment!r}; allowed: {', '.join(AUGMENTATIONS)}"
            )
        if self.num_classes < 1:
            raise WorkloadError(f"num_classes must be >= 1, got {self.num_classes}")
        splits = (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test))
        for split, x, y in splits:
            if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
                raise WorkloadError(
                    f"dataset {self.name!r} {split} split is malformed: x{x.shape} vs y{y.shape}"
                )
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise WorkloadError(
                f"dataset {self.name!r}: train samples {self.x_train.shape[1:]} and test "
                f"samples {self.x_test.shape[1:]} differ in shape"
            )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 40)`` or ``(3, 32, 32)``."""
        return tuple(int(d) for d in self.x_train.shape[1:])


def load_dataset(
    name: str,
    data_dir: str | None = None,
    *,
    mnist1d_samples: int = 5000,
    mnist1d_seed: int = 42,
) -> ArrayDataset:
    """Load ``name`` (one of :data:`DATASETS`); CIFAR is read from ``data_dir``, never fetched."""
    if name == "mnist1d":
        return _make_mnist1d(mnist1d_samples, mnist1d_seed)
    if name in ("cifar10", "cifar100"):
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
    raise WorkloadError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")


def _make_mnist1d(num_samples: int, seed: int) -> ArrayDataset:
    """Generate MNIST-1D locally (about a second), so runs need no network or cache."""
    import mnist1d.data

    # make_dataset draws num_samples // 10 samples per class, so fewer than 10 yields nothing.
    if num_samples < _MNIST1D_CLASSES:
        raise WorkloadError(f"mnist1d_samples must be >= {_MNIST1D_CLASSES}, got {num_samples}")
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

    return ArrayDataset(
        name="mnist1d",
        x_train=to_x(raw["x"]),
        y_train=to_y(raw["y"]),
        x_test=to_x(raw["x_test"]),
        y_test=to_y(raw["y_test"]),
        num_classes=_MNIST1D_CLASSES,
    )


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
