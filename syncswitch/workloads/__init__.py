"""Datasets and models the trainer can run: MNIST-1D with a small CNN, CIFAR with ResNets,
the pysource text with a character transformer (each registered by name in catalog.py)."""

from syncswitch.errors import WorkloadError
from syncswitch.workloads.catalog import (
    build_model,
    dataset_names,
    datasets_of,
    load_dataset,
    model_names,
)
from syncswitch.workloads.datasets import ArrayDataset, prepare_batch
from syncswitch.workloads.identity import Workload, model_name_of
from syncswitch.workloads.models import CifarResNet, Cnn1d

__all__ = [
    "ArrayDataset",
    "CifarResNet",
    "Cnn1d",
    "Workload",
    "WorkloadError",
    "build_model",
    "dataset_names",
    "datasets_of",
    "load_dataset",
    "model_name_of",
    "model_names",
    "prepare_batch",
]
