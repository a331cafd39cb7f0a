"""The simulator's cluster model: how long workers compute, what the network and servers cost.

A cluster model is declarative (a YAML/TOML file, or a preset's name) and is recorded whole in
every simulated run's summary, so a simulated time always says what cluster it stands for:

    name: my-cluster
    compute:                     # per-worker step time, as the emulation flags give it
      step_time_ms: 20           # mean device time of one step
      jitter_sigma: 0.1          # mean-one lognormal multiplier
      speed_factors: [1, 1, 2]   # optional, one per worker
      sends_during_step: false   # true: the transfer overlaps the step (emulated devices)
    network:
      worker_bandwidth_gbps: 10  # each worker's link, each direction
      server_bandwidth_gbps: 10  # each server's link, each direction, shared by transfers
      latency_ms: 0.05           # one way, per message
    server:
      message_ms: 0.02           # CPU per gradient received, whatever its size
      ns_per_parameter: 1.0      # CPU per parameter of the slice it applies
      reply_ms: 0                # CPU per reply (weights encoded and sent), in turn with applies
      applies_after_step: false  # true: an overlapped gradient is applied once its step ends
    nodes:                       # how the processes share machines (docs/simulator.md)
      workers_per_node: 1        # workers one node holds (--placement packs or spreads them)
      cores: 0                   # each node's cores; 0 = a core for every process (no contention)
      servers_with_workers: false  # servers, evaluator and driver on the first worker node
      nic_gbps: 0                # each node's NIC, each direction, shared; 0 = no NIC limit
      shared_memory: false       # true: a worker and a server on one node pass values in memory
    host_cpu:                    # host CPU beside the device time, on the node's cores
      worker_ms: 0               # a worker per step: framework, (de)serialisation, data plane
      compute_ms: 0              # a worker per step inside its device time (a CPU "device")
      evaluator_ms: 0            # the evaluator per evaluation
      driver_ms: 0               # the driver (controller, run-directory rows) per gradient
    restart_s: 5                 # a crashed or killed worker is back after this long
    startup_s: 0                 # before the first steps: processes starting and warming up

Every key is optional (a default below). Without `--cluster` the emulation flags give the
compute model; stragglers come from `--stragglers`.

How the simulator uses it (runtime/sim/paths.py): a message of B bytes takes up its worker's
link for B / worker bandwidth and its server's for B / server bandwidth, each one transfer at
a time (fair sharing's throughput: a busy server becomes the bottleneck as workers grow),
streams through both and arrives a latency later. Servers apply and reply in arrival order.

Nodes (optional; left out, every process has a core and a link of its own): the workers are
placed on nodes of `workers_per_node` as `--placement` places them on Ray; every role's host
CPU (a worker's per step, a server's per gradient, the evaluator's, the driver's) queues for
its node's `cores`; transfers between nodes take each node's NIC too. With `shared_memory`, a
worker and a server on one node pass values through memory, as the Ray data plane does
(runtime/dataplane/shared.py): a message takes the latency alone, and what the values cost is
the server's CPU (its per-gradient and per-reply CPU, which calibration measures).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from syncswitch.keys import did_you_mean, unknown_key_problem

# The network when nothing else is said: a 10 GbE data-centre network (a common cloud VM
# link) with a one-way latency of 50 us, and a server that spends 20 us per message plus
# 1 ns per parameter applied (a vectorised SGD step reads and writes ~16 bytes per parameter).
DEFAULT_BANDWIDTH_GBPS = 10.0
DEFAULT_LATENCY_MS = 0.05
DEFAULT_MESSAGE_MS = 0.02
DEFAULT_NS_PER_PARAMETER = 1.0
DEFAULT_RESTART_S = 5.0
# The compute model when neither --cluster nor --step-time-ms gives one: the emulated step
# time the project's reference benchmarks use.
DEFAULT_STEP_TIME_MS = 20.0

MAX_BANDWIDTH_GBPS = 10_000.0
MAX_MS = 60_000.0
MAX_FACTOR = 1000.0
MAX_SIGMA = 3.0
BYTES_PER_PARAMETER = 4  # float32 gradients and weights


class ClusterError(ValueError):
    """A cluster model that cannot describe a cluster (the message names the value)."""


@dataclass(frozen=True)
class ComputeModel:
    step_time_ms: float = DEFAULT_STEP_TIME_MS
    jitter_sigma: float = 0.0
    speed_factors: tuple[float, ...] = ()
    # False (a real device): a gradient leaves when its step ends. True: it leaves as soon as
    # it is computed and counts as arrived when the step's time is up, so its transfer and
    # server handling overlap the step; that is how a Ray worker with an emulated device
    # time (--step-time-ms) behaves, so a cluster calibrated on such a run says true.
    sends_during_step: bool = False


@dataclass(frozen=True)
class NetworkModel:
    worker_bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS
    server_bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS
    latency_ms: float = DEFAULT_LATENCY_MS

    def worker_s(self, nbytes: int) -> float:
        """A message's time on a worker's own link, latency included."""
        return self.latency_ms / 1e3 + self.worker_link_s(nbytes)

    def worker_link_s(self, nbytes: int) -> float:
        """How long a message takes up a worker's link (its latency apart)."""
        return nbytes * 8 / (self.worker_bandwidth_gbps * 1e9)

    def server_s(self, nbytes: int) -> float:
        """A message's time on a server's link (the part transfers queue for)."""
        return nbytes * 8 / (self.server_bandwidth_gbps * 1e9)


@dataclass(frozen=True)
class ServerModel:
    message_ms: float = DEFAULT_MESSAGE_MS
    ns_per_parameter: float = DEFAULT_NS_PER_PARAMETER
    # CPU per reply: the weights encoded and written to the worker's connection, one reply
    # after another on the same thread as the applies (a BSP barrier releases n at once).
    reply_ms: float = 0.0
    # With `sends_during_step`: False, the server applies the gradient while the step goes on
    # (its handling overlaps the step); True, the gradient is held until its step ends and
    # applied then, as the Ray data plane does (only the transfer overlaps the step).
    applies_after_step: bool = False

    def apply_s(self, parameters: int) -> float:
        """Server CPU to receive and apply one gradient of `parameters` values."""
        return self.message_ms / 1e3 + parameters * self.ns_per_parameter / 1e9


@dataclass(frozen=True)
class NodeModel:
    """How the job's processes share machines. The defaults are a node per worker with a core
    for every process and no NIC limit: nothing is shared, as before nodes were modelled."""

    workers_per_node: int = 1
    cores: int = 0  # 0: as many cores as processes, so none ever waits for one
    # True: the servers, the evaluator and the driver run on the first worker node (one
    # machine, or Ray's pack placement of every bundle); False: on nodes of their own.
    servers_with_workers: bool = False
    nic_gbps: float = 0.0  # each node's NIC, each direction; 0: only the links limit
    # True: values between a worker and a server of one node go through shared memory, not
    # over the links (the Ray data plane's default there); only the header's latency is left.
    shared_memory: bool = False

    @property
    def contended(self) -> bool:
        return self.cores > 0

    def nic_s(self, nbytes: int) -> float:
        """A message's time on a node's NIC (what its workers' transfers queue for)."""
        return nbytes * 8 / (self.nic_gbps * 1e9) if self.nic_gbps > 0 else 0.0

    def worker_nodes(self, workers: int, placement: str) -> list[int]:
        """The node each worker runs on, as Ray places a placement group's bundles: pack
        fills a node before the next, spread deals them round the fewest nodes that hold
        them, strict-spread gives each its own."""
        per_node = max(1, self.workers_per_node)
        if placement == "strict-spread":
            return list(range(workers))
        nodes = -(-workers // per_node)
        if placement == "spread":
            return [w % nodes for w in range(workers)]
        return [w // per_node for w in range(workers)]


@dataclass(frozen=True)
class HostCpuModel:
    """Host CPU (milliseconds of one core) each role spends beside the device's time; it
    queues for its node's cores when `nodes.cores` limits them."""

    worker_ms: float = 0.0  # per step, before the device's part: framework, data plane
    compute_ms: float = 0.0  # per step, inside the device time (a host "device", emulation)
    evaluator_ms: float = 0.0  # per evaluation of the weights
    driver_ms: float = 0.0  # per gradient: the controller's drain and the run's rows

    @property
    def any(self) -> bool:
        return any((self.worker_ms, self.compute_ms, self.evaluator_ms, self.driver_ms))


@dataclass(frozen=True)
class ClusterModel:
    name: str = "default"
    compute: ComputeModel = field(default_factory=ComputeModel)
    network: NetworkModel = field(default_factory=NetworkModel)
    server: ServerModel = field(default_factory=ServerModel)
    nodes: NodeModel = field(default_factory=NodeModel)
    host_cpu: HostCpuModel = field(default_factory=HostCpuModel)
    restart_s: float = DEFAULT_RESTART_S
    # Run seconds before the workers' first steps: on a real system, processes starting and
    # warming up (imports, first allocations, first transfers), which a run's wall time counts.
    startup_s: float = 0.0
    # Where each number comes from (a preset's sources, a calibration's fit); free text.
    notes: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        described = asdict(self)
        described["compute"]["speed_factors"] = list(self.compute.speed_factors)
        described["notes"] = dict(self.notes)
        # What a model without nodes said before they existed, so its summaries and its
        # jobs' fingerprints stay as they were.
        for key, default in (
            ("nodes", NodeModel()),
            ("host_cpu", HostCpuModel()),
        ):
            if getattr(self, key) == default:
                del described[key]
        for key in ("applies_after_step", "reply_ms"):
            if not described["server"][key]:
                del described["server"][key]
        return described

    def with_compute(self, compute: ComputeModel) -> ClusterModel:
        return replace(self, compute=compute)


_SECTIONS: dict[str, type] = {
    "compute": ComputeModel,
    "network": NetworkModel,
    "server": ServerModel,
    "nodes": NodeModel,
    "host_cpu": HostCpuModel,
}
_FLAGS = ("sends_during_step", "applies_after_step", "servers_with_workers", "shared_memory")
# (lowest, highest) per whole-number key.
_COUNTS: dict[str, tuple[int, int]] = {
    "workers_per_node": (1, 1 << 20),
    "cores": (0, 1 << 16),
}
_TOP_KEYS = ("name", *_SECTIONS, "restart_s", "startup_s", "notes")
_NOTE_VALUES = (str, int, float, bool, type(None))
MAX_NAME_CHARS = 200  # a cluster's name: a label for tables and figures
# (lowest allowed, whether the lowest is allowed, highest) per numeric key.
_BOUNDS: dict[str, tuple[float, bool, float]] = {
    "step_time_ms": (0.0, False, MAX_MS),
    "jitter_sigma": (0.0, True, MAX_SIGMA),
    "worker_bandwidth_gbps": (0.0, False, MAX_BANDWIDTH_GBPS),
    "server_bandwidth_gbps": (0.0, False, MAX_BANDWIDTH_GBPS),
    "latency_ms": (0.0, True, MAX_MS),
    "message_ms": (0.0, True, MAX_MS),
    "ns_per_parameter": (0.0, True, 1e6),
    "restart_s": (0.0, True, 3600.0),
    "startup_s": (0.0, True, 3600.0),
    "nic_gbps": (0.0, True, MAX_BANDWIDTH_GBPS),
    "reply_ms": (0.0, True, MAX_MS),
    "worker_ms": (0.0, True, MAX_MS),
    "compute_ms": (0.0, True, MAX_MS),
    "evaluator_ms": (0.0, True, MAX_MS),
    "driver_ms": (0.0, True, MAX_MS),
}


def parse_cluster(data: object, where: str = "cluster") -> ClusterModel:
    """A ClusterModel from a file's contents; every problem is one ClusterError line."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ClusterError(
            f"{where}: expected a mapping with keys {', '.join(_TOP_KEYS)}, "
            f"got {type(data).__name__}"
        )
    _refuse_unknown(data, _TOP_KEYS, where)
    sections: dict[str, Any] = {}
    for section, model in _SECTIONS.items():
        values = data.get(section) or {}
        if not isinstance(values, Mapping):
            raise ClusterError(f"{where}: {section} must be a mapping, got {values!r}")
        allowed = tuple(f.name for f in fields(model))
        _refuse_unknown(values, allowed, f"{where}: {section}")
        checked: dict[str, Any] = {
            key: _checked_count(f"{where}: {section}.{key}", key, value)
            if key in _COUNTS
            else _checked_number(f"{where}: {section}.{key}", key, value)
            for key, value in values.items()
            if key not in ("speed_factors", *_FLAGS)
        }
        for key in _FLAGS:
            if key not in values:
                continue
            flag = values[key]
            if not isinstance(flag, bool):
                raise ClusterError(
                    f"{where}: {section}.{key} = {flag!r} is not allowed; it must be true or false"
                )
            checked[key] = flag
        if "speed_factors" in values:
            checked["speed_factors"] = _checked_factors(
                f"{where}: {section}.speed_factors", values["speed_factors"]
            )
        sections[section] = model(**checked)
    name = data.get("name", "custom")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise ClusterError(f"{where}: name must be a short text, got {name!r}")
    notes = data.get("notes") or {}
    if not isinstance(notes, Mapping):
        raise ClusterError(f"{where}: notes must be a mapping of text, got {notes!r}")
    for key, value in notes.items():
        # Written to config.json and summary.json as they are: YAML's dates (an unquoted
        # 2024-01-01) and nested values are not JSON's.
        if not isinstance(key, str) or not isinstance(value, _NOTE_VALUES):
            raise ClusterError(
                f"{where}: notes must map text to text or a number, got {str(key)[:40]!r}: "
                f"{str(value)[:40]!r} (quote a date)"
            )
    times: dict[str, Any] = {
        key: _checked_number(f"{where}: {key}", key, data[key])
        for key in ("restart_s", "startup_s")
        if key in data
    }
    return ClusterModel(name=name, notes=dict(notes), **times, **sections)


def _refuse_unknown(values: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    problem = unknown_key_problem(values, allowed)
    if problem:
        raise ClusterError(f"{where}: {problem}")


def _checked_number(where: str, key: str, value: object) -> float:
    low, low_allowed, high = _BOUNDS[key]
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > low or (low_allowed and value == low))
        and value <= high
    ):
        return float(value)
    lowest = f">= {low:g}" if low_allowed else f"> {low:g}"
    raise ClusterError(
        f"{where} = {value!r} is not allowed; it must be a number {lowest} and <= {high:g}"
    )


def _checked_count(where: str, key: str, value: object) -> int:
    low, high = _COUNTS[key]
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    raise ClusterError(
        f"{where} = {value!r} is not allowed; it must be a whole number in {low}..{high}"
    )


def _checked_factors(where: str, value: object) -> tuple[float, ...]:
    if not isinstance(value, list | tuple):
        raise ClusterError(f"{where}: expected a list of numbers (empty: all 1), got {value!r}")
    factors = []
    for factor in value:
        ok = isinstance(factor, int | float) and not isinstance(factor, bool)
        if not (ok and math.isfinite(factor) and 0 < factor <= MAX_FACTOR):
            raise ClusterError(
                f"{where}: {factor!r} is not allowed; each factor must be > 0 and <= {MAX_FACTOR:g}"
            )
        factors.append(float(factor))
    return tuple(factors)


# -- presets ---------------------------------------------------------------------------------

# The Sync-Switch paper's cluster (MISSION.md): ResNet-32 on CIFAR-10, per-worker batch 128,
# 8 workers with one NVIDIA K80 each and TensorFlow parameter servers on Google Cloud. Each
# number says where it comes from: a documented platform limit, or our estimate (marked so).
# None was fitted to the paper's training times, so the BSP/ASP time ratio the simulator
# predicts with it is a prediction, not a reproduction (docs/simulator.md).
PAPER_K80 = {
    "name": "paper-k80",
    "compute": {
        # Estimate: ResNet-32 (0.46M parameters, ~70 MFLOPs per 32x32 image forward) trains
        # at ~1,100 images/s on one K80 die (~4 TFLOPS peak, ~20% used) -> 128 / 1,100 s.
        "step_time_ms": 116.0,
        # Estimate: a dedicated GPU's step-to-step variation is a few percent.
        "jitter_sigma": 0.05,
    },
    "network": {
        # Google Cloud's documented egress cap for n1 VMs: 2 Gbps per vCPU, at most 16 Gbps.
        # Estimate of the VM sizes: workers with 4 vCPUs (8 Gbps), servers with 8 (16 Gbps).
        "worker_bandwidth_gbps": 8.0,
        "server_bandwidth_gbps": 16.0,
        # Estimate: ~0.1 ms one way within a zone, plus ~0.4 ms of gRPC handling per message.
        "latency_ms": 0.5,
    },
    "server": {
        # Estimate: ~0.2 ms of TensorFlow RPC handling per gradient, and a memory-bound SGD
        # apply at ~1 ns per parameter on one core.
        "message_ms": 0.2,
        "ns_per_parameter": 1.0,
    },
    # The paper's shape: one K80 VM per worker, parameter servers on VMs of their own; a VM's
    # egress cap is its worker link above (so no separate NIC limit), and host CPU is left
    # out (the K80 step dominates; not measured).
    "nodes": {"workers_per_node": 1, "servers_with_workers": False},
    # Estimate: a restarted TensorFlow worker process rejoins in ~30 s (the paper's whole-
    # cluster restart at a switch idled 150-270 s).
    "restart_s": 30.0,
    "notes": {
        "setting": "Sync-Switch paper, ResNet-32 / CIFAR-10 / 8 x K80, batch 128 per worker",
        "fitted": "nothing; sources and estimates are commented in core/cluster/model.py",
    },
}

# A bandwidth-poor cluster (issue 22, docs/local-updates.md): workers spread over zones or
# regions, each behind a 1 Gbps link, the servers in one place. Compute is left to
# --step-time-ms (20 ms by default), as for `default`.
WAN_1G = {
    "name": "wan-1g",
    "network": {
        # Estimate: 1 Gbps per worker, the documented egress of a small cloud VM (Google
        # Cloud's e2-small and e2-medium: "up to 1 Gbps"; AWS t3.small: "up to 5 Gbps"
        # burst, far less sustained) or a share of a cross-site link.
        "worker_bandwidth_gbps": 1.0,
        # Estimate: the servers on a 10 Gbps VM (Google Cloud: 2 Gbps per vCPU, 8 vCPUs
        # would allow 16) with the same reach as the workers.
        "server_bandwidth_gbps": 10.0,
        # Estimate: 25 ms one way (~50 ms round trip), what the clouds' published
        # inter-region latency tables give for regions ~1,500-2,500 km apart (e.g. Google
        # Cloud us-east1 to us-central1, ~30-35 ms round trip; AWS us-east-1 to us-east-2
        # ~15 ms, to us-west-2 ~65 ms).
        "latency_ms": 25.0,
    },
    # A VM per worker (its egress is the worker link), the servers on a VM of their own.
    "nodes": {"workers_per_node": 1, "servers_with_workers": False},
    "notes": {
        "setting": "bandwidth-poor: 1 Gbps per worker, 25 ms one way (workers across zones)",
        "fitted": "nothing; sources and estimates are commented in core/cluster/model.py",
    },
}

PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "name": "default",
        # A node per worker, servers on their own, every process with a core of its own.
        "nodes": {"workers_per_node": 1, "cores": 0, "servers_with_workers": False},
        "notes": {"network": "documented defaults (10 GbE)"},
    },
    "paper-k80": PAPER_K80,
    "wan-1g": WAN_1G,
}


def preset(name: str) -> dict[str, Any]:
    """A preset's contents (to parse, or to write out as a starting file)."""
    if name not in PRESETS:
        hint = did_you_mean(name, PRESETS)
        raise ClusterError(
            f"cluster {name!r} is neither a preset{hint} nor a .yaml/.yml/.toml file; presets "
            f"are {', '.join(PRESETS)}"
        )
    return PRESETS[name]
