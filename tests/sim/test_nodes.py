"""Nodes in the cluster model: processes that share cores, NICs and a server's thread."""

from pathlib import Path

import pytest
import yaml

from syncswitch.core.cluster.model import (
    ClusterModel,
    HostCpuModel,
    NodeModel,
    parse_cluster,
    preset,
)
from tests.sim.test_sim_runtime import simulate

# 4 workers, 20 ms steps, nothing else costing time unless a test says so.
_BASE = {
    "compute": {"step_time_ms": 20},
    "network": {"latency_ms": 0},
    "server": {"message_ms": 0, "ns_per_parameter": 0},
}


def cluster_file(tmp_path: Path, name: str, **sections) -> str:
    data = {key: dict(value) for key, value in _BASE.items()}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def seconds_per_update(result) -> float:
    return result.summary["wall_time_s"] / result.summary["updates"]


def test_a_cluster_without_nodes_says_what_it_said_before() -> None:
    described = parse_cluster(preset("default")).describe()
    assert set(described) == {
        "name", "compute", "network", "server", "restart_s", "startup_s", "notes"
    }  # fmt: skip
    assert "reply_ms" not in described["server"]
    shaped = ClusterModel(nodes=NodeModel(cores=2), host_cpu=HostCpuModel(worker_ms=1))
    assert parse_cluster(yaml.safe_load(yaml.safe_dump(shaped.describe()))) == shaped


def test_placement_packs_spreads_or_gives_each_worker_a_node() -> None:
    shape = NodeModel(workers_per_node=4)
    assert shape.worker_nodes(6, "pack") == [0, 0, 0, 0, 1, 1]
    assert shape.worker_nodes(6, "spread") == [0, 1, 0, 1, 0, 1]
    assert shape.worker_nodes(3, "strict-spread") == [0, 1, 2]


def test_more_busy_workers_than_cores_slow_each_other_down(mnist, tmp_path) -> None:
    # Each step needs 10 ms of host CPU, then 20 ms of device time: 30 ms a cycle alone.
    # Eight workers on one node of 2 cores need 80 ms of CPU per cycle: 40 ms on 2 cores.
    host = {"host_cpu": {"worker_ms": 10}}
    free = cluster_file(tmp_path, "free", **host)
    shared = cluster_file(
        tmp_path, "shared", nodes={"workers_per_node": 8, "cores": 2}, **host
    )  # fmt: skip
    job = dict(workers=8, schedule="asp", epochs=2.0)
    alone = simulate(tmp_path, mnist, "alone", cluster=free, **job)
    crowded = simulate(tmp_path, mnist, "crowded", cluster=shared, **job)
    assert seconds_per_update(alone) * 8 == pytest.approx(0.030, rel=0.03)
    assert seconds_per_update(crowded) * 8 == pytest.approx(0.040, rel=0.05)
    # Two workers on the same 2 cores: no one waits.
    pair = simulate(tmp_path, mnist, "pair", cluster=shared, workers=2, schedule="asp", epochs=1.0)
    assert seconds_per_update(pair) * 2 == pytest.approx(0.030, rel=0.03)


def test_placement_decides_who_shares_a_node(mnist, tmp_path) -> None:
    # 8 workers, nodes of 4 with 1 core: packed, 4 share each core (40 ms of CPU a cycle);
    # strict-spread gives each worker a node (30 ms a cycle).
    shape = cluster_file(
        tmp_path, "shape", nodes={"workers_per_node": 4, "cores": 1}, host_cpu={"worker_ms": 10}
    )
    job = dict(workers=8, schedule="asp", epochs=2.0, cluster=shape)
    packed = simulate(tmp_path, mnist, "pack", placement="pack", **job)
    alone = simulate(tmp_path, mnist, "strict", placement="strict-spread", **job)
    assert seconds_per_update(packed) * 8 == pytest.approx(0.040, rel=0.05)
    assert seconds_per_update(alone) * 8 == pytest.approx(0.030, rel=0.03)


def test_a_nodes_nic_is_shared_by_its_workers_transfers(mnist, tmp_path) -> None:
    # 5,210 parameters: 20,840 bytes a message. 16 workers on one node, the server on its
    # own: every push leaves through the workers' NIC, at 0.05 Gbps 300 messages a second
    # (alone, each worker would send one every 20 + 4 x 3.3 ms: 480 a second in all).
    links = {"network": {"worker_bandwidth_gbps": 100, "server_bandwidth_gbps": 100}}
    wide = cluster_file(tmp_path, "wide", nodes={"workers_per_node": 16}, **links)
    narrow = cluster_file(
        tmp_path, "narrow", nodes={"workers_per_node": 16, "nic_gbps": 0.05}, **links
    )
    job = dict(workers=16, schedule="asp", epochs=4.0)
    fast = simulate(tmp_path, mnist, "wide", cluster=wide, **job)
    capped = simulate(tmp_path, mnist, "narrow", cluster=narrow, **job)
    capacity = 0.05e9 / (8 * 4 * 5210)
    assert fast.summary["updates_per_s"] > 1.2 * capacity
    assert capacity * 0.9 <= capped.summary["updates_per_s"] <= capacity * 1.01


def test_a_server_that_applies_after_the_step_and_replies_in_turn(mnist, tmp_path) -> None:
    # Emulated 20 ms steps, a server taking 10 ms a gradient: overlapped, four gradients'
    # 40 ms hide the step; applied only once each step ends, the round is 20 + 40 ms.
    compute = {"compute": {"sends_during_step": True}}
    overlapped = cluster_file(tmp_path, "over", server={"message_ms": 10}, **compute)
    after = cluster_file(
        tmp_path, "after", server={"message_ms": 10, "applies_after_step": True}, **compute
    )
    # Replies of 5 ms each, one after another: the last worker starts 20 ms late.
    replies = cluster_file(tmp_path, "replies", server={"reply_ms": 5})
    job = dict(schedule="bsp", epochs=2.0)
    rounds = {
        name: seconds_per_update(simulate(tmp_path, mnist, name, cluster=path, **job))
        for name, path in (("over", overlapped), ("after", after), ("replies", replies))
    }
    assert rounds["over"] == pytest.approx(0.040, rel=0.02)
    assert rounds["after"] == pytest.approx(0.060, rel=0.02)
    assert rounds["replies"] == pytest.approx(0.040, rel=0.02)


def test_values_through_shared_memory_cost_a_node_s_messages_only_their_latency(
    mnist, tmp_path
) -> None:
    # 20,840-byte messages on 0.01 Gbps links take 16.7 ms each way, more on the server's
    # link shared by 4; through shared memory (a worker and the server on one node, as the
    # Ray data plane passes them there) a round is the step and two latencies: 20 + 2 x 1 ms.
    slow = {"network": {"worker_bandwidth_gbps": 0.01, "server_bandwidth_gbps": 0.01,
                        "latency_ms": 1}}  # fmt: skip
    one_node = {"workers_per_node": 4, "servers_with_workers": True}
    shared = cluster_file(tmp_path, "shm", nodes={**one_node, "shared_memory": True}, **slow)
    socket = cluster_file(tmp_path, "socket", nodes=one_node, **slow)
    apart = cluster_file(tmp_path, "apart", nodes={"workers_per_node": 4, "shared_memory": True},
                         **slow)  # fmt: skip
    job = dict(schedule="bsp", epochs=2.0)
    rounds = {
        name: seconds_per_update(simulate(tmp_path, mnist, name, cluster=path, **job))
        for name, path in (("shm", shared), ("socket", socket), ("apart", apart))
    }
    assert rounds["shm"] == pytest.approx(0.022, rel=0.02)
    # On the links: the server's link carries the round's 4 messages in, then 4 out (a
    # worker's next step overlapping the later replies): at least 5 turns beside the step.
    assert rounds["socket"] > 0.020 + 5 * 0.0166
    assert rounds["apart"] == pytest.approx(rounds["socket"], rel=0.02)  # not on one node


def test_shared_memory_in_a_cluster_file_is_true_or_false() -> None:
    assert parse_cluster({"nodes": {"shared_memory": True}}).nodes.shared_memory
    with pytest.raises(ValueError, match="shared_memory = 'yes' is not allowed"):
        parse_cluster({"nodes": {"shared_memory": "yes"}})
