import pytest

from syncswitch.workloads import load_dataset


@pytest.fixture(scope="module")
def mnist():
    # 1,600 train, 200 validation (carved here, so train() carves nothing), 450 test.
    return load_dataset("mnist1d", mnist1d_samples=2250).with_validation(1 / 9)
