"""Staleness-aware ASP end to end on the simulator: the effective learning rate of every
applied gradient in updates.csv, delay compensation over two shards, and a resumed run."""

import json
from pathlib import Path

import numpy as np
import pytest

from syncswitch.config import TrainConfig
from syncswitch.rundir import load_run
from syncswitch.runtime.train import train
from tests.sim.interrupt import InterruptAfter

WORKERS = 4
LR = 0.1
JOB = dict(
    batch_size=16,
    lr=LR,
    momentum=0.0,
    lr_schedule="constant",
    eval_every=0.25,
    progress=False,
    runtime="sim",
    workers=WORKERS,
    schedule="bsp:0.25,asp",
    epochs=1.0,
    seed=3,
)


def simulate(tmp_path: Path, dataset, name: str, **overrides):
    values = {**JOB, "out": str(tmp_path / name), **overrides}
    return train(TrainConfig(**values), dataset=dataset)


def updates(run_dir: str) -> list[tuple[str, int, float]]:
    rows = load_run(run_dir).update_columns(("protocol", "staleness", "lr"))
    return [(protocol, int(tau), float(lr)) for protocol, tau, lr in rows]


def test_updates_csv_shows_each_asp_gradients_effective_lr(mnist, tmp_path) -> None:
    result = simulate(tmp_path, mnist, "inverse", staleness_lr="inverse", staleness_lr_floor=0.5)
    rows = updates(str(result.run_dir))
    asp_lr = LR / WORKERS  # linear scaling: one gradient of the workers'
    for protocol, tau, lr in rows:
        if protocol == "bsp":
            assert lr == pytest.approx(LR)  # BSP rounds untouched
        else:
            factor = 1.0 if tau <= 1 else max(1 / tau, 0.5)
            assert lr == pytest.approx(asp_lr * factor)
    assert any(p == "asp" and tau >= 2 for p, tau, _ in rows)  # the rule had work to do
    rules = result.summary["staleness_rules"]
    assert rules["lr"] == "inverse" and rules["lr_floor"] == 0.5
    assert "handed_out_peak_bytes" not in rules  # no copies without delay compensation


def test_delay_compensation_over_two_shards_changes_the_asp_updates_only(mnist, tmp_path) -> None:
    plain = simulate(tmp_path, mnist, "plain", servers=2)
    dc = simulate(tmp_path, mnist, "dc", servers=2, delay_compensation=2.0)
    assert dc.summary["status"] == "complete"
    assert updates(str(dc.run_dir)) == updates(str(plain.run_dir))  # same lr, same staleness
    assert not np.array_equal(dc.final_weights, plain.final_weights)
    rules = dc.summary["staleness_rules"]
    parameters = dc.final_weights.size
    assert rules["handed_out_worst_case_bytes"] == WORKERS * parameters * 4
    # Up to one copy per worker, and at least two distinct versions held at once in ASP.
    assert 2 * parameters * 4 <= rules["handed_out_peak_bytes"] <= WORKERS * parameters * 4
    assert rules["uncompensated"] == 0
    assert plain.summary["staleness_rules"] is None


def test_a_resumed_run_compensates_from_the_restored_weights(mnist, tmp_path) -> None:
    job = dict(delay_compensation=0.5, checkpoint_every=0.1, epochs=2.0)
    values = {**JOB, **job, "out": str(tmp_path / "cut")}
    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(**values), dataset=mnist, loss_fn=InterruptAfter(120))
    stopped = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert stopped["status"].startswith("failed")
    resumed = train(TrainConfig(**values), dataset=mnist, resume=True)
    summary = resumed.summary
    assert summary["status"] == "complete"
    assert summary["reliability"]["failures"][-1]["kind"] == "resumed"
    # Every worker rejoined on the restored weights: each stale gradient found its copy.
    assert summary["staleness_rules"]["uncompensated"] == 0
