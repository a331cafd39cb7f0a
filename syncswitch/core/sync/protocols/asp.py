"""ASP, asynchronous parallel: each gradient is an update on arrival and its worker goes on at
once, however stale the weights it computed on (the base class's defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncswitch.core.sync.protocols.base import ProtocolSpec


@dataclass(frozen=True)
class Asp(ProtocolSpec):
    kind: ClassVar[str] = "asp"
    grammar: ClassVar[str] = "'asp'"


ASP = Asp()
