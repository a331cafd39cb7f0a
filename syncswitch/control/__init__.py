"""The run controller and what it works with; no Ray, no processes (see controller.py)."""

from syncswitch.control.controller import RunController
from syncswitch.control.phases import RunPhase, Step
from syncswitch.control.plan import RunPlan
from syncswitch.control.shard import ServerShard, ShardReport, ShardState

__all__ = [
    "RunController",
    "RunPhase",
    "RunPlan",
    "ServerShard",
    "ShardReport",
    "ShardState",
    "Step",
]
