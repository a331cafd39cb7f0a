"""`--ray-address auto` as Ray means it: the cluster `ray start --head` started here, read from
Ray's `ray_current_cluster` only when no one else could have written that file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from syncswitch.cluster_address import ClusterAddress, parse_cluster_address
from syncswitch.errors import ConfigError


@pytest.fixture
def ray_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    return tmp_path / "ray"


def _address_file(ray_dir: Path, text: str, mode: int = 0o644) -> Path:
    path = ray_dir / "ray_current_cluster"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_auto_joins_the_cluster_started_on_this_machine(ray_dir: Path) -> None:
    _address_file(ray_dir, "10.0.0.5:6379\n")
    assert parse_cluster_address("auto") == ClusterAddress("10.0.0.5", 6379, client=False)
    assert parse_cluster_address(" AUTO ").for_ray == "10.0.0.5:6379"


def test_auto_without_a_started_cluster_is_one_line(ray_dir: Path) -> None:
    with pytest.raises(ConfigError, match="no Ray cluster was started on this machine"):
        parse_cluster_address("auto")


@pytest.mark.parametrize("mode", [0o666, 0o664])
def test_an_address_file_others_may_write_is_not_trusted(ray_dir: Path, mode: int) -> None:
    _address_file(ray_dir, "10.0.0.5:6379", mode)
    with pytest.raises(ConfigError, match="writable by others"):
        parse_cluster_address("auto")


def test_a_linked_address_file_is_not_followed(ray_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("10.0.0.5:6379")
    os.symlink(tmp_path / "elsewhere", ray_dir / "ray_current_cluster")
    with pytest.raises(ConfigError, match="not trusted"):
        parse_cluster_address("auto")


@pytest.mark.parametrize("text", ["", "auto", "ray://head:10001", "head", "a b:1"])
def test_the_file_must_name_a_host_and_port(ray_dir: Path, text: str) -> None:
    _address_file(ray_dir, text)
    with pytest.raises(ConfigError, match=r"ray_address|names no HOST:PORT"):
        parse_cluster_address("auto")
