import pytest

from syncswitch.config import TrainConfig
from syncswitch.workloads import load_dataset

SCHEDULES = {"bsp": "bsp", "asp": "asp", "hybrid": "bsp:0.25,asp"}


@pytest.fixture(scope="module")
def three_runs(ray_session, tmp_path_factory):
    """Three real short runs (bsp, asp, bsp:0.25,asp), made once for the module's tests.

    The asp run emulates a 2 ms device time, so the report must label it emulated and the
    others real.
    """
    from syncswitch.runtime.train import train

    dataset = load_dataset("mnist1d", mnist1d_samples=1000)
    root = tmp_path_factory.mktemp("runs")
    dirs = {}
    for name, schedule in SCHEDULES.items():
        config = TrainConfig(
            workers=2,
            schedule=schedule,
            epochs=1.0,
            mnist1d_samples=1000,
            eval_every=0.1,
            progress=False,
            out=str(root / name),
            step_time_ms=2.0 if name == "asp" else 0.0,
        )
        dirs[name] = train(config, dataset=dataset).run_dir
    return dirs
