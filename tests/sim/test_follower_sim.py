"""`--schedule online` chooses what follows BSP from the rounds it measured: a local phase on
the bandwidth-poor preset, ASP (and the very run `bsp:online,asp` is) on a fast network."""

import json
from pathlib import Path

import numpy as np

from syncswitch.config import TrainConfig
from syncswitch.rundir import load_run
from syncswitch.runtime.train import train

JOB = dict(
    batch_size=16,
    lr=0.1,
    epochs=2.0,
    workers=4,
    eval_every=0.25,
    progress=False,
    mnist1d_samples=2000,
    runtime="sim",
    checkpoint_every=0.0,
)


def simulate(tmp_path: Path, dataset, name: str, **overrides):
    values = {**JOB, "out": str(tmp_path / name), **overrides}
    return train(TrainConfig(**values), dataset=dataset)


def online_events(run_dir: Path) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "online_timing"]


def test_online_on_a_slow_network_leaves_bsp_for_a_local_phase_and_says_why(
    mnist, tmp_path
) -> None:
    run = simulate(tmp_path, mnist, "wan", schedule="online", cluster="wan-1g")
    timing = run.summary.online_timing
    assert timing is not None and timing.switched
    assert timing.reason == "message_cost"
    # 20 ms steps against 25 ms each way: a message costs about 2.5 steps, so H = 4 (the
    # grid's H for 1.5 to 8 steps).
    follower = timing.follower
    assert follower is not None and follower["protocol"] == "local-4"
    assert 2.0 < follower["ratio"] < 3.5 and follower["local_steps"] == 4
    assert timing.to_protocol == "local-4"
    # It leaves at the first check past the floor (1/16), once 8 rounds were timed.
    assert 1 / 16 <= timing.at_fraction < 0.2
    by_protocol = run.summary.samples_by_protocol
    # At most the round the switch cut short is applied as its workers' shares (asp).
    assert by_protocol.get("asp", 0) <= 4 * 16 and by_protocol["local"] > by_protocol["bsp"]
    (event,) = online_events(tmp_path / "wan")
    assert event["to"] == "local-4" and event["follower"]["protocol"] == "local-4"
    assert "a message costs" in event["describe"]
    # The chosen phase grows its H as the learning rate falls (QSR, the default for it):
    # fewer deltas came than rounds of 4 steps would have sent.
    traffic = run.summary.traffic
    assert traffic is not None
    local_samples = run.summary.samples_by_protocol["local"]
    assert traffic["messages_by_protocol"]["local"] < local_samples / (16 * 4)


def test_online_on_a_fast_network_is_the_run_bsp_online_asp_is(mnist, tmp_path) -> None:
    chosen = simulate(tmp_path, mnist, "chosen", schedule="online")
    named = simulate(tmp_path, mnist, "named", schedule="bsp:online,asp")
    timing = chosen.summary.online_timing
    assert timing is not None and timing.follower is not None
    assert timing.follower["protocol"] == "asp" and timing.follower["ratio"] < 1
    assert named.summary.online_timing.follower is None
    assert chosen.summary.switches == named.summary.switches
    first, second = load_run(tmp_path / "chosen"), load_run(tmp_path / "named")
    np.testing.assert_array_equal(first.metrics.value, second.metrics.value)
    assert chosen.summary.final_value == named.summary.final_value
