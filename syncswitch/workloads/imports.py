"""The model and data of a job that names the user's own code by import path
(`--model mypkg.models:Net --dataset mypkg.data:make_datasets`), as `train()`'s keyword
arguments.

- The model's path names a callable that takes no arguments and returns an `nn.Module` (a
  class is one). It is the run's model factory.
- The dataset's path names a callable that takes no arguments and returns one of: an
  `ArrayDataset` (the in-memory fast path); a dict with keys "train", "val" and optionally
  "test" and "collate_fn"; or a tuple `(train, val[, test])`. The datasets are map-style
  torch Datasets (or factories of them: train()'s `train_data=`).

The dataset's callable runs once, here, on the driver: every process then trains on the same
splits, even if the callable draws them at random. On Ray its datasets travel to each worker
by pickling, and the model factory by reference (Ray puts the driver's working directory on
its workers' module path); a dataset too large to send should read its samples lazily (hold
file paths, not tensors). Only the driver imports the user's module by path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from syncswitch.errors import ConfigError
from syncswitch.import_path import is_import_path, resolve
from syncswitch.keys import unknown_key_problem
from syncswitch.user_code import raised
from syncswitch.workloads.datasets import ArrayDataset

if TYPE_CHECKING:
    from syncswitch.config import TrainConfig

SPLIT_KEYS = ("train", "val", "test", "collate_fn")
_SHAPES = (
    "an ArrayDataset, a dict with keys 'train', 'val' (and optionally 'test', 'collate_fn'), "
    "or a tuple (train, val[, test]) of map-style Datasets"
)


def user_code_arguments(config: TrainConfig) -> dict[str, Any]:
    """train()'s keyword arguments for the model and dataset `config` names by import path;
    empty when it names built-in ones. Each mistake is one ConfigError line."""
    arguments: dict[str, Any] = {}
    if is_import_path(config.model):
        arguments["model_factory"] = resolve(str(config.model), "model")
        arguments["model_name"] = config.model
    if is_import_path(config.dataset):
        make = resolve(config.dataset, "dataset")
        try:
            made = make()
        except Exception as error:  # the user's factory: one line, not a traceback
            raise ConfigError(f"dataset {config.dataset!r} raised {raised(error)}") from None
        arguments.update(data_arguments(made, config.dataset))
        if "train_data" in arguments and "model_factory" not in arguments:
            raise ConfigError(
                f"dataset {config.dataset!r} returned torch Datasets, which model "
                f"{config.model_name!r} (built in) cannot take: name your model with "
                "--model MODULE:NAME"
            )
        arguments["dataset_name"] = config.dataset
    return arguments


def data_arguments(made: Any, path: str) -> dict[str, Any]:
    """What a dataset factory returned, as train()'s data keyword arguments."""
    if isinstance(made, ArrayDataset):
        return {"dataset": made}
    if isinstance(made, Mapping):
        problem = unknown_key_problem(made, SPLIT_KEYS)
        if problem:
            raise ConfigError(f"dataset {path!r} returned a dict with an {problem}")
        missing = [key for key in ("train", "val") if key not in made]
        if missing:
            raise ConfigError(
                f"dataset {path!r} returned a dict without {' and '.join(map(repr, missing))}: "
                "give the training and the validation split (every decision reads the latter)"
            )
        splits = {f"{key}_data": made[key] for key in ("train", "val", "test") if key in made}
        return {**splits, "collate_fn": made.get("collate_fn")}
    if isinstance(made, tuple | list) and len(made) in (2, 3):
        return dict(zip(("train_data", "val_data", "test_data"), made, strict=False))
    size = f" of {len(made)}" if isinstance(made, tuple | list) else ""
    raise ConfigError(f"dataset {path!r} returned a {type(made).__name__}{size}; return {_SHAPES}")
