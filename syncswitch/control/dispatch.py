"""The one loop that carries out a controller's decisions, shared by every runtime.

A runtime (the Ray supervisor, the simulator, the scripted test driver) supplies one handler
per decision type; `DecisionDispatch` refuses, when built, a set of handlers that misses a
type, and then runs each `Step`'s decisions in order. A handler that reports back to the
controller at once (a rollback done, servers restored, an evaluation computed in place)
returns the controller's `Step`, whose decisions are carried out next, before the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, get_args

from syncswitch.control.decisions import RunDecision, Stop
from syncswitch.control.phases import Step
from syncswitch.errors import RunStopped, TrainingStalled

DECISION_TYPES: tuple[type, ...] = get_args(RunDecision)

Handler = Callable[[Any], Step | None]


class DecisionDispatch:
    def __init__(
        self,
        handlers: Mapping[type, Handler],
        *,
        on_step: Callable[[Step], None] | None = None,
    ) -> None:
        """`on_step` sees every step carried out, follow-ups included (a test records them)."""
        missing = [kind.__name__ for kind in DECISION_TYPES if kind not in handlers]
        unknown = [kind.__name__ for kind in handlers if kind not in DECISION_TYPES]
        if missing or unknown:
            raise TypeError(f"decision handlers: missing {missing}, not decisions {unknown}")
        self._handlers = dict(handlers)
        self._on_step = on_step

    def __call__(self, step: Step) -> None:
        if self._on_step is not None:
            self._on_step(step)
        for decision in step.decisions:
            follow_up = self._handlers[type(decision)](decision)
            if isinstance(follow_up, Step):
                self(follow_up)
            elif follow_up is not None:
                raise TypeError(f"the handler of {decision!r} returned {follow_up!r}, not a Step")


def raise_stop(stop: Stop) -> None:
    """The run cannot go on: TrainingStalled when nothing can be applied, else RunStopped (a
    limit reached, e.g. a worker's restarts): one line on the terminal either way."""
    raise TrainingStalled(stop.reason) if stop.stalled else RunStopped(stop.reason)
