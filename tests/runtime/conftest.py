import pytest

from syncswitch.workloads import load_dataset


@pytest.fixture(scope="module")
def small_mnist():
    return load_dataset("mnist1d", mnist1d_samples=400)  # 320 train, 80 test
