"""The synchronizer's state as a typed value: taken at a version boundary, restored into a new
synchronizer, or rolled back to in place. Its plain-data form (what a checkpoint holds) is
written and read here and nowhere else.

The plain form is a str-keyed dict of tensors, numbers, strings and lists, so it is written
with torch.save and read back with weights_only=True (core/reliability/checkpoints.py). Its
keys are those checkpoints have always had; `SynchronizerState.from_plain` checks every one's
presence and type and raises `StateFormatError` with one line naming the field, since a
checkpoint may come from elsewhere.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from syncswitch.core.sync.admission import DropReason, GradientLedger
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.protocol import ProtocolSpec, ScheduleError
from syncswitch.core.sync.records import Outcome, Snapshot, SwitchEvent
from syncswitch.records.switch import STATE_KEYS

if TYPE_CHECKING:  # the synchronizer calls these functions; they only read and set its fields
    from syncswitch.core.sync.synchronizer import Synchronizer


class StateFormatError(ValueError):
    """A plain-data state that is not a synchronizer's (a missing or wrong-typed field)."""


@dataclass(frozen=True)
class OptimizerState:
    """FlatSGD's state: the weights and the momentum buffer (None before the first step)."""

    weights: torch.Tensor
    momentum_buffer: torch.Tensor | None


@dataclass(frozen=True)
class SynchronizerState:
    """Everything a synchronizer needs to continue from a version boundary."""

    optimizer: OptimizerState
    version: int
    samples: int
    phase_index: int
    protocol: ProtocolSpec
    excluded: tuple[int, ...]
    clocks: Mapping[int, int]  # worker -> gradients sent in this phase (the SSP bound)
    time_s: float  # run seconds when taken
    phase_started_s: float
    time_by_protocol: Mapping[str, float]
    samples_by_protocol: Mapping[str, int]
    switches: tuple[SwitchEvent, ...]
    async_start: float  # progress at which the asynchronous part began (momentum ramp)
    phase_bsp_samples: int
    next_eval_index: int
    next_checkpoint_index: int
    lr_scale: float
    momentum_policy: MomentumPolicy
    pinned: ProtocolSpec | None  # set by a divergence rollback
    version_floor: int
    ledger: Mapping[str, Any]  # GradientLedger.to_state(): its own plain form
    local: LocalState = field(default_factory=lambda: LocalState())

    # -- the checkpoint's plain form ---------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        return {
            "optimizer": {
                "weights": self.optimizer.weights,
                "momentum_buffer": self.optimizer.momentum_buffer,
            },
            "version": self.version,
            "samples": self.samples,
            "phase_index": self.phase_index,
            "protocol": self.protocol.name,
            "excluded": list(self.excluded),
            "clocks": {str(w): c for w, c in sorted(self.clocks.items())},
            "time_s": self.time_s,
            "phase_started_s": self.phase_started_s,
            "time_by_protocol": dict(self.time_by_protocol),
            "samples_by_protocol": dict(self.samples_by_protocol),
            "switches": [e.to_state() for e in self.switches],
            "async_start": self.async_start,
            "phase_bsp_samples": self.phase_bsp_samples,
            "next_eval_index": self.next_eval_index,
            "next_checkpoint_index": self.next_checkpoint_index,
            "lr_scale": self.lr_scale,
            "momentum_policy": self.momentum_policy.value,
            "pinned": self.pinned.name if self.pinned else None,
            "version_floor": self.version_floor,
            "ledger": dict(self.ledger),
            "local": self.local.to_plain(),
        }

    @classmethod
    def from_plain(cls, plain: Any) -> SynchronizerState:
        """Build from a checkpoint's plain form; StateFormatError names the first bad field."""
        if not isinstance(plain, Mapping):
            raise StateFormatError(f"a {type(plain).__name__}, not a server state")
        read = _Reader(plain)
        optimizer = read.mapping("optimizer")
        weights = optimizer.get("weights")
        buffer = optimizer.get("momentum_buffer")
        if type(weights) is not torch.Tensor:
            raise StateFormatError(f"optimizer weights is a {type(weights).__name__}, not a tensor")
        if buffer is not None and type(buffer) is not torch.Tensor:
            raise StateFormatError(
                f"optimizer momentum_buffer is a {type(buffer).__name__}, not a tensor or None"
            )
        pinned = plain.get("pinned")
        return cls(
            optimizer=OptimizerState(weights, buffer),
            version=read.count("version"),
            samples=read.count("samples"),
            phase_index=read.count("phase_index"),
            protocol=read.protocol("protocol"),
            excluded=tuple(sorted(read.workers("excluded"))),
            clocks=read.clocks("clocks"),
            time_s=read.seconds("time_s"),
            phase_started_s=read.number("phase_started_s"),
            time_by_protocol={k: float(v) for k, v in read.numbers("time_by_protocol").items()},
            samples_by_protocol={k: int(v) for k, v in read.numbers("samples_by_protocol").items()},
            switches=read.switches("switches"),
            async_start=read.number("async_start"),
            phase_bsp_samples=read.count("phase_bsp_samples"),
            next_eval_index=read.count("next_eval_index"),
            next_checkpoint_index=read.count("next_checkpoint_index"),
            lr_scale=read.number("lr_scale"),
            momentum_policy=read.momentum_policy("momentum_policy"),
            pinned=None if pinned is None else read.protocol("pinned"),
            version_floor=read.count("version_floor"),
            ledger=read.mapping("ledger"),
            # Absent from checkpoints made before local phases existed.
            local=LocalState() if "local" not in plain else LocalState.from_plain(plain["local"]),
        )


@dataclass(frozen=True, eq=False)
class LocalState:
    """Local phases' part (core/sync/local.py): the outer optimizer's momentum, the current local
    phase's epoch and start, and the traffic counters (messages and bytes received by
    protocol, samples lost unsent by reason)."""

    outer_buffer: torch.Tensor | None = None
    epoch: int = 0
    start: float = 0.0
    messages_by_protocol: Mapping[str, int] = field(default_factory=dict)
    bytes_by_protocol: Mapping[str, int] = field(default_factory=dict)
    unsent_samples: Mapping[str, int] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LocalState):
            return NotImplemented
        mine, theirs = self.outer_buffer, other.outer_buffer
        same_buffer = (mine is None and theirs is None) or (
            mine is not None and theirs is not None and torch.equal(mine, theirs)
        )
        return same_buffer and self.to_plain() | {"outer_buffer": 0} == other.to_plain() | {
            "outer_buffer": 0
        }

    __hash__ = None  # type: ignore[assignment]  # mutable-looking contents: not hashable

    def to_plain(self) -> dict[str, Any]:
        return {
            "outer_buffer": self.outer_buffer,
            "epoch": self.epoch,
            "start": self.start,
            "messages_by_protocol": dict(self.messages_by_protocol),
            "bytes_by_protocol": dict(self.bytes_by_protocol),
            "unsent_samples": dict(self.unsent_samples),
        }

    @classmethod
    def from_plain(cls, plain: Any) -> LocalState:
        if not isinstance(plain, Mapping):
            raise StateFormatError(f"local is a {type(plain).__name__}, not a mapping")
        read = _Reader(plain)
        buffer = plain.get("outer_buffer")
        if buffer is not None and type(buffer) is not torch.Tensor:
            raise StateFormatError(
                f"local outer_buffer is a {type(buffer).__name__}, not a tensor or None"
            )

        def counts(name: str) -> dict[str, int]:
            values = read.numbers(name)
            if any(type(v) is not int or v < 0 for v in values.values()):
                raise StateFormatError(f"local {name}: counts must be ints >= 0")
            return {str(k): int(v) for k, v in values.items()}

        return cls(
            outer_buffer=buffer,
            epoch=read.count("epoch"),
            start=read.number("start"),
            messages_by_protocol=counts("messages_by_protocol"),
            bytes_by_protocol=counts("bytes_by_protocol"),
            unsent_samples=counts("unsent_samples"),
        )


class _Reader:
    """Typed reads of one plain state, each failing with one line that names the field."""

    def __init__(self, plain: Mapping[str, Any]) -> None:
        self.plain = plain

    def _get(self, name: str) -> Any:
        if name not in self.plain:
            raise StateFormatError(f"missing {name!r}")
        return self.plain[name]

    def _wrong(self, name: str, value: Any, expected: str) -> StateFormatError:
        text = repr(value)
        text = text if len(text) <= 40 else text[:37] + "..."
        return StateFormatError(f"{name} = {text} ({type(value).__name__}); expected {expected}")

    def count(self, name: str) -> int:
        value = self._get(name)
        if type(value) is not int or value < 0:
            raise self._wrong(name, value, "an int >= 0")
        return value

    def number(self, name: str) -> float:
        value = self._get(name)
        if type(value) not in (int, float) or not math.isfinite(value):
            raise self._wrong(name, value, "a finite number")
        return float(value)

    def seconds(self, name: str) -> float:
        value = self.number(name)
        if value < 0:
            raise self._wrong(name, value, "a number >= 0")
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        value = self._get(name)
        if not isinstance(value, Mapping):
            raise self._wrong(name, value, "a mapping")
        return dict(value)

    def numbers(self, name: str) -> dict[str, float]:
        value = self.mapping(name)
        for key, item in value.items():
            if type(item) not in (int, float):
                raise self._wrong(f"{name}[{key!r}]", item, "a number")
        return value

    def workers(self, name: str) -> list[int]:
        value = self._get(name)
        if not isinstance(value, list | tuple) or any(type(w) is not int for w in value):
            raise self._wrong(name, value, "a list of worker indices")
        return list(value)

    def clocks(self, name: str) -> dict[int, int]:
        value = self.mapping(name)
        try:
            return {int(w): int(c) for w, c in value.items()}
        except (TypeError, ValueError):
            raise self._wrong(name, value, "a mapping of worker to int") from None

    def protocol(self, name: str) -> ProtocolSpec:
        value = self._get(name)
        if type(value) is not str:
            raise self._wrong(name, value, "a protocol name such as 'bsp'")
        try:
            return ProtocolSpec.parse(value)
        except ScheduleError as error:
            raise StateFormatError(f"{name}: {error}") from None

    def momentum_policy(self, name: str) -> MomentumPolicy:
        value = self._get(name)
        try:
            return MomentumPolicy(value)
        except ValueError:
            allowed = ", ".join(p.value for p in MomentumPolicy)
            raise self._wrong(name, value, f"one of {allowed}") from None

    def switches(self, name: str) -> tuple[SwitchEvent, ...]:
        value = self._get(name)
        if not isinstance(value, list | tuple) or not all(isinstance(e, Mapping) for e in value):
            raise self._wrong(name, value, "a list of switch records")
        switches = []
        for entry in value:  # SwitchEvent.to_state()'s layout (or to_summary()'s)
            try:
                switches.append(SwitchEvent.from_summary(entry))
            except (KeyError, TypeError, ValueError):
                expected = f"switch records with keys {sorted(STATE_KEYS)}"
                raise self._wrong(name, entry, expected) from None
        return tuple(switches)


# -- taking, restoring, rolling back ------------------------------------------------------------


def take_snapshot(sync: Synchronizer, label: str) -> Snapshot:
    """The synchronizer's state now, at a version boundary (no gradient waiting)."""
    if sync.room.pending:
        raise RuntimeError("a snapshot is taken at a version boundary, with no one waiting")
    now_s = sync.now_s()
    optimizer = sync.optimizer.state_dict()
    state = SynchronizerState(
        optimizer=OptimizerState(optimizer["weights"], optimizer["momentum_buffer"]),
        version=sync.version,
        samples=sync.samples,
        phase_index=sync.phase_index,
        protocol=sync.spec,
        excluded=tuple(sorted(sync.excluded)),
        clocks=dict(sorted(sync.room.clocks.items())),
        time_s=now_s,
        phase_started_s=sync._phase_started_s,
        time_by_protocol=dict(sync.time_by_protocol),
        samples_by_protocol=dict(sync.samples_by_protocol),
        switches=tuple(sync.switches),
        async_start=sync._async_start,
        phase_bsp_samples=sync._phase_bsp_samples,
        next_eval_index=sync._next_eval_index,
        next_checkpoint_index=sync._next_checkpoint_index,
        lr_scale=sync.lr_scale,
        momentum_policy=sync.momentum_policy,
        pinned=sync.pinned,
        version_floor=sync.version_floor,
        ledger=sync.ledger.to_state(),
        local=LocalState(
            outer_buffer=(
                None if sync.outer.buffer is None else sync.outer.buffer.to("cpu", copy=True)
            ),
            epoch=sync.local_epoch,
            start=sync.local_start,
            messages_by_protocol=dict(sync.messages_by_protocol),
            bytes_by_protocol=dict(sync.bytes_by_protocol),
            unsent_samples=dict(sync.unsent_samples),
        ),
    )
    return Snapshot(label, sync.samples, sync.progress, sync.version, now_s, state)


def restore(sync: Synchronizer, state: SynchronizerState) -> None:
    """Make `sync` the synchronizer a snapshot was taken of (a new server, or a resumed run).

    The clock continues from the snapshot's time, so time lost to the failure is not counted
    as training time. Every worker must `rejoin` before it trains again.
    """
    _load_position(sync, state)
    sync.version = state.version
    sync.version_floor = state.version_floor
    sync.ledger = GradientLedger.from_state(dict(state.ledger))
    sync.time_by_protocol = defaultdict(float, state.time_by_protocol)
    sync.switches = list(state.switches)
    # Traffic is what happened: restored with the ledger, never rolled back.
    sync.messages_by_protocol = Counter(state.local.messages_by_protocol)
    sync.bytes_by_protocol = Counter(state.local.bytes_by_protocol)
    sync.unsent_samples = Counter(state.local.unsent_samples)
    sync._t0 = sync._clock() - state.time_s
    sync._phase_started_s = state.phase_started_s
    sync.done = False


def roll_back(
    sync: Synchronizer,
    state: SynchronizerState,
    *,
    protocol: ProtocolSpec,
    lr_scale: float,
    momentum_policy: MomentumPolicy,
    reason: str,
) -> Outcome:
    """Go back to a snapshot's weights and position, in place, while workers run on, and stay
    in `protocol` from then on (a divergence guard's response).

    Versions keep increasing: the restored weights get a new version, and anything computed
    before it (on the abandoned weights) is dropped as rolled_back when it arrives. Accounting
    and time are not rolled back: what happened, happened.
    """
    outcome = Outcome()
    for gradient in sync.room.pending:
        outcome.dropped.append(sync._drop(gradient, DropReason.ROLLED_BACK))
    sync.room.pending = []
    _load_position(sync, state)
    sync.version = max(sync.version, state.version) + 1
    sync.version_floor = sync.version
    sync.excluded.clear()
    sync.lr_scale = lr_scale
    sync.momentum_policy = momentum_policy
    sync.pinned = protocol
    if sync.spec != protocol:
        outcome.merge(sync.switch_to(protocol, reason=reason))
    outcome.released.extend(sync.room.release_all())
    return outcome


def _load_position(sync: Synchronizer, state: SynchronizerState) -> None:
    sync.optimizer.load_state_dict(
        {"weights": state.optimizer.weights, "momentum_buffer": state.optimizer.momentum_buffer}
    )
    sync.samples = state.samples
    sync.phase_index = state.phase_index
    sync.spec = state.protocol
    sync.excluded = set(state.excluded)
    sync.room.clocks = dict(state.clocks)
    sync.samples_by_protocol = Counter(state.samples_by_protocol)
    sync._async_start = state.async_start
    sync._phase_bsp_samples = state.phase_bsp_samples
    sync._next_eval_index = state.next_eval_index
    sync._next_checkpoint_index = state.next_checkpoint_index
    sync.lr_scale = state.lr_scale
    sync.momentum_policy = state.momentum_policy
    sync.pinned = state.pinned
    local = state.local
    buffer = local.outer_buffer
    sync.outer.buffer = None if buffer is None else buffer.to(sync.weights, copy=True)
    sync.local_epoch = local.epoch
    sync.local_start = local.start
    if sync.stats is not None:
        sync.stats.forget()  # the weights jumped: no drift across it
    sync.partials = []
