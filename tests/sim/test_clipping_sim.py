"""Gradient clipping on the simulator, end to end: one norm across the server shards."""

import numpy as np
import pytest

from tests.sim.test_sim_runtime import accounted, simulate

# Below MNIST-1D's gradient norms at this learning rate: updates are clipped throughout.
CLIP = 0.05
JOB = dict(workers=4, epochs=1.0, seed=5, eval_every=0.5)


def test_clipped_bsp_over_two_shards_is_clipped_bsp_over_one(mnist, tmp_path) -> None:
    one = simulate(tmp_path, mnist, "one", schedule="bsp", servers=1, grad_clip=CLIP, **JOB)
    two = simulate(tmp_path, mnist, "two", schedule="bsp", servers=2, grad_clip=CLIP, **JOB)
    plain = simulate(tmp_path, mnist, "plain", schedule="bsp", servers=2, **JOB)
    scale = np.abs(one.final_weights).max()
    # The same updates, up to the order the norm's squares are summed in.
    assert np.abs(one.final_weights - two.final_weights).max() <= 1e-4 * scale
    assert np.abs(plain.final_weights - two.final_weights).max() > 1e-2 * scale
    accounted(two.summary)


@pytest.mark.parametrize("schedule", ["bsp:0.3,asp", "bsp:0.3,ssp-2", "bsp:0.3,local-4"])
def test_clipped_asynchronous_and_local_phases_over_two_shards_are_over_one(
    mnist, tmp_path, schedule
) -> None:
    # ASP/SSP: each shard scales its slice by the worker's norm; local-H: each inner step.
    one = simulate(tmp_path, mnist, "one", schedule=schedule, servers=1, grad_clip=CLIP, **JOB)
    two = simulate(tmp_path, mnist, "two", schedule=schedule, servers=2, grad_clip=CLIP, **JOB)
    plain = simulate(tmp_path, mnist, "plain", schedule=schedule, servers=2, **JOB)
    scale = np.abs(one.final_weights).max()
    assert np.abs(one.final_weights - two.final_weights).max() <= 1e-4 * scale
    assert np.abs(plain.final_weights - two.final_weights).max() > 1e-2 * scale
    for run in (one, two):
        accounted(run.summary)
        assert "norm_exchange_incomplete_rounds" not in run.summary["traffic"]


@pytest.mark.parametrize(
    "policy", [dict(online_policy="elastic"), dict(online_policy="greedy", greedy_return=True)]
)
def test_straggler_policies_on_two_clipped_shards_lose_nothing(mnist, tmp_path, policy) -> None:
    # Exclusions and policy switches reach the shards between and inside held rounds.
    slow = {"workers": [3], "start": 0.2, "duration": 0.3, "factor": 5.0}
    run = simulate(
        tmp_path,
        mnist,
        schedule="bsp:0.6,asp",
        servers=2,
        grad_clip=CLIP,
        stragglers=[slow],
        epochs=2.0,
        divergence_guard=False,
        **policy,
    )
    assert run.summary["status"] == "complete"
    assert run.summary["online"]["decisions"]  # the policy acted
    accounted(run.summary)
