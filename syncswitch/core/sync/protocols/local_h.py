"""Local-H: each worker takes H steps on its own copy of the weights, then sends one model
delta; a round of deltas from every active worker is gathered at BSP's barrier and applied as
one outer step (core/sync/local.py says what a round does, core/sync/local_phase.py the
synchronizer's side). A plain gradient sent before the switch is applied on its own, as ASP
would apply it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncswitch.core.sync.protocols.asp import ASP
from syncswitch.core.sync.protocols.base import ProtocolSpec, ScheduleError

MAX_LOCAL_STEPS = 100_000  # bounds H in the grammar (and a round's steps on a worker)


@dataclass(frozen=True)
class LocalH(ProtocolSpec):
    steps: int  # H: a worker's own steps between two rounds

    kind: ClassVar[str] = "local"
    grammar: ClassVar[str] = "'local-H' with H an integer >= 1"
    barrier: ClassVar[bool] = True
    gathers_deltas: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ScheduleError(f"local-H needs H >= 1 local steps, got {self.steps!r}")

    @classmethod
    def from_name(cls, text: str) -> LocalH | None:
        if not text.startswith("local-"):
            return None
        steps = text.removeprefix("local-")
        if not steps.isdecimal() or int(steps) < 1 or int(steps) > MAX_LOCAL_STEPS:
            raise ScheduleError(
                f"local-H needs H, the local steps between rounds, an integer in "
                f"1..{MAX_LOCAL_STEPS}, not {steps!r}"
            )
        return cls(int(steps))

    @property
    def name(self) -> str:
        return f"local-{self.steps}"

    @property
    def local_steps(self) -> int:
        return self.steps

    @property
    def lone_update_rule(self) -> ProtocolSpec:
        return ASP
