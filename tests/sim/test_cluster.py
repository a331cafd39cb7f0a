"""The cluster model: files and presets, checked with one-line errors naming the value."""

import pytest

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.core.cluster.model import (
    DEFAULT_STEP_TIME_MS,
    ClusterError,
    NetworkModel,
    ServerModel,
    parse_cluster,
)
from syncswitch.errors import ConfigError


def test_a_file_sets_each_section_and_leaves_the_rest_at_the_defaults() -> None:
    model = parse_cluster(
        {"name": "lab", "network": {"latency_ms": 0.2}, "server": {"message_ms": 1}}
    )
    assert model.name == "lab"
    assert model.network.latency_ms == 0.2
    assert model.network.server_bandwidth_gbps == NetworkModel().server_bandwidth_gbps
    assert model.server.message_ms == 1.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"network": {"server_bandwidth_gbps": -1}}, "server_bandwidth_gbps = -1 is not allowed"),
        ({"network": {"worker_bandwidth_gbps": 0}}, "must be a number > 0"),
        ({"network": {"latency": 1}}, "unknown key 'latency' (did you mean 'latency_ms'?)"),
        ({"netwrok": {}}, "unknown key 'netwrok' (did you mean 'network'?)"),
        ({"compute": {"jitter_sigma": "high"}}, "jitter_sigma = 'high' is not allowed"),
        ({"compute": {"speed_factors": [1, -2]}}, "-2 is not allowed"),
        ({"server": {"message_ms": float("nan")}}, "message_ms = nan is not allowed"),
        ({"compute": {"sends_during_step": "yes"}}, "must be true or false"),
        ({"nodes": {"cores": -1}}, "nodes.cores = -1 is not allowed; it must be a whole number"),
        ({"nodes": {"workers_per_node": 0}}, "nodes.workers_per_node = 0 is not allowed"),
        ({"nodes": {"cores": 2.5}}, "nodes.cores = 2.5 is not allowed"),
        ({"nodes": {"core": 2}}, "unknown key 'core' (did you mean 'cores'?)"),
        ({"nodes": {"servers_with_workers": "yes"}}, "servers_with_workers = 'yes' is not"),
        ({"nodes": {"nic_gbps": -1}}, "nodes.nic_gbps = -1 is not allowed"),
        ({"host_cpu": {"worker_ms": -0.5}}, "host_cpu.worker_ms = -0.5 is not allowed"),
        ({"host_cpu": {"driver_ms": "fast"}}, "host_cpu.driver_ms = 'fast' is not allowed"),
        ({"server": {"reply_ms": float("inf")}}, "server.reply_ms = inf is not allowed"),
        ({"nodes": [2]}, "nodes must be a mapping"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_bad_values_are_refused_naming_them(data, message) -> None:
    with pytest.raises(ClusterError, match=None) as caught:
        parse_cluster(data)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_gives_the_node_shape_and_host_cpu_and_old_files_still_load(tmp_path) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text(
        "nodes: {workers_per_node: 16, cores: 2, servers_with_workers: true}\n"
        "host_cpu: {worker_ms: 0.5, compute_ms: 1.6}\n"
    )
    model = TrainConfig(runtime="sim", cluster=str(path)).parsed.sim_cluster()
    assert (model.nodes.workers_per_node, model.nodes.cores) == (16, 2)
    assert model.nodes.servers_with_workers and model.host_cpu.compute_ms == 1.6
    old = tmp_path / "old.yaml"  # a file from before nodes: nothing shared, as then
    old.write_text("network: {latency_ms: 0.2}\nserver: {message_ms: 1}\n")
    model = TrainConfig(runtime="sim", cluster=str(old)).parsed.sim_cluster()
    assert not model.nodes.contended and not model.host_cpu.any
    assert "nodes" not in model.describe() and "host_cpu" not in model.describe()


def test_network_and_server_times_follow_the_sizes() -> None:
    network = NetworkModel(worker_bandwidth_gbps=8, server_bandwidth_gbps=1, latency_ms=1)
    assert network.worker_s(1_000_000) == pytest.approx(0.001 + 0.001)
    assert network.server_s(1_000_000) == pytest.approx(0.008)
    assert ServerModel(message_ms=0.5, ns_per_parameter=2).apply_s(1000) == pytest.approx(
        0.0005 + 2e-6
    )


def test_without_a_cluster_the_emulation_flags_give_the_compute_model() -> None:
    assert (
        TrainConfig(runtime="sim").parsed.sim_cluster().compute.step_time_ms == DEFAULT_STEP_TIME_MS
    )
    model = TrainConfig(
        runtime="sim", workers=2, step_time_ms=5, jitter_sigma=0.1, speed_factors=[1, 2]
    ).parsed.sim_cluster()
    assert (model.compute.step_time_ms, model.compute.jitter_sigma) == (5, 0.1)
    assert model.compute.speed_factors == (1.0, 2.0)


def test_the_paper_preset_documents_what_was_fitted() -> None:
    model = TrainConfig(runtime="sim", cluster="paper-k80").parsed.sim_cluster()
    assert model.name == "paper-k80"
    assert "fitted" in model.notes


def test_compute_given_twice_is_refused(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("compute: {step_time_ms: 10}\n")
    with pytest.raises(ConfigError, match="give it in one place"):
        TrainConfig(runtime="sim", cluster=str(path), step_time_ms=20)


def test_the_emulated_link_is_the_simulated_workers_network(tmp_path) -> None:
    # What a Ray run emulates, the simulator times: the workers' links, latency per message,
    # and no limit on the servers' side (the emulation does not limit it).
    model = TrainConfig(runtime="sim", link_gbps=2.5, link_latency_ms=3).parsed.sim_cluster()
    assert model.network == NetworkModel(
        worker_bandwidth_gbps=2.5, server_bandwidth_gbps=10_000.0, latency_ms=3.0
    )
    assert "--link-gbps" in model.notes["network"]
    path = tmp_path / "c.yaml"
    path.write_text("network: {latency_ms: 1}\n")
    with pytest.raises(ConfigError, match="and so does --link-gbps: give it in one place"):
        TrainConfig(runtime="sim", cluster=str(path), link_gbps=1)


def test_the_emulated_servers_links_are_the_simulated_servers_network() -> None:
    model = TrainConfig(runtime="sim", server_link_gbps=4).parsed.sim_cluster()
    assert model.network == NetworkModel(
        worker_bandwidth_gbps=10_000.0, server_bandwidth_gbps=4.0, latency_ms=0.0
    )
    both = TrainConfig(runtime="sim", link_gbps=1, server_link_gbps=4).parsed.sim_cluster()
    assert (both.network.worker_bandwidth_gbps, both.network.server_bandwidth_gbps) == (1, 4)


def test_an_emulated_link_needs_a_bandwidth_and_no_negative_values() -> None:
    with pytest.raises(ConfigError, match="latency 5 ms needs a link bandwidth"):
        TrainConfig(link_latency_ms=5)
    with pytest.raises(ConfigError, match="link_gbps = -1"):
        TrainConfig(link_gbps=-1)
    with pytest.raises(ConfigError, match="server_link_gbps = -2"):
        TrainConfig(server_link_gbps=-2)


def test_speed_factors_must_match_the_workers(tmp_path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[compute]\nspeed_factors = [1, 2, 3]\n")
    with pytest.raises(ConfigError, match="3 values but workers is 2"):
        TrainConfig(runtime="sim", cluster=str(path), workers=2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runtime", "sim", "--cluster", "paper-k8"], "(did you mean 'paper-k80'?)"),
        (["--runtime", "sim", "--cluster", "missing.yaml"], "does not exist"),
        (["--cluster", "paper-k80"], "applies to --runtime sim"),
        (["--runtime", "simulator"], "choose one of ray, sim"),
    ],
)
def test_the_cli_refuses_bad_clusters_in_one_line(tmp_path, capsys, argv, message) -> None:
    code = main(["train", *argv, "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_bad_cluster_file_is_one_line_from_the_cli(tmp_path, capsys) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("network:\n  server_bandwidth_gbps: -5\n")
    code = main(["train", "--runtime", "sim", "--cluster", str(path), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "server_bandwidth_gbps = -5 is not allowed" in err
    assert str(path) in err and len(err.splitlines()) == 1
