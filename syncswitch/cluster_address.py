"""A Ray cluster address as the user may give it: checked for form, without importing Ray.

Only a flag (--ray-address) or the RAY_ADDRESS environment variable may name a cluster; Ray's
own "auto" (an address read from a file under /tmp/ray, which anyone on the machine can write)
and anything else that is not `HOST:PORT` or `ray://HOST:PORT` is refused.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from syncswitch.errors import ConfigError

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
