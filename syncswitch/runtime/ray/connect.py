"""Joining or starting Ray: a local instance by default, a cluster when given an address.

A local instance is locked down (see docs/security.md):
- it binds and advertises 127.0.0.1 only. Ray binds its gRPC servers (GCS, raylet, object
  manager, every worker) to the node's IP address. `ray.init(_node_ip_address="127.0.0.1")`
  alone does not make that loopback: ray.init passes the address through
  `services.resolve_ip_for_localhost`, which replaces a loopback address by
  `get_node_ip_address()`, and that returns the loopback address only when Ray's cluster
  support is off (`ray_constants.ENABLE_RAY_CLUSTER`, off by default only on Windows and
  macOS); on Linux it returns the machine's LAN address, and Ray 2.60 then listened on every
  interface (measured: `::`). So the flag is turned off for the duration of ray.init, and the
  result is checked: the node's IP and every listening socket of the instance's processes.
- token authentication is forced on (RAY_AUTH_MODE=token, Ray >= 2.52), with a fresh random
  token per instance passed to Ray's processes in their environment (readable by this user
  only) unless the user's environment already names one. An environment that turns it off
  is refused.
- its size is checked against this machine before it starts.

A cluster address (a flag or RAY_ADDRESS, never a file) must be `HOST:PORT` or
`ray://HOST:PORT`; it is reached with a timeout first, because ray.init retries an address
nobody answers for many minutes. Joining uses whatever authentication the cluster and the
user's environment agree on (RAY_AUTH_MODE, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, Ray's
token file); nothing here changes it. A cluster bound to loopback (a locked-down one on this
machine, like the test clusters) is joined on loopback: ray.init would otherwise rewrite
127.0.0.1 to the LAN address, where nothing listens (measured: it then waits forever). A
joined cluster is never shut down: `connect` says whether this process started Ray, and only
then does the caller call ray.shutdown.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import secrets
import socket
from collections.abc import Iterator, Mapping

import ray

from syncswitch.cluster_address import ClusterAddress, parse_cluster_address
from syncswitch.errors import ConfigError
from syncswitch.runtime.ray.resources import ClusterView

# Workers mostly sleep (emulated device time) or wait on the server, so on one machine the
# actors are scheduled on logical CPUs, not one physical core each.
_LOCAL_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"}

LOOPBACK = "127.0.0.1"
# Token authentication arrived in Ray 2.52.0.
MIN_RAY_VERSION = (2, 52)
AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
CONNECT_TIMEOUT_S = 10.0
# A local instance's actors are processes: emulated workers sleep, so several share a core,
# but each costs memory (about 0.2 GiB with torch loaded, measured here).
LOCAL_ACTORS_PER_CPU = 32
ACTOR_MEMORY_BYTES = 200 << 20


def connect(address: str | None, min_cpus: int) -> bool:
    """Make sure Ray is up; return True when this call started a local instance (which the
    caller then stops). Joining a cluster returns False: its Ray is not ours to shut down.

    `address` comes from a flag (or RAY_ADDRESS); `min_cpus` is what a local instance needs
    (a cluster's size is checked against the job by resources.plan_resources).
    """
    if ray.is_initialized():
        return False
    resolved = cluster_address(address)
    if resolved is not None:
        join_cluster(resolved)
        return False
    start_local(min_cpus)
    return True


def cluster_address(flag: str | None) -> ClusterAddress | None:
    """The cluster to join, from the flag or RAY_ADDRESS; None: start a local instance."""
    text = flag or os.environ.get("RAY_ADDRESS")
    return parse_cluster_address(text) if text else None


# -- a cluster ---------------------------------------------------------------------------------


def join_cluster(address: ClusterAddress) -> None:
    check_reachable(address)
    kwargs: dict = {"address": address.for_ray, "logging_level": logging.WARNING}
    if address.client or not _loopback_host(address.host):
        ray.init(**kwargs)
        return
    with _loopback_node_ip():
        ray.init(**kwargs, _node_ip_address=LOOPBACK)


def cluster_view(where: str) -> ClusterView:
    """What the connected Ray cluster has: its alive nodes' CPUs and GPUs."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = tuple(float(n.get("Resources", {}).get("GPU", 0.0)) for n in nodes)
    return ClusterView(
        cpus=sum(float(n.get("Resources", {}).get("CPU", 0.0)) for n in nodes),
        gpus=sum(gpus),
        nodes=len(nodes),
        max_node_gpus=max(gpus, default=0.0),
        where=where,
        node_gpus=gpus,
    )


def local_view(min_cpus: int) -> ClusterView:
    """What a local instance will have, known before it starts: as many CPUs as the job
    needs (start_local asks for them) and this machine's CUDA GPUs."""
    import torch

    gpus = float(torch.cuda.device_count()) if torch.cuda.is_available() else 0.0
    where = "this machine"
    if torch.version.cuda is None:
        where += f" (torch {torch.__version__} is built without CUDA)"
    return ClusterView(
        cpus=float(max(os.cpu_count() or 1, min_cpus)),
        gpus=gpus,
        nodes=1,
        max_node_gpus=gpus,
        where=where,
        node_gpus=(gpus,),
    )


def check_reachable(address: ClusterAddress, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Open (and close) a TCP connection to the address, or say in one line why not."""
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout_s):
            pass
    except TimeoutError:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address.for_ray}: no answer within "
            f"{timeout_s:g} s; check --ray-address / RAY_ADDRESS and the network"
        ) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(
            f"cannot reach the Ray cluster at {address.for_ray}: {reason}; check --ray-address "
            "/ RAY_ADDRESS (is the cluster up?)"
        ) from None


# -- a local instance --------------------------------------------------------------------------


def start_local(min_cpus: int) -> None:
    """Start a locked-down local Ray instance for this process (see the module docstring)."""
    require_token_auth_support(ray.__version__)
    require_auth_not_disabled(os.environ)
    check_local_capacity(min_cpus)
    _force_token_auth()
    with _loopback_node_ip():
        ray.init(**local_init_kwargs(min_cpus))
    try:
        verify_local_instance()
    except BaseException:
        ray.shutdown()
        raise


def _force_token_auth() -> None:
    # ray's stub for its compiled _raylet omits these two.
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    os.environ[AUTH_MODE_ENV] = "token"
    if not (os.environ.get(AUTH_TOKEN_ENV) or os.environ.get(AUTH_TOKEN_PATH_ENV)):
        # Ray's own default is a token file in the home directory, created world-readable
        # under a usual umask; a token only in this process tree's environment is not.
        os.environ[AUTH_TOKEN_ENV] = secrets.token_hex(32)
    # Ray caches the mode and the token when it first reads its config: make this process
    # read them again, as Ray itself does when it turns token authentication on.
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def local_init_kwargs(min_cpus: int) -> dict:
    return {
        # Always a new instance of our own: a bare ray.init() would join any cluster that
        # `ray start` left running on this machine (its address is read from a file under
        # /tmp/ray, which anyone on the machine can write). Joining a cluster is explicit.
        "address": "local",
        "num_cpus": max(os.cpu_count() or 1, min_cpus),
        "include_dashboard": False,
        "_node_ip_address": LOOPBACK,  # takes effect only inside _loopback_node_ip()
        "logging_level": logging.WARNING,
        "runtime_env": {"env_vars": _LOCAL_ENV},
    }


@contextlib.contextmanager
def _loopback_node_ip() -> Iterator[None]:
    """Let ray.init keep 127.0.0.1 as the node's IP instead of resolving it to the LAN
    address (see the module docstring); Ray's own flag for this, put back afterwards."""
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def require_token_auth_support(version: str) -> None:
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if numbers < MIN_RAY_VERSION:
        wanted = ".".join(map(str, MIN_RAY_VERSION))
        raise ConfigError(
            f"Ray {version} has no token authentication, so a local Ray instance would accept "
            f"anyone who can reach it; install ray>={wanted}"
        )


def require_auth_not_disabled(environ: Mapping[str, str]) -> None:
    mode = environ.get(AUTH_MODE_ENV)
    if mode is not None and mode.strip().lower() != "token":
        raise ConfigError(
            f"{AUTH_MODE_ENV}={mode[:40]!r} would start the local Ray instance without token "
            f"authentication; unset {AUTH_MODE_ENV} or set it to 'token'"
        )


def verify_local_instance() -> None:
    """The started instance is what start_local asked for, or one ConfigError line."""
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    node_ip = ray.util.get_node_ip_address()
    if node_ip != LOOPBACK:
        raise ConfigError(
            f"the local Ray instance advertises {node_ip}, not {LOOPBACK}; refusing to run on "
            f"it (Ray {ray.__version__} may resolve node addresses differently)"
        )
    if not is_token_auth_enabled():
        raise ConfigError(
            f"the local Ray instance started without token authentication (Ray "
            f"{ray.__version__}); refusing to run on it"
        )
    exposed = [f"{name} on {ip}" for name, ip, _port in listening_sockets() if not _loopback(ip)]
    if exposed:
        raise ConfigError(
            f"the local Ray instance listens beyond loopback ({', '.join(exposed[:4])}); "
            f"refusing to run on it (Ray {ray.__version__})"
        )


def listening_sockets() -> list[tuple[str, str, int]]:
    """(process name, IP, port) of every TCP socket listening in this process and its
    descendants, which is where a local Ray instance's processes live."""
    try:
        import psutil  # Ray depends on it (and ships a copy that `import ray` makes importable)
    except ImportError:
        return []
    me = psutil.Process()
    found = []
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            name = process.name()
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((name, conn.laddr.ip, conn.laddr.port))
    return found


def check_local_capacity(min_cpus: int) -> None:
    """A local instance for `min_cpus` actors must fit this machine's cores and memory."""
    limit, why = local_actor_limit()
    if min_cpus > limit:
        raise ConfigError(
            f"this job needs {min_cpus} Ray actors (one per worker and server, one evaluator, "
            f"for each trial at once); this machine allows at most {limit} ({why})"
        )


def local_actor_limit() -> tuple[int, str]:
    cores = os.cpu_count() or 1
    by_cpu = LOCAL_ACTORS_PER_CPU * cores
    limits = [(by_cpu, f"{LOCAL_ACTORS_PER_CPU} per CPU core x {cores} cores")]
    memory = _physical_memory_bytes()
    if memory:
        limits.append(
            (
                max(1, memory // ACTOR_MEMORY_BYTES),
                f"{memory / (1 << 30):.1f} GiB of memory at about "
                f"{ACTOR_MEMORY_BYTES / (1 << 30):.1f} GiB per actor",
            )
        )
    return min(limits)


def _physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _loopback_host(host: str) -> bool:
    return host.lower() == "localhost" or _loopback(host)


def _loopback(ip: str) -> bool:
    try:
        address = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback
