"""Ray locked down: a local instance on 127.0.0.1 only, with token authentication forced on;
a cluster address checked for form and reached with a timeout (docs/security.md)."""

import ipaddress
import socket
import time

import pytest

from syncswitch.config import make_config
from syncswitch.errors import ConfigError
from tests.security.helpers import assert_one_line_exit_2, one_line_error, run_cli

TINY_RUN = ["--workers", "1", "--epochs", "0.05", "--mnist1d-samples", "200", "--no-progress"]


def listening_addresses(root_pid: int) -> list[tuple[str, str, int]]:
    """(process name, IP, port) of each listening TCP socket in `root_pid`'s process tree."""
    import psutil  # Ray's own copy, importable once ray is imported

    root = psutil.Process(root_pid)
    found = []
    for process in [root, *root.children(recursive=True)]:
        try:
            name = process.name()
            connections = process.net_connections(kind="inet")
        except psutil.Error:
            continue
        found += [
            (name, c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN
        ]
    return found


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


@pytest.mark.ray
def test_a_local_run_listens_and_advertises_on_loopback_only(ray_session, tmp_path):
    import os

    from syncswitch.runtime.train import train

    config = make_config(
        {
            "workers": 2,
            "epochs": 0.2,
            "mnist1d_samples": 200,
            "progress": False,
            "out": str(tmp_path / "run"),
        }
    )
    result = train(config)  # starts its servers, workers and evaluator on the session's Ray
    assert result.summary["status"] == "complete"
    sockets = listening_addresses(os.getpid())
    names = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets
    assert all(is_loopback(ip) for _, ip, _ in sockets), sockets
    assert ray_session.util.get_node_ip_address() == "127.0.0.1"
    gcs_host = ray_session.get_runtime_context().gcs_address.rsplit(":", 1)[0]
    assert gcs_host == "127.0.0.1"


@pytest.mark.ray
def test_a_local_instance_runs_with_token_authentication(ray_session):
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    assert is_token_auth_enabled()


def test_an_environment_turning_authentication_off_is_refused_before_ray_starts(tmp_path):
    proc = run_cli(
        ["train", *TINY_RUN, "--out", str(tmp_path / "run")],
        env={"RAY_AUTH_MODE": "disabled"},
    )
    err = assert_one_line_exit_2(proc)
    assert "RAY_AUTH_MODE='disabled'" in err and "token" in err
    from syncswitch.runtime.ray.connect import require_auth_not_disabled

    with pytest.raises(ConfigError, match="without token"):
        require_auth_not_disabled({"RAY_AUTH_MODE": "off"})
    require_auth_not_disabled({"RAY_AUTH_MODE": "token"})
    require_auth_not_disabled({})


def test_a_ray_version_without_token_authentication_is_refused():
    from syncswitch.runtime.ray.connect import require_token_auth_support

    with pytest.raises(ConfigError, match=r"no token authentication.*ray>=2\.52"):
        require_token_auth_support("2.40.0")
    require_token_auth_support("2.52.0")
    require_token_auth_support("2.60.0")


def test_an_address_nobody_answers_is_refused_in_seconds(tmp_path):
    with socket.socket() as probe:  # a loopback port that nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    proc = run_cli(
        ["train", *TINY_RUN, "--out", str(tmp_path / "run"), "--ray-address", f"127.0.0.1:{port}"],
        timeout_s=60,
    )
    elapsed_s = time.monotonic() - started
    err = assert_one_line_exit_2(proc)
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in err
    assert elapsed_s < 30  # Python and torch start-up; the refusal itself takes milliseconds


@pytest.mark.parametrize(
    "address", ["local", "head", "head:0", "http://head:80", "user:pw@head:1", "a b:1"]
)
def test_a_malformed_cluster_address_is_one_line(capsys, address):
    err = one_line_error(capsys, ["train", "--ray-address", address])
    assert "ray_address" in err and ("HOST:PORT" in err or "port" in err or "host" in err)


def test_a_config_file_cannot_choose_the_cluster(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("workers: 2\nray_address: ray://attacker.example:10001\n")
    err = one_line_error(capsys, ["train", "--config", str(job)])
    assert "ray_address" in err and "--ray-address" in err and "never from a file" in err


def test_a_local_instance_is_sized_to_this_machine():
    from syncswitch.runtime.ray.connect import check_local_capacity

    with pytest.raises(ConfigError, match="this machine allows at most"):
        check_local_capacity(10**6)
    check_local_capacity(4)
