"""The best evaluation's weights and early stopping, end to end on the simulator."""

import json

import pytest
import torch

from syncswitch.config import TrainConfig
from syncswitch.errors import RunDirError
from syncswitch.rundir import names
from syncswitch.runtime.train import train
from syncswitch.workloads import prepare_batch
from tests.sim.interrupt import InterruptAfter
from tests.sim.test_sim_runtime import JOB, accounted, rows, simulate

# A learning rate high enough that validation accuracy peaks mid-run (at 0.4 of it).
NOISY = dict(workers=4, epochs=3.0, seed=2, lr=0.3, eval_every=0.1, schedule="bsp")


def validation_accuracy(model: torch.nn.Module, dataset) -> float:
    x, y = prepare_batch(dataset, dataset.x_val, dataset.y_val, train=False)
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def best_row(run_dir) -> dict:
    metrics = rows(run_dir, names.METRICS)
    return max(metrics, key=lambda row: float(row["val_accuracy"]))


def test_the_best_evaluation_s_weights_come_back_beside_the_final_ones(mnist, tmp_path) -> None:
    result = simulate(tmp_path, mnist, **NOISY)
    summary = result.summary
    best = summary["best"]
    row = best_row(result.run_dir)
    assert best["value"] == summary["best_value"] == pytest.approx(float(row["val_accuracy"]))
    assert best["samples"] == int(row["samples"]) and best["version"] == int(row["version"])
    assert summary["test_weights"] == "final" and summary["stopped_early"] is None
    # The model holds exactly the weights evaluated there: it measures the same accuracy.
    model = result.model(best=True)
    assert validation_accuracy(model, mnist) == pytest.approx(best["value"], abs=1e-6)
    final = result.model()
    assert validation_accuracy(final, mnist) == pytest.approx(summary["final_value"], abs=1e-6)
    on_disk = torch.load(result.run_dir / names.BEST_WEIGHTS, weights_only=True)
    assert all(torch.equal(on_disk[k], v) for k, v in model.state_dict().items())


def test_a_resumed_run_keeps_the_best_weights_it_had(mnist, tmp_path) -> None:
    job = dict(**{**JOB, **NOISY}, runtime="sim", checkpoint_every=0.2, out=str(tmp_path / "run"))
    whole = train(TrainConfig(**{**job, "out": str(tmp_path / "whole")}), dataset=mnist)
    with pytest.raises(KeyboardInterrupt):
        # Cut after the checkpoint at 0.6 (the built-in accuracy named beside the loss_fn).
        metrics = {"accuracy": "accuracy"}
        train(TrainConfig(**job), dataset=mnist, loss_fn=InterruptAfter(200), metrics=metrics)
    stopped = json.loads((tmp_path / "run" / names.SUMMARY).read_text())
    assert stopped["best"] == whole.summary["best"]  # found before the interruption
    assert (tmp_path / "run" / names.BEST_WEIGHTS).exists()  # written with the checkpoints
    resumed = train(TrainConfig(**job), dataset=mnist, resume=True)
    assert resumed.summary["reliability"]["failures"][-1]["kind"] == "resumed"
    accounted(resumed.summary)
    assert resumed.summary["best"] == whole.summary["best"]
    # BSP resumes to the same bits, so the best weights are the uninterrupted run's.
    ours, theirs = resumed.model(best=True).state_dict(), whole.model(best=True).state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_early_stopping_ends_the_run_and_says_why(mnist, tmp_path) -> None:
    # No evaluation can beat the first by 2 (accuracy is at most 1): it stops at the third.
    result = simulate(tmp_path, mnist, **NOISY, early_stop_patience=2, early_stop_min_delta=2.0)
    summary = result.summary
    assert summary["status"] == "complete"
    assert summary["stopped_early"].startswith("early stopping: accuracy has not improved")
    assert summary["samples"] < 3 * 1600 / 2
    assert summary["best"]["samples"] <= summary["samples"]
    accounted(summary)
    result.model(best=True)  # present and loadable


def test_a_corrupt_best_weights_file_is_one_line(mnist, tmp_path) -> None:
    result = simulate(tmp_path, mnist, workers=2, epochs=0.5, eval_every=0.5)
    (result.run_dir / names.BEST_WEIGHTS).write_bytes(b"not a weights file")
    with pytest.raises(RunDirError, match="not a weights file") as error:
        result.model(best=True)
    assert "\n" not in str(error.value)
    torch.save({"x": torch.zeros(2)}, result.run_dir / names.BEST_WEIGHTS)
    with pytest.raises(RunDirError, match="do not fit the model") as error:
        result.model(best=True)
    assert "\n" not in str(error.value)


@pytest.mark.ray
def test_early_stopping_and_the_best_weights_on_ray(ray_session, mnist, tmp_path) -> None:
    # Emulated 20 ms steps: the evaluator keeps up, so the stop comes soon after its cause
    # (on Ray evaluations run beside training: the run ends up to their lag later). At 5 ms
    # the whole run took about 2 s and could end before the evaluations that stop it came
    # back (a stop after the workload is done is not one).
    job = dict(**NOISY, servers=2, early_stop_patience=2, early_stop_min_delta=0.02)
    simulated = simulate(tmp_path, mnist, "sim", **job)
    job = {**JOB, **job, "step_time_ms": 20.0, "out": str(tmp_path / "ray")}
    real = train(TrainConfig(**job), dataset=mnist)
    summary = real.summary
    assert summary["runtime"] == "ray" and summary["status"] == "complete"
    assert summary["stopped_early"] == simulated.summary["stopped_early"] is not None
    assert summary["samples"] < 3 * 1600
    accounted(summary)
    model = real.model(best=True)
    assert validation_accuracy(model, mnist) == pytest.approx(summary["best"]["value"], abs=1e-6)
