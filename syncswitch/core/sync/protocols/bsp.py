"""BSP, bulk synchronous parallel: an update is the sample-weighted mean of one gradient from
every active worker, gathered at a barrier; all of them go on with the new weights
(staleness 0). A straggler holds every worker up, so a greedy policy detours through ASP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncswitch.core.sync.protocols.asp import ASP
from syncswitch.core.sync.protocols.base import ProtocolSpec


@dataclass(frozen=True)
class Bsp(ProtocolSpec):
    kind: ClassVar[str] = "bsp"
    grammar: ClassVar[str] = "'bsp'"
    barrier: ClassVar[bool] = True

    @property
    def straggler_detour(self) -> ProtocolSpec:
        return ASP


BSP = Bsp()
