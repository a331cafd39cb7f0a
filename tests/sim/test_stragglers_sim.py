"""Straggler policies' exact decision sequences, pinned on the simulator: its clock is
virtual, so a loaded machine cannot change when a straggler is seen (the Ray tests in
tests/runtime/test_stragglers.py check the same wiring with assertions that hold under load)."""

import pytest

from syncswitch.workloads import load_dataset
from tests.runtime.jobs import read_updates, run
from tests.runtime.test_stragglers import BATCH, EPOCHS, JOB, SLOW, WORKERS, accounted, events


@pytest.fixture(scope="module")
def small_mnist():
    # 320 training samples (40 of 360 carved for validation here, so train() carves none).
    return load_dataset("mnist1d", mnist1d_samples=450).with_validation(1 / 9)


def test_greedy_with_return_resumes_bsp_until_the_planned_work_is_done(small_mnist, tmp_path):
    slow = {**SLOW, "start": 0.1, "duration": 0.2}
    result = run(
        tmp_path,
        small_mnist,
        runtime="sim",
        schedule="bsp:0.5,asp",
        online_policy="greedy",
        greedy_return=True,
        stragglers=[slow],
        divergence_guard=False,
        **JOB,
    )
    summary, online = result.summary, result.summary["online"]
    assert [d["action"] for d in online["decisions"]] == ["switch", "return"]
    assert [(s["to"], s["reason"].split()[0]) for s in summary["switches"]] == [
        ("asp", "greedy+return"),
        ("bsp", "greedy+return"),
        ("asp", "schedule"),
    ]
    planned = online["planned_bsp_samples"]
    assert planned == 0.5 * EPOCHS * 320
    assert planned <= online["bsp_samples"] < planned + WORKERS * BATCH
    assert summary["switches"][-1]["at_fraction"] > 0.5  # the detour postponed the switch
    assert accounted(summary)


def test_elastic_excludes_a_5x_straggler_within_8_of_its_steps_and_readmits_it(
    small_mnist, tmp_path
):
    result = run(
        tmp_path,
        small_mnist,
        runtime="sim",
        schedule="bsp",
        online_policy="elastic",
        stragglers=[SLOW],
        **JOB,
    )
    summary, online = result.summary, result.summary["online"]
    [detected] = events(result.run_dir, "straggler_detected")
    assert detected["worker"] == 3 and detected["false_detection"] is False
    # Under BSP the straggler makes one step per update, and an update is WORKERS x BATCH
    # samples: the delay in its own steps follows from the delay in training progress.
    steps_to_detect = detected["delay_fraction"] * EPOCHS * 320 / (WORKERS * BATCH)
    assert steps_to_detect <= 8, steps_to_detect
    assert [(d["action"], d["worker"]) for d in online["decisions"]] == [
        ("exclude", 3),
        ("readmit", 3),
    ]
    assert online["decisions"][1]["progress"] >= SLOW["start"] + SLOW["duration"]
    assert online["false_detections"] == 0 and accounted(summary)
    rows = read_updates(result.run_dir)
    without_3 = [r for r in rows if float(r["lr"]) < 0.2 - 1e-9]  # 3 of 4 gradients: lr x 3/4
    assert without_3 and all(float(r["lr"]) == pytest.approx(0.2 * 3 / 4) for r in without_3)
