"""Datasets and models the trainer can run: MNIST-1D with a small CNN, CIFAR with ResNets."""

from syncswitch.errors import WorkloadError
from syncswitch.workloads.datasets import DATASETS, ArrayDataset, load_dataset, prepare_batch
from syncswitch.workloads.identity import Workload, model_name_of
from syncswitch.workloads.models import MODELS, CifarResNet, Cnn1d, build_model

__all__ = [
    "DATASETS",
    "MODELS",
    "ArrayDataset",
    "CifarResNet",
    "Cnn1d",
    "Workload",
    "WorkloadError",
    "build_model",
    "load_dataset",
    "model_name_of",
    "prepare_batch",
]
