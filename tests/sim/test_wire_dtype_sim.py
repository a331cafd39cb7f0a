"""`--wire-dtype` on the simulator: half the bytes and half the link time per message, the same
messages, and training that still learns."""

from __future__ import annotations

import pytest

from syncswitch.core.cluster.model import ClusterModel, NetworkModel
from syncswitch.runtime.sim.paths import SimPaths
from syncswitch.workloads import build_model
from tests.sim.test_sim_runtime import accounted, simulate


def test_a_16_bit_message_takes_half_the_links_bandwidth_time():
    cluster = ClusterModel(network=NetworkModel(latency_ms=5.0))
    slices = [slice(0, 1_000_000), slice(1_000_000, 1_500_000)]
    full = SimPaths(cluster, slices, workers=2, placement="pack")
    half = SimPaths(cluster, slices, workers=2, placement="pack", bytes_per_value=2)
    for shard in range(2):
        assert half.server_link_s[shard] == full.server_link_s[shard] / 2
        assert half.worker_link_s[shard] == pytest.approx(full.worker_link_s[shard] / 2)
    assert full.latency_s == half.latency_s == 5e-3  # the wire's, whatever the bytes


@pytest.mark.parametrize("schedule", ["bsp:0.5,asp", "bsp:0.25,local-4"])
def test_bfloat16_halves_the_bytes_and_the_link_time_of_every_message(mnist, tmp_path, schedule):
    job = dict(workers=4, schedule=schedule, epochs=1.0, cluster="wan-1g", seed=1)
    full = simulate(tmp_path, mnist, "float32", **job).summary
    half = simulate(tmp_path, mnist, "bfloat16", wire_dtype="bfloat16", **job).summary
    full_traffic, half_traffic = full["traffic"], half["traffic"]
    assert half_traffic["messages_by_protocol"] == full_traffic["messages_by_protocol"]
    for protocol, sent in full_traffic["bytes_by_protocol"].items():
        assert half_traffic["bytes_by_protocol"][protocol] * 2 == sent
    assert half["samples"] == full["samples"]
    # The same steps, each message on the links for less time (cnn1d's are small: the
    # 50 ms latency of wan-1g is most of a message's time, so the run is not 2x shorter).
    assert half["wall_time_s"] < full["wall_time_s"]
    # Rounded values, so not the same run; but one that trains as float32 does.
    assert half["test"] != full["test"]
    assert half["test"]["loss"] == pytest.approx(full["test"]["loss"], abs=0.02)
    assert half["test"]["accuracy"] == pytest.approx(full["test"]["accuracy"], abs=0.05)
    accounted(half)


def test_float16_runs_and_accounts_for_every_message_at_two_bytes_a_value(mnist, tmp_path):
    summary = simulate(
        tmp_path, mnist, workers=2, schedule="bsp", epochs=0.5, wire_dtype="float16"
    ).summary
    accounted(summary)
    parameters = sum(p.numel() for p in build_model("cnn1d", mnist).parameters())
    traffic = summary["traffic"]
    assert traffic["bytes_sent"] == traffic["messages_by_protocol"]["bsp"] * parameters * 2
