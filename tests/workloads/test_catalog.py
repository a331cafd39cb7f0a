"""The built-in datasets and models: registered once, by name (workloads/catalog.py), and
config/'s list of the same names (config/limits.py, for --help and validation) pinned to it."""

from __future__ import annotations

import pytest

from syncswitch.config import limits
from syncswitch.errors import WorkloadError
from syncswitch.workloads import catalog, dataset_names, datasets_of, model_names


def test_the_torch_free_dataset_list_is_the_registry() -> None:
    assert dataset_names() == limits.DATASETS
    assert tuple(limits.DEFAULT_MODEL) == dataset_names()


def test_the_torch_free_model_list_is_the_registry() -> None:
    assert model_names() == limits.MODELS


@pytest.mark.parametrize("dataset", dataset_names())
def test_each_default_model_is_built_for_its_dataset(dataset: str) -> None:
    assert dataset in datasets_of(limits.DEFAULT_MODEL[dataset])


def test_every_model_fits_registered_datasets_only() -> None:
    for model in model_names():
        assert datasets_of(model), model
        assert set(datasets_of(model)) <= set(dataset_names()), model


def test_pysource_is_the_one_dataset_not_held_as_arrays() -> None:
    # Why two lists differed before: load_dataset() gives arrays (MNIST-1D, CIFAR); pysource's
    # text is read as a TorchData of windows. Both kinds are one registry now.
    assert set(dataset_names()) - set(dataset_names(arrays_only=True)) == {"pysource"}


def test_a_name_registers_once() -> None:
    with pytest.raises(ValueError, match="registered already"):
        catalog.register_dataset("mnist1d", lambda options: catalog.load_dataset("mnist1d"))
    with pytest.raises(ValueError, match="registered already"):
        catalog.register_model("cnn1d", lambda dataset: None, fits=("mnist1d",))  # type: ignore[arg-type,return-value]


def test_load_builtin_refuses_an_unknown_name_listing_every_dataset() -> None:
    with pytest.raises(WorkloadError) as err:
        catalog.load_builtin("imagenet", catalog.DataOptions())
    assert all(name in str(err.value) for name in dataset_names())


def test_load_dataset_refuses_the_text_corpus() -> None:
    # load_dataset() gives an ArrayDataset; pysource goes through train() (runtime/job_parts.py).
    with pytest.raises(WorkloadError, match="unknown dataset 'pysource'"):
        catalog.load_dataset("pysource")
