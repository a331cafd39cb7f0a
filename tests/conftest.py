import pytest


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session (starting one costs seconds)."""
    import ray

    from syncswitch.runtime.ray.connect import start_local

    if not ray.is_initialized():
        start_local(16)
    yield ray
    ray.shutdown()
