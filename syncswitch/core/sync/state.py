"""The synchronizer's state as a typed, frozen value: taken at a version boundary, restored into
a new synchronizer, or rolled back to in place (core/sync/live.py copies the live fields to and
from it). Its plain-data form (what a checkpoint holds) is written and read here and nowhere
else.

The plain form is a str-keyed dict of tensors, numbers, strings and lists, so it is written
with torch.save and read back with weights_only=True (core/reliability/checkpoints.py). Its
keys are those checkpoints have always had; `SynchronizerState.from_plain` checks every one's
presence and type and raises `StateFormatError` with one line naming the field, since a
checkpoint may come from elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.protocol import ProtocolSpec, ScheduleError
from syncswitch.records import Switch
from syncswitch.records.switch import STATE_KEYS


class StateFormatError(ValueError):
    """A plain-data state that is not a synchronizer's (a missing or wrong-typed field)."""


# Adam's counters (core/sync/adam.py), in a checkpoint beside its moments.
_ADAM_COUNTS = ("steps", "first_steps")
_ADAM_NUMBERS = ("first_decay", "first_beta")


@dataclass(frozen=True)
class OptimizerState:
    """The server optimizer's state: the weights and the momentum buffer (SGD's momentum,
    Adam's first moment; None before the first step), and Adam's second moment and counters
    (`adam`: absent for SGD, so an SGD checkpoint is what it always was)."""

    weights: torch.Tensor
    momentum_buffer: torch.Tensor | None
    second_moment: torch.Tensor | None = None
    adam: Mapping[str, float] | None = None  # steps, first_decay, first_beta, first_steps

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> OptimizerState:
        """From an optimizer's state_dict()."""
        adam = {k: state[k] for k in _ADAM_COUNTS + _ADAM_NUMBERS if k in state} or None
        return cls(state["weights"], state["momentum_buffer"], state.get("second_moment"), adam)

    def as_dict(self) -> dict[str, Any]:
        """An optimizer's load_state_dict() argument."""
        plain: dict[str, Any] = {"weights": self.weights, "momentum_buffer": self.momentum_buffer}
        if self.adam is not None:
            plain |= {"second_moment": self.second_moment, **self.adam}
        return plain


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
    switches: tuple[Switch, ...]
    async_start: float  # progress at which the asynchronous part began (momentum ramp)
    phase_bsp_samples: int
    next_eval_index: int
    next_checkpoint_index: int
    lr_scale: float
    momentum_policy: MomentumPolicy
    pinned: ProtocolSpec | None  # set by a divergence rollback
    version_floor: int
    ledger: Mapping[str, Any]  # GradientLedger.to_plain(): its own plain form
    local: LocalState = field(default_factory=lambda: LocalState())

    # -- the checkpoint's plain form ---------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.as_dict(),
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
            "switches": [e.to_plain(state_layout=True) for e in self.switches],
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
            optimizer=_adam_part(OptimizerState(weights, buffer), optimizer),
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


def _adam_part(sgd: OptimizerState, optimizer: Mapping[str, Any]) -> OptimizerState:
    """`sgd` with Adam's second moment and counters, when the checkpoint holds them."""
    if "steps" not in optimizer:
        return sgd
    read = _Reader(optimizer)
    second = optimizer.get("second_moment")
    if second is not None and type(second) is not torch.Tensor:
        raise StateFormatError(
            f"optimizer second_moment is a {type(second).__name__}, not a tensor or None"
        )
    adam: dict[str, float] = {k: read.count(k) for k in _ADAM_COUNTS}
    adam |= {k: read.number(k) for k in _ADAM_NUMBERS}
    return OptimizerState(sgd.weights, sgd.momentum_buffer, second, adam)


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

    def switches(self, name: str) -> tuple[Switch, ...]:
        value = self._get(name)
        if not isinstance(value, list | tuple) or not all(isinstance(e, Mapping) for e in value):
            raise self._wrong(name, value, "a list of switch records")
        switches = []
        for entry in value:  # the state layout (or the summary layout)
            try:
                switches.append(Switch.from_plain(entry))
            except (KeyError, TypeError, ValueError):
                expected = f"switch records with keys {sorted(STATE_KEYS)}"
                raise self._wrong(name, entry, expected) from None
        return tuple(switches)
