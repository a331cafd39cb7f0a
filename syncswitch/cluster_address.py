"""A Ray cluster address as the user may give it: checked for form, without importing Ray.

Only a flag (--ray-address) or the RAY_ADDRESS environment variable may name a cluster, as
`HOST:PORT` or `ray://HOST:PORT`, or as Ray's `auto`: the cluster `ray start --head` started
on this machine, whose address Ray writes to `ray_current_cluster` in its temp directory
(RAY_TMPDIR, TMPDIR or /tmp, then `ray/`). That file sits in a directory anyone on the machine
may write to, so it is read only when it is a regular file of this user's (or root's) that
no one else may write, and what it says must itself be a `HOST:PORT`. Anything else is
refused in one line.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from syncswitch.errors import ConfigError
from syncswitch.files import UnsafeFileError, read_regular

AUTO = "auto"
ADDRESS_FILE = "ray_current_cluster"
MAX_ADDRESS_FILE_BYTES = 1024

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")


@dataclass(frozen=True)
class ClusterAddress:
    """A validated Ray cluster address: `host:port`, or `ray://host:port` for Ray Client."""

    host: str
    port: int
    client: bool  # ray:// (Ray Client) rather than the cluster's GCS address

    @property
    def for_ray(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'ray://' if self.client else ''}{host}:{self.port}"


def parse_cluster_address(text: str) -> ClusterAddress:
    """Check an address's form; one ConfigError line naming it and what is allowed."""
    allowed = "HOST:PORT or ray://HOST:PORT (e.g. 10.0.0.5:6379 or ray://head:10001)"
    raw = text.strip()
    if raw.lower() == AUTO:
        return parse_cluster_address(_auto_address())
    client = raw.startswith("ray://")
    rest = raw[len("ray://") :] if client else raw
    match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:/\[\]@?#\s]+):(\d{1,5})", rest)
    if not match:
        raise ConfigError(f"ray_address {_shown(text)} is not allowed; it must be {allowed}")
    host, port = match.group(1), int(match.group(2))
    if host.startswith("["):
        host = host[1:-1]
    if not 1 <= port <= 65535:
        raise ConfigError(f"ray_address {_shown(text)}: port {port} must be in 1..65535")
    if not (_is_ip(host) or _HOST_NAME.fullmatch(host)):
        raise ConfigError(f"ray_address {_shown(text)}: {host!r} is not a host name or IP")
    return ClusterAddress(host, port, client)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _shown(text: str) -> str:
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= 80 else flat[:77] + "...")


def ray_temp_dir() -> Path:
    """Where Ray keeps a node's files, as Ray decides it (ray._common.utils)."""
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp"
    return Path(base) / "ray"


def _auto_address() -> str:
    """The address in Ray's `ray_current_cluster`, read only from a file no one else wrote."""
    path = ray_temp_dir() / ADDRESS_FILE
    started = "no Ray cluster was started on this machine"
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise ConfigError(
            f"--ray-address auto: {started} ({path} is missing; `ray start --head` writes it); "
            "give the head's HOST:PORT instead"
        ) from None
    except OSError as error:
        raise ConfigError(f"--ray-address auto: cannot read {path}: {error.strerror}") from None
    owners = {os.getuid(), 0} if hasattr(os, "getuid") else {info.st_uid}
    if info.st_uid not in owners or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"--ray-address auto: {path} is owned by another user or writable by others, so "
            "it is not trusted to name the cluster; give the head's HOST:PORT instead"
        )
    try:
        text = read_regular(path, MAX_ADDRESS_FILE_BYTES, follow_symlinks=False)
    except (UnsafeFileError, OSError) as error:
        raise ConfigError(f"--ray-address auto: {path} is not trusted: {error}") from None
    address = text.decode("utf-8", errors="replace").strip()
    if not address or address.lower() == AUTO or address.startswith("ray://"):
        raise ConfigError(f"--ray-address auto: {path} names no HOST:PORT ({_shown(address)})")
    return address
