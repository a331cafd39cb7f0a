"""The emulated link: a message's time on a worker's link, and how result files name it."""

import pytest

from syncswitch.core.cluster.emulation import EmulationConfig, received_at, sent_at
from syncswitch.core.cluster.model import NetworkModel


def test_a_message_takes_the_latency_and_its_bytes_time_as_the_simulator_times_it() -> None:
    link = EmulationConfig(link_gbps=1.0, link_latency_ms=2.0)
    network = NetworkModel(worker_bandwidth_gbps=1.0, latency_ms=2.0)
    for nbytes in (0, 4, 67_600_000):
        assert link.link_s(nbytes) + link.latency_s == pytest.approx(network.worker_s(nbytes))
    assert link.link_s(125_000_000) == pytest.approx(1.0)  # 1 Gbit on the link
    assert sent_at(0.0, [link.link_s(125_000_000)], link.latency_s) == [pytest.approx(1.002)]
    assert EmulationConfig().link_s(10**9) == 0.0


def test_a_link_alone_labels_the_run_emulated_and_only_a_link_adds_its_key() -> None:
    linked = EmulationConfig(link_gbps=10.0).describe()
    assert linked["enabled"] is True
    assert linked["link"]["gbps"] == 10.0
    assert "EMULATED" in linked["link"]["kind"]
    assert linked["kind"].startswith("real compute; only the network")
    assert (
        EmulationConfig(step_time_ms=20, link_gbps=1)
        .describe()["kind"]
        .startswith("emulated device time")
    )
    assert "link" not in EmulationConfig(step_time_ms=20).describe()
    assert EmulationConfig().describe() == {"enabled": False}


@pytest.mark.parametrize(
    ("gbps", "latency_ms", "message"),
    [(-1.0, 0.0, "must be >= 0"), (0.0, 5.0, "needs a link bandwidth")],
)
def test_a_link_that_cannot_be_is_refused(gbps: float, latency_ms: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EmulationConfig(link_gbps=gbps, link_latency_ms=latency_ms)


def test_a_workers_messages_cross_its_link_one_after_another() -> None:
    # Two shards of 0.5 s and 0.25 s each way: sent in shard order, the last leaves the
    # worker's link 0.75 s after the step (not 0.5 s, as if each had a link of its own), and
    # each arrives a latency (0.1 s) after it left; the latency does not hold the link.
    assert sent_at(10.0, [0.5, 0.25], 0.1) == [pytest.approx(10.6), pytest.approx(10.85)]
    assert sent_at(10.0, [0.0, 0.0], 0.0) == [10.0, 10.0]
    # The replies, without servers' links: in turn on the worker's link from their arrival.
    assert received_at(10.0, [None, None], [0.5, 0.25], [0.0, 0.0], 0.0) == 10.75
    assert received_at(10.0, [None, None], [0.5, 0.25], [0.0, 0.0], 0.1) == pytest.approx(10.85)
    # With them, a reply streams through both links: the worker's takes it from when the
    # server's began to carry it (1.0 s of 0.5 s each: 10.5-11.0), in turn after the other.
    assert received_at(10.0, [11.0, None], [0.5, 0.25], [0.5, 0.0], 0.0) == 11.0
    assert received_at(10.0, [11.0, 10.5], [0.5, 0.25], [0.5, 0.5], 0.0) == 11.0
    # A slower worker's link sets the time: 10.0 + 1.0, then the second from 11.0 on.
    assert received_at(10.0, [10.2, 10.1], [1.0, 1.0], [0.1, 0.1], 0.0) == 12.0


def test_a_servers_link_times_bytes_as_the_simulators_server_bandwidth() -> None:
    link = EmulationConfig(server_link_gbps=2.0)
    assert link.server_link_s(250_000_000) == pytest.approx(1.0)  # 2 Gbit at 2 Gbit/s
    assert link.link_s(10**9) == 0.0  # the workers' side not emulated
    network = link.network()
    assert network.server_bandwidth_gbps == 2.0 and network.worker_bandwidth_gbps == 10_000.0
    assert EmulationConfig(link_gbps=1.0).server_link_s(10**9) == 0.0
    described = link.describe()
    assert described["kind"].startswith("real compute; only the network")
    assert "EMULATED" in described["server_link"]["kind"] and "link" not in described
    with pytest.raises(ValueError, match=r"servers' -1\.0 Gbit/s: all must be >= 0"):
        EmulationConfig(server_link_gbps=-1.0)
