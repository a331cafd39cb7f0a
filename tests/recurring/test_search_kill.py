"""Killing a real search process (SIGKILL) and starting it again reruns no finished trial.

Slow (two processes each starting their own Ray, several trials): excluded from the default
run; `pytest -m slow tests/recurring/test_search_kill.py` runs it.
"""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from syncswitch.config import TrainConfig
from syncswitch.registry import Registry, fingerprint

pytestmark = [pytest.mark.slow, pytest.mark.ray]

JOB_ARGS = ["--workers", "2", "--epochs", "2", "--mnist1d-samples", "1000", "--eval-every", "0.5"]
JOB = TrainConfig(workers=2, epochs=2.0, mnist1d_samples=1000, eval_every=0.5)


def search_command(registry: Path, search_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "syncswitch.cli.main",
        "search",
        *JOB_ARGS,
        "--repeats",
        "1",
        "--tolerance",
        "100",
        "--resolution",
        "1/8",
        "--max-trials",
        "4",
        "--registry",
        str(registry),
        "--search-dir",
        str(search_dir),
        "--no-progress",
    ]


def stored_trials(registry: Path) -> int:
    if not registry.exists():
        return 0
    with Registry(registry) as store:
        job = store.job(fingerprint(JOB))
        return len(store.trials(job)) if job else 0


def test_a_killed_search_resumes_without_rerunning_finished_trials(tmp_path: Path) -> None:
    registry, search_dir = tmp_path / "registry.db", tmp_path / "search"
    # Its own session, so that the kill reaches the Ray processes it started as well.
    proc = subprocess.Popen(
        search_command(registry, search_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while stored_trials(registry) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, "the search ended before it could be killed"
            time.sleep(0.5)
        assert stored_trials(registry) >= 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with Registry(registry) as store:
        finished = {(t.fraction, t.seed) for t in store.trials(store.job(fingerprint(JOB)))}
    assert (1.0, 0) in finished and (0.5, 0) in finished

    done = subprocess.run(
        search_command(registry, search_dir), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with (search_dir / fingerprint(JOB)[:12] / "trace.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    trained_again = {
        (float(r["fraction"]), int(r["seed"])) for r in rows if r["source"] != "registry"
    }
    assert not trained_again & finished
    assert {(float(r["fraction"]), int(r["seed"])) for r in rows} == {
        (1.0, 0),
        (0.5, 0),
        (0.25, 0),
        (0.125, 0),
    }
