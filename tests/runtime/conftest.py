import pytest

from syncswitch.workloads import load_dataset


@pytest.fixture(scope="module")
def small_mnist():
    # 320 train, 40 validation (carved here, so train() carves nothing), 90 test.
    return load_dataset("mnist1d", mnist1d_samples=450).with_validation(1 / 9)
