"""The synchronization protocols, one class a module, registered with the schedule grammar
(base.py says what a protocol answers). The built-ins register here, in the order the grammar's
error lists them."""

from syncswitch.core.sync.protocols.asp import ASP, Asp
from syncswitch.core.sync.protocols.base import (
    ProtocolSpec,
    ScheduleError,
    parse_protocol,
    register_protocol,
)
from syncswitch.core.sync.protocols.bsp import BSP, Bsp
from syncswitch.core.sync.protocols.local_h import MAX_LOCAL_STEPS, LocalH
from syncswitch.core.sync.protocols.ssp import Ssp

for _protocol in (Bsp, Asp, Ssp, LocalH):
    register_protocol(_protocol)

__all__ = [
    "ASP",
    "BSP",
    "MAX_LOCAL_STEPS",
    "Asp",
    "Bsp",
    "LocalH",
    "ProtocolSpec",
    "ScheduleError",
    "Ssp",
    "parse_protocol",
    "register_protocol",
]
