"""What every synchronization protocol is asked, and the registry that names them.

A protocol is one frozen value (its parameters) whose class answers every question the
synchronizer, the wait room and the policies have about it: how its name is written, whether an
update waits for a round, when a round is complete, what it refuses, who may go on, which rule a
lone update follows and where a greedy straggler policy detours to. Nothing outside a protocol's
class branches on which protocol is in force; adding one is a module with a subclass and a
`register_protocol` call (docs/architecture.md, "Add a protocol").

The defaults describe an asynchronous protocol with no bound (ASP): every message is an update
of its own and its worker goes on at once.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import ClassVar


class ScheduleError(ValueError):
    """A schedule string or phase list that cannot describe a run."""


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol with its parameters (a subclass per protocol; see the module docstring)."""

    # The protocol's family, as samples_by_protocol and the records key it ("bsp", "ssp").
    kind: ClassVar[str] = ""
    # How the grammar writes it, for the error that lists what is allowed.
    grammar: ClassVar[str] = ""
    # Whether an update waits for a round of messages from the active workers.
    barrier: ClassVar[bool] = False
    # Whether its rounds gather model deltas (local steps) rather than gradients.
    gathers_deltas: ClassVar[bool] = False

    @classmethod
    def from_name(cls, text: str) -> ProtocolSpec | None:
        """This protocol as `text` (lower case, stripped) names it, or None when `text` is not
        one of its spellings (raise ScheduleError for its own spelling with bad parameters)."""
        return cls() if text == cls.kind else None

    @staticmethod
    def parse(text: str) -> ProtocolSpec:
        """The registered protocol `text` names (`parse_protocol`)."""
        return parse_protocol(text)

    @property
    def name(self) -> str:
        """As the grammar writes it, with its parameters ("ssp-3", "local-8")."""
        return self.kind

    @property
    def is_async(self) -> bool:
        return not self.barrier

    @property
    def clock_bound(self) -> int | None:
        """How many steps a worker may run ahead of the slowest active one (None: no bound).
        Clocks restart when a phase of a bounded protocol begins."""
        return None

    @property
    def local_steps(self) -> int | None:
        """H, a worker's own steps between two rounds, for a protocol of local rounds."""
        return None

    @property
    def lone_update_rule(self) -> ProtocolSpec:
        """The protocol whose rule (learning rate, momentum, staleness) a plain gradient applied
        on its own in this phase follows."""
        return self

    @property
    def straggler_detour(self) -> ProtocolSpec | None:
        """Where a greedy straggler policy goes while a straggler holds this protocol up (and
        whose planned work a return counts); None where it does not leave it."""
        return None

    @property
    def averages_gradients(self) -> bool:
        """Whether an update is a round's mean of gradients (what gradient statistics and the
        shards' global-norm exchange measure)."""
        return self.barrier and not self.gathers_deltas

    def gathers(self, is_delta: bool) -> bool:
        """Whether its barrier gathers a message of this kind (a model delta or a gradient);
        one it does not is applied on its own (sent across a switch)."""
        return self.barrier and is_delta == self.gathers_deltas

    def round_complete(self, arrived: Set[int], active: Set[int]) -> bool:
        """Whether a barrier round holding messages from `arrived` may be applied: by default
        once every active worker's is in."""
        return bool(arrived) and active <= arrived

    def refuses(self, computed_version: int, version: int) -> str | None:
        """A drop reason for a message computed on `computed_version` arriving at `version`,
        beyond the checks every protocol shares; None admits it."""
        return None


_REGISTERED: dict[str, type[ProtocolSpec]] = {}


def register_protocol(protocol: type[ProtocolSpec]) -> type[ProtocolSpec]:
    """Make `protocol` part of the schedule grammar (usable as a decorator). Its kind must be
    new: a second protocol of one kind would make files that name it ambiguous."""
    if not protocol.kind or not protocol.grammar:
        raise ValueError(f"{protocol.__name__} needs a kind and a grammar to be registered")
    known = _REGISTERED.get(protocol.kind)
    if known is not None and known is not protocol:
        raise ValueError(f"protocol kind {protocol.kind!r} is already {known.__name__}'s")
    _REGISTERED[protocol.kind] = protocol
    return protocol


def parse_protocol(text: str) -> ProtocolSpec:
    """The registered protocol `text` names, or a ScheduleError listing the allowed ones."""
    text = text.strip().lower()
    for protocol in _REGISTERED.values():
        spec = protocol.from_name(text)
        if spec is not None:
            return spec
    spellings = [protocol.grammar for protocol in _REGISTERED.values()]
    allowed = ", ".join(spellings[:-1]) + f" and {spellings[-1]}" if len(spellings) > 1 else ""
    raise ScheduleError(f"unknown protocol {text!r}: allowed are {allowed or spellings[0]}")
