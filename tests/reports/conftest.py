from pathlib import Path

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


SEEDED = {"bsp": "bsp", "hybrid": "bsp:0.25,asp"}


@pytest.fixture(scope="module")
def seeded_sim_runs(tmp_path_factory) -> dict[str, list[Path]]:
    """Two simulated runs (seeds 0 and 1) of each of two schedules of one job: the paper
    figure's groups. No Ray: the simulator runs in this process in well under a second each."""
    from syncswitch.runtime.train import train

    dataset = load_dataset("mnist1d", mnist1d_samples=1000)
    root = tmp_path_factory.mktemp("seeded")
    runs: dict[str, list[Path]] = {}
    for name, schedule in SEEDED.items():
        for seed in (0, 1):
            config = TrainConfig(
                runtime="sim", workers=4, epochs=1.0, mnist1d_samples=1000, eval_every=0.1,
                progress=False, schedule=schedule, seed=seed, out=str(root / f"{name}-{seed}"),
            )  # fmt: skip
            runs.setdefault(name, []).append(train(config, dataset=dataset).run_dir)
    return runs
