import pytest

from syncswitch.workloads import load_dataset


@pytest.fixture(scope="module")
def mnist():
    return load_dataset("mnist1d", mnist1d_samples=2000)  # 1,600 train, 400 test
