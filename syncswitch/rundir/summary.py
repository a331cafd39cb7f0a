"""summary.json as a typed record: one attribute per key, its (de)serialisation beside it.

Its switches and gradient counts are the synchronizer's own records (`Switch`, `Accounting`),
from the torch-free leaf `syncswitch.records`.

`Summary.to_plain()` gives the dict that is written (same keys, same order as ever);
`Summary.from_plain()` checks what it reads (types, finiteness, ranges) and refuses a bad
file in one `RunDirError` line naming the file, the field and what is allowed. Keys that
runs of earlier versions did not write (runtime, host_time_s, schedule_source,
samples_by_protocol, cluster, online, online_timing, reliability, placement, precision) read
as their defaults, so old run directories still read; a summary from before validation splits
(final_accuracy, best_accuracy, final_test_loss, measured on the test set) reads as a run
judged by test accuracy (`records.metric.LEGACY`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from syncswitch.records import Accounting, Fields, Switch
from syncswitch.records.metric import LEGACY, TEST, VALIDATION, MetricSpec
from syncswitch.records.switch import rule_name
from syncswitch.rundir import names

RUNTIMES = ("ray", "sim")
# core/sync/precision.py's values, spelt here so that reading a summary needs no torch.
PRECISIONS = ("32", "bf16-mixed")
# The fields of the short, machine-readable summary (`syncswitch train --json`).
_HEADLINE = {"headline": True}
COMPLETE = "complete"
RUNNING = "running"


# summary.json's "gradients": the synchronizer's exactly-once accounting, the one record.


@dataclass(frozen=True)
class Reliability:
    """Checkpoints, failures, rollbacks and every decision but the straggler policy's."""

    checkpoints: int
    failures: list[dict[str, Any]]
    rollbacks: int
    pinned_protocol: str | None = None
    lr_scale: float = 1.0
    guard_initial_loss: float | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    faults_injected: list[dict[str, Any]] = field(default_factory=list)

    def to_plain(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_plain(cls, data: Any, where: str) -> Reliability:
        read = Fields(data, where)
        return cls(
            checkpoints=read.integer("checkpoints"),
            failures=read.objects("failures"),
            rollbacks=read.integer("rollbacks"),
            pinned_protocol=read.optional_text("pinned_protocol", None),
            lr_scale=read.number("lr_scale", 1.0, low=0.0),
            guard_initial_loss=read.number("guard_initial_loss", None, optional=True, finite=False),
            decisions=read.objects("decisions", []),
            faults_injected=read.objects("faults_injected", []),
        )


@dataclass(frozen=True)
class OnlineTimingSummary:
    """Where an online phase ended and why: the rule, its bounds, the decision and the signal
    values at that moment (`switched` False while the run has not decided yet)."""

    rule: str
    threshold: float
    floor: float
    ceiling: float
    switched: bool = False
    at_fraction: float | None = None  # where BSP ended (the shards' switch)
    decided_at: float | None = None  # progress when the controller decided (a drain later)
    at_samples: int | None = None
    time_s: float | None = None
    to_protocol: str | None = None
    reason: str | None = None  # "signal" (the rule fired) or "ceiling"
    describe: str = ""  # the decision in one line, as events.jsonl and the terminal say it
    values: dict[str, float | None] = field(default_factory=dict)  # None: not finite
    checks: int = 0  # times the rule was asked
    # `--schedule online`: the phase chosen to follow BSP and what it was chosen from
    # (FollowerChoice.to_plain(), core/timing/follower.py); None where the schedule names it.
    follower: dict[str, Any] | None = None

    def to_plain(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_plain(cls, data: Any, where: str) -> OnlineTimingSummary:
        read = Fields(data, where)
        values = read.mapping("values", {})
        if not all(v is None or (_is_finite(v)) for v in values.values()):
            raise read.refuse("values", "an object of finite numbers or nulls")
        return cls(
            rule=rule_name(read.text("rule")),
            threshold=read.number("threshold", low=0.0),
            floor=read.number("floor", low=0.0, high=1.0),
            ceiling=read.number("ceiling", low=0.0, high=1.0),
            switched=bool(read.data.get("switched", False)),
            at_fraction=read.number("at_fraction", None, low=0.0, high=1.0, optional=True),
            decided_at=read.number("decided_at", None, low=0.0, high=1.0, optional=True),
            at_samples=read.optional_integer("at_samples", None),
            time_s=read.number("time_s", None, low=0.0, optional=True),
            to_protocol=read.optional_text("to_protocol", None),
            reason=read.optional_text("reason", None),
            describe=read.text("describe", ""),
            values=values,
            checks=read.integer("checks", 0),
            follower=read.mapping("follower", None, optional=True),
        )


def _is_finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, kw_only=True)
class Summary:
    """summary.json: what the run did so far (`status` says whether it is over).

    Attribute order is the file's key order. On the simulator `wall_time_s` is simulated
    seconds; `host_time_s` is always the real seconds the process ran the job for.
    """

    status: str = field(metadata=_HEADLINE)  # "running", "complete" or "failed: <error>"
    # What the run is judged by: the primary metric, its direction and the split it is read
    # on (validation; the test set only for runs from before validation splits).
    metric: MetricSpec = field(default=MetricSpec(), metadata=_HEADLINE)
    final_value: float | None = field(metadata=_HEADLINE)  # the metric at the last evaluation
    best_value: float | None = field(metadata=_HEADLINE)  # the best of its evaluations
    # Every measure (metric name -> value, the loss included; NaN or infinity when the run
    # diverged) of the last evaluation on validation, and of the final weights on the test
    # split (measured once, at the end; it never drives a decision).
    validation: dict[str, float] | None = None
    test: dict[str, float] | None = None
    # The best evaluation (value, samples, version, fraction; its weights in best_weights.pt),
    # which weights `test` was measured on ("final"), and why early stopping ended the
    # workload (None: it ran to its end). All None in runs from before best weights.
    best: dict[str, Any] | None = None
    test_weights: str | None = None
    stopped_early: str | None = None
    runtime: str = "ray"  # runs from before the simulator name none: they ran on Ray
    wall_time_s: float = field(metadata=_HEADLINE)
    host_time_s: float | None = None
    setup_time_s: float
    samples: int
    samples_per_s: float | None = field(metadata=_HEADLINE)
    # A language model's: target positions per sample (padding included) and tokens/s =
    # samples_per_s x tokens_per_sample, simulated on the simulator as samples_per_s is;
    # None for other jobs (and runs from before them).
    tokens_per_sample: int | None = None
    tokens_per_s: float | None = None
    updates: int
    updates_per_s: float | None
    schedule: str
    schedule_source: dict[str, Any] | None = None  # {"kind": "given" | "search" | ...}
    time_by_protocol: dict[str, float]
    samples_by_protocol: dict[str, int] = field(default_factory=dict)
    switches: tuple[Switch, ...] = field(metadata=_HEADLINE)
    staleness: dict[str, dict[str, Any]]  # per protocol: mean, max, gradients, ...
    # The staleness-aware rules in force in ASP/SSP phases, with delay compensation's memory
    # (core/sync/staleness.py); None when none is (and in runs from before them).
    staleness_rules: dict[str, Any] | None = None
    # What the processes hold for the model, estimated at start-up (control/memory.py); None
    # in runs from before it.
    memory: dict[str, Any] | None = None
    gradients: Accounting
    workers: int
    worker_step_time_mean_s: float | None
    # What the workers computed the forward pass in (--precision); runs from before it: 32.
    precision: str = "32"
    emulation: dict[str, Any]  # the timing label: {"enabled": ..., "kind": ..., ...}
    cluster: dict[str, Any] | None = None  # the simulator's cluster model
    online: dict[str, Any] | None = None  # the straggler policy's figures (key: old files)
    online_timing: OnlineTimingSummary | None = None  # where an online phase ended, and why
    reliability: Reliability | None = None
    placement: dict[str, Any] | None = None  # where the actors ran, as the runtime said
    # What the servers received (messages, bytes by protocol; local samples lost unsent).
    traffic: dict[str, Any] | None = None
    run_dir: str

    # -- what readers ask -----------------------------------------------------------------

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE

    @property
    def emulated(self) -> bool:
        return bool(self.emulation.get("enabled"))

    @property
    def timing(self) -> str:
        """How the times were made: "simulated", "emulated" or "real"."""
        if self.runtime == "sim":
            return "simulated"
        return "emulated" if self.emulated else "real"

    def headline(self) -> dict[str, Any]:
        """The short summary's keys and values, in the file's order (`train --json`)."""
        record = self.to_plain()
        return {name: record[name] for name in HEADLINE_KEYS}

    def __getitem__(self, key: str) -> Any:
        """`summary["final_value"]`: the JSON value of a key, as before this class existed.
        Prefer the attribute (`summary.final_value`)."""
        if key not in _KEYS:
            raise KeyError(key)
        return self.to_plain()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """`summary.get("final_value")`, as for the dict this class replaced."""
        return self.to_plain()[key] if key in _KEYS else default

    # -- (de)serialisation ----------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        record: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "switches":
                value = [s.to_plain(rounded=False) for s in value]
            elif hasattr(value, "to_plain"):
                value = value.to_plain()
            record[f.name] = value
        return record

    @classmethod
    def from_plain(cls, data: Any, where: str = names.SUMMARY) -> Summary:
        read = Fields(data, where)
        rate: dict[str, Any] = {"low": 0.0, "optional": True}
        switches = read.objects("switches")
        reliability = None if read.absent("reliability") else read.data["reliability"]
        timing = read.mapping("online_timing", None, optional=True)
        return cls(
            status=read.text("status"),
            **_judged(read, where),
            best=_best(read.mapping("best", None, optional=True), f"{where}: best"),
            test_weights=_optional_text(read, "test_weights"),
            stopped_early=_optional_text(read, "stopped_early"),
            runtime=read.text("runtime", "ray", choices=RUNTIMES),
            wall_time_s=read.number("wall_time_s", low=0.0),
            host_time_s=read.number("host_time_s", None, **rate),
            setup_time_s=read.number("setup_time_s", low=0.0),
            samples=read.integer("samples"),
            samples_per_s=read.number("samples_per_s", **rate),
            tokens_per_sample=read.optional_integer("tokens_per_sample", None, low=1),
            tokens_per_s=read.number("tokens_per_s", None, **rate),
            updates=read.integer("updates"),
            updates_per_s=read.number("updates_per_s", **rate),
            schedule=read.text("schedule"),
            schedule_source=read.mapping("schedule_source", None, optional=True),
            time_by_protocol=read.numbers_by_name("time_by_protocol"),
            samples_by_protocol=read.numbers_by_name("samples_by_protocol", {}, integers=True),
            switches=tuple(
                Switch.from_plain(s, f"{where}: switches[{i}]") for i, s in enumerate(switches)
            ),
            staleness=_objects_by_name(read, "staleness"),
            staleness_rules=read.mapping("staleness_rules", None, optional=True),
            memory=read.mapping("memory", None, optional=True),
            gradients=Accounting.from_plain(read.mapping("gradients"), f"{where}: gradients"),
            workers=read.integer("workers", low=1),
            worker_step_time_mean_s=read.number("worker_step_time_mean_s", **rate),
            precision=read.text("precision", "32", choices=PRECISIONS),
            emulation=read.mapping("emulation"),
            cluster=read.mapping("cluster", None, optional=True),
            online=read.mapping("online", None, optional=True),
            online_timing=(
                None
                if timing is None
                else OnlineTimingSummary.from_plain(timing, f"{where}: online_timing")
            ),
            reliability=(
                None
                if reliability is None
                else Reliability.from_plain(reliability, f"{where}: reliability")
            ),
            placement=read.mapping("placement", None, optional=True),
            traffic=read.mapping("traffic", None, optional=True),
            run_dir=read.text("run_dir"),
        )


def _best(data: Any, where: str) -> dict[str, Any] | None:
    """The best evaluation's block (control/best_weights.py), each field checked."""
    if data is None:
        return None
    read = Fields(data, where)
    return {
        "value": read.number("value", finite=False),
        "samples": read.integer("samples"),
        "version": read.integer("version"),
        "fraction": read.number("fraction", low=0.0, high=1.0),
    }


def _optional_text(read: Fields, key: str) -> str | None:
    return None if read.data.get(key) is None else read.text(key)


_KEYS = frozenset(f.name for f in fields(Summary))
SUMMARY_KEYS = tuple(f.name for f in fields(Summary))
# The name a search trial's final value (its run's `final_value`: the primary metric on the
# validation split, accuracy for the built-in jobs) is traced and stored under in the
# registry: its column kept its first name, so registries made before stay readable.
FINAL_ACCURACY = "final_accuracy"


def _judged(read: Fields, where: str) -> dict[str, Any]:
    """The metric, its final and best values and the measures by split; a summary from
    before validation splits says final_accuracy, best_accuracy and final_test_loss, all on
    the test set."""
    if read.absent("metric") and not read.absent(FINAL_ACCURACY):
        accuracy: dict[str, Any] = {"low": 0.0, "high": 1.0, "optional": True}
        final = read.number(FINAL_ACCURACY, **accuracy)
        loss = read.number("final_test_loss", None, optional=True, finite=False)
        test = None if final is None else {"accuracy": final, "loss": _or_nan(loss)}
        return {
            "metric": LEGACY,
            "final_value": final,
            "best_value": read.number("best_accuracy", **accuracy),
            "validation": None,
            "test": test,
        }
    metric = MetricSpec.from_plain(read.mapping("metric"), f"{where}: metric")
    return {
        "metric": metric,
        "final_value": read.number("final_value", optional=True, finite=False),
        "best_value": read.number("best_value", optional=True, finite=False),
        VALIDATION: _measures(read, VALIDATION),
        TEST: _measures(read, TEST),
    }


def _measures(read: Fields, key: str) -> dict[str, float] | None:
    value = read.mapping(key, None, optional=True)
    if value is None:
        return None
    ok = all(
        isinstance(name, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for name, v in value.items()
    )
    if not ok:
        raise read.refuse(key, "an object of numbers by metric name, or null")
    return {name: float(v) for name, v in value.items()}


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


HEADLINE_KEYS = tuple(f.name for f in fields(Summary) if f.metadata.get("headline"))


def _objects_by_name(read: Fields, key: str) -> dict[str, dict[str, Any]]:
    value = read.mapping(key)
    if not all(isinstance(v, dict) for v in value.values()):
        raise read.refuse(key, "an object of JSON objects by protocol")
    return value
