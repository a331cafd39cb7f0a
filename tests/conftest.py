import pytest


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session (starting one costs seconds)."""
    import ray

    from syncswitch.runtime.ray_setup import local_init_kwargs

    if not ray.is_initialized():
        ray.init(**local_init_kwargs(16))
    yield ray
    ray.shutdown()
