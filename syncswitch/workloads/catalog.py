"""The built-in datasets and models, each registered here once by name.

A small registry in the manner of torch.distributed's backends: a name -> the function that
loads the dataset (`register_dataset`) or builds the model (`register_model`). The loaders and
builders live in their own modules; the lines at the end of this one register the built-in
ones, so adding a built-in dataset is its module plus one line here (docs/architecture.md,
"Add a built-in dataset").

config/limits.py names the same datasets and models without importing this package (for
`--help`'s choices and validation); tests/workloads/test_catalog.py pins the two lists equal,
so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from syncswitch.errors import WorkloadError
from syncswitch.workloads import datasets, language, models
from syncswitch.workloads.char_transformer import CHAR_TRANSFORMER, CharTransformer
from syncswitch.workloads.data import TorchData
from syncswitch.workloads.datasets import ArrayDataset
from syncswitch.workloads.pysource import PYSOURCE, read_corpus


@dataclass(frozen=True)
class DataOptions:
    """What a built-in dataset's loader may read of the job: where its files are and the
    options that size it. Each loader reads its own and ignores the rest."""

    data_dir: str | None = None
    mnist1d_samples: int = 5000
    mnist1d_seed: int = 42
    pysource_bytes: int | None = None  # pysource's: the job's --pysource-bytes
    val_fraction: float = 0.0


@dataclass(frozen=True)
class DatasetEntry:
    """A registered dataset: its loader gives an `ArrayDataset` (the in-memory fast path,
    its validation split carved by the caller) or, for a dataset that is not class ids over
    arrays (pysource's text), the `TorchData` a run reads, its splits already made."""

    name: str
    load: Callable[[DataOptions], ArrayDataset | TorchData]
    arrays: bool  # the loader gives an ArrayDataset (load_dataset() takes it)


@dataclass(frozen=True)
class ModelEntry:
    """A registered model: its builder, and the built-in datasets it is built for (a model
    is refused early on another, rather than with a shape mismatch mid-run)."""

    name: str
    build: Callable[[ArrayDataset], nn.Module]
    fits: tuple[str, ...]


_DATASETS: dict[str, DatasetEntry] = {}
_MODELS: dict[str, ModelEntry] = {}


def register_dataset(
    name: str, load: Callable[[DataOptions], ArrayDataset | TorchData], *, arrays: bool = True
) -> None:
    """Register a built-in dataset under `name` (once: a second registration is a bug)."""
    if name in _DATASETS:
        raise ValueError(f"dataset {name!r} is registered already")
    _DATASETS[name] = DatasetEntry(name, load, arrays)


def register_model(
    name: str, build: Callable[[ArrayDataset], nn.Module], fits: tuple[str, ...]
) -> None:
    """Register a built-in model under `name`, built for the datasets `fits` names."""
    if name in _MODELS:
        raise ValueError(f"model {name!r} is registered already")
    _MODELS[name] = ModelEntry(name, build, fits)


def dataset_names(*, arrays_only: bool = False) -> tuple[str, ...]:
    """The built-in datasets' names, in registration order (`arrays_only`: those whose
    loader gives an ArrayDataset)."""
    return tuple(d.name for d in _DATASETS.values() if d.arrays or not arrays_only)


def model_names() -> tuple[str, ...]:
    """The built-in models' names, in registration order."""
    return tuple(_MODELS)


def datasets_of(model: str) -> tuple[str, ...]:
    """The built-in datasets a built-in model is built for."""
    entry = _MODELS.get(model)
    return entry.fits if entry else ()


def load_builtin(name: str, options: DataOptions) -> ArrayDataset | TorchData:
    """Load built-in dataset `name`, whichever kind it is."""
    entry = _DATASETS.get(name)
    if entry is None:
        raise WorkloadError(f"unknown dataset {name!r}; allowed: {', '.join(dataset_names())}")
    return entry.load(options)


def load_dataset(
    name: str,
    data_dir: str | None = None,
    *,
    mnist1d_samples: int = 5000,
    mnist1d_seed: int = 42,
) -> ArrayDataset:
    """Load array dataset `name` (one of `dataset_names(arrays_only=True)`); CIFAR is read
    from `data_dir`, never fetched."""
    allowed = dataset_names(arrays_only=True)
    if name not in allowed:
        raise WorkloadError(f"unknown dataset {name!r}; allowed: {', '.join(allowed)}")
    options = DataOptions(data_dir, mnist1d_samples=mnist1d_samples, mnist1d_seed=mnist1d_seed)
    loaded = _DATASETS[name].load(options)
    assert isinstance(loaded, ArrayDataset)  # registered with arrays=True
    return loaded


def build_model(name: str, dataset: ArrayDataset) -> nn.Module:
    """Build model `name` (one of `model_names()`) sized for `dataset`."""
    entry = _MODELS.get(name)
    if entry is None:
        raise WorkloadError(f"unknown model {name!r}; allowed: {', '.join(model_names())}")
    if dataset.name not in entry.fits:
        fitting = [m.name for m in _MODELS.values() if dataset.name in m.fits]
        hint = f"; for {dataset.name} use {' or '.join(fitting)}" if fitting else ""
        raise WorkloadError(
            f"model {name!r} does not fit dataset {dataset.name!r}: {name} is built for "
            f"{' / '.join(entry.fits)}{hint}"
        )
    return entry.build(dataset)


def _pysource(options: DataOptions) -> TorchData:
    if options.pysource_bytes is None:
        raise WorkloadError("the pysource corpus needs its size (pysource_bytes)")
    return language.pysource_data(read_corpus(options.pysource_bytes), options.val_fraction)


# -- the built-in ones: one line each -----------------------------------------------------------

register_dataset("mnist1d", lambda o: datasets.make_mnist1d(o.mnist1d_samples, o.mnist1d_seed))
register_dataset("cifar10", lambda o: datasets.load_cifar("cifar10", o.data_dir))
register_dataset("cifar100", lambda o: datasets.load_cifar("cifar100", o.data_dir))
register_dataset(PYSOURCE, _pysource, arrays=False)

register_model("cnn1d", models.cnn1d_for, fits=("mnist1d",))
register_model("resnet20", models.resnet_for(20), fits=("cifar10", "cifar100"))
register_model("resnet32", models.resnet_for(32), fits=("cifar10", "cifar100"))
# Built by runtime/job_parts.py for pysource (its CharTransformerFactory); the same model here.
register_model(CHAR_TRANSFORMER, lambda _: CharTransformer(), fits=(PYSOURCE,))
