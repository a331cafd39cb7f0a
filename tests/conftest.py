import os
import shutil
import tempfile

import pytest

_CACHE_DIR = tempfile.mkdtemp(prefix="syncswitch-test-cache-")


def pytest_configure(config):
    """The session's generated data (MNIST-1D's arrays) are cached in a directory of its own,
    never the user's: set before any fixture loads a dataset, removed at the end."""
    os.environ["SYNCSWITCH_CACHE_DIR"] = _CACHE_DIR


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def private_registry(request, tmp_path_factory, monkeypatch):
    """Every test's online runs store their decisions in a registry of its own, never in the
    user's (the default schedule is online, and an online CLI run records its share). Tests
    marked own_registry set one up themselves, for a whole module."""
    if request.node.get_closest_marker("own_registry") is not None:
        return
    path = tmp_path_factory.mktemp("registry") / "registry.db"
    monkeypatch.setenv("SYNCSWITCH_REGISTRY", str(path))


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session (starting one costs seconds)."""
    import ray

    from syncswitch.runtime.ray.connect import start_local

    if not ray.is_initialized():
        start_local(16)
    yield ray
    ray.shutdown()
