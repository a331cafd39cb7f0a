"""SSP-s, stale synchronous parallel: like ASP, but a worker whose clock (gradients sent in
this phase) is more than s ahead of the slowest active worker waits until the slowest catches
up."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from syncswitch.core.sync.protocols.base import ProtocolSpec, ScheduleError


@dataclass(frozen=True)
class Ssp(ProtocolSpec):
    bound: int  # the most steps a worker may run ahead of the slowest one

    kind: ClassVar[str] = "ssp"
    grammar: ClassVar[str] = "'ssp-S' with S an integer >= 0"

    def __post_init__(self) -> None:
        if not isinstance(self.bound, int) or self.bound < 0:
            raise ScheduleError(f"SSP needs a staleness bound >= 0, got {self.bound!r}")

    @classmethod
    def from_name(cls, text: str) -> Ssp | None:
        match = re.fullmatch(r"ssp-(\d+)", text)
        return cls(int(match.group(1))) if match else None

    @property
    def name(self) -> str:
        return f"ssp-{self.bound}"

    @property
    def clock_bound(self) -> int:
        return self.bound
