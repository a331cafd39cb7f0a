"""The timing policy end to end on a real local Ray: search, store, resume, reuse.

Tiny job (2 workers, 1,000 MNIST-1D samples, 2 epochs) so the whole file takes well under a
minute; the accuracies are not meaningful at this size, so the tolerance is set wide enough
that the search's path is fixed: the baseline and 1/2, together (--parallel 2); with
--resolution 1/2 the search stops there and chooses 1/2.
"""

import csv
import json
from pathlib import Path

import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.recurring import resolve_auto_schedule
from syncswitch.registry import Registry, fingerprint
from syncswitch.rundir import read_summary

pytestmark = pytest.mark.ray

JOB_ARGS = [
    "--workers",
    "2",
    "--epochs",
    "2",
    "--mnist1d-samples",
    "1000",
    "--eval-every",
    "0.5",
]
JOB = TrainConfig(workers=2, epochs=2.0, mnist1d_samples=1000, eval_every=0.5)


def test_search_then_auto_reuses_the_decision(ray_session, tmp_path: Path, capsys) -> None:
    registry = tmp_path / "registry.db"
    shared = tmp_path / "search"
    search_dir = shared / fingerprint(JOB)[:12]  # the job's own directory under --search-dir
    search_args = [
        "search",
        *JOB_ARGS,
        "--repeats",
        "1",
        "--tolerance",
        "100",
        "--resolution",
        "1/2",
        "--max-trials",
        "2",
        "--parallel",
        "2",
        "--registry",
        str(registry),
        "--search-dir",
        str(shared),
        "--no-progress",
    ]
    assert main(search_args) == 0
    out = capsys.readouterr().out
    assert "| **1/2 (chosen)** |" in out and "Time against full BSP" in out
    trial_dirs = sorted(p.name for p in search_dir.glob("trial-*"))
    assert trial_dirs == ["trial-0.5-s0", "trial-1-s0"]
    summaries = {
        name: json.loads((search_dir / name / "summary.json").read_text()) for name in trial_dirs
    }
    assert all(s["status"] == "complete" for s in summaries.values())
    assert summaries["trial-0.5-s0"]["schedule"] == "bsp:0.5,asp"
    assert summaries["trial-1-s0"]["schedule_source"]["kind"] == "search"
    # Baseline and 1/2 ran together: their times are flagged as not comparable.
    with (search_dir / "trace.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert max(int(r["concurrent"]) for r in rows) == 2
    assert (search_dir / "accuracy_vs_fraction.png").exists()
    with Registry(registry) as store:
        job = store.job(fingerprint(JOB))
        decision = store.latest_decision(job)
        assert decision.fraction == 0.5 and len(store.trials(job)) == 2

    # Again: every trial is in the registry, so nothing is trained.
    written = {n: (search_dir / n / "summary.json").stat().st_mtime_ns for n in trial_dirs}
    assert main(search_args) == 0
    capsys.readouterr()
    assert {n: (search_dir / n / "summary.json").stat().st_mtime_ns for n in trial_dirs} == (
        written
    )
    with (search_dir / "trace.csv").open() as handle:
        assert {r["source"] for r in csv.DictReader(handle)} == {"registry"}

    # The same job with --schedule auto (and a new seed) runs the stored decision.
    run_dir = tmp_path / "auto-run"
    train_args = ["train", *JOB_ARGS, "--seed", "5", "--no-progress", "--out", str(run_dir)]
    assert main([*train_args, "--schedule", "auto", "--registry", str(registry)]) == 0
    assert f"from stored decision #{decision.id}" in capsys.readouterr().err  # a notice: stderr
    summary = read_summary(run_dir)
    assert summary.schedule == "bsp:0.5,asp" and summary.complete
    source = summary.schedule_source
    assert source["kind"] == "registry" and source["decision_id"] == decision.id
    assert summary.switches[0].to_protocol == "asp"

    # A job that differs in a fingerprint field does not reuse it.
    other, other_source = resolve_auto_schedule(
        TrainConfig(workers=2, epochs=2.0, mnist1d_samples=1000, lr=0.1, schedule="auto"),
        str(registry),
    )
    assert other_source["kind"] == "default" and other.schedule == "online"
