"""Callbacks: the user's own code, called on the driver as a run goes (at its start, after each
evaluation, at a protocol switch, at a checkpoint, at the end), which may ask the run to stop.

    class StopAtTarget(Callback):
        def on_evaluation(self, event: EvaluationEvent) -> StopRun | None:
            if event.value >= 0.9:
                return StopRun(f"reached {event.value:.1%} {event.metric.name}")
            return None

    train(config, callbacks=[StopAtTarget()])

A hook asks for a stop by returning `StopRun(reason)`: a decision as a value, as the run's
own policies return theirs, so a callback needs no control object handed to it and its test
is a call and an assert. The controller carries the stop out as early stopping's (which is a
callback too, control/early_stopping.py): the workload ends at the weights it has reached, the
evaluation points left are measured on them, the final weights and summary.json are written,
and summary.json's `stopped_early` holds the reason. The first stop asked for wins; every hook
is still called after it.

Hooks run in the controller's thread on the driver (Ray's or the simulator's): a slow hook
holds the run up. What a hook raises stops the run the same way, and `train()` then raises
`CallbackError` naming the callback (control/callback_runner.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syncswitch.errors import ConfigError
from syncswitch.records import Switch
from syncswitch.records.metric import MetricSpec

if TYPE_CHECKING:
    from syncswitch.rundir import Summary

HOOKS = ("on_start", "on_evaluation", "on_switch", "on_checkpoint", "on_end")


@dataclass(frozen=True)
class StopRun:
    """What a hook returns to end the run early; `reason` goes to summary.json as it is."""

    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ConfigError(f"StopRun reason {self.reason!r}: give a non-empty text")


@dataclass(frozen=True)
class EvaluationEvent:
    """One evaluation of the weights (on the split the run's decisions read), in training
    order, as metrics.csv holds it."""

    fraction: float  # of the workload's samples, 0 to 1
    samples: int  # training samples applied to the evaluated weights
    version: int  # the weights' version: updates applied, the step
    time_s: float  # run seconds (the simulator's are simulated ones)
    protocol: str  # the protocol in force there
    metric: MetricSpec  # the primary metric: its name, direction and split
    metrics: Mapping[str, float]  # every measure of that split: the primary one first, loss
    train_loss: float  # the mean training loss since the evaluation before (nan: none)

    @property
    def value(self) -> float:
        """The primary metric's value."""
        return next(iter(self.metrics.values()))


@dataclass(frozen=True)
class CheckpointEvent:
    """A checkpoint written (every shard's state and the run record, one file)."""

    path: Path
    samples: int
    fraction: float
    version: int
    time_s: float
    label: str  # why it was taken: "scheduled", "timed", "final"


@dataclass(frozen=True)
class StartEvent:
    """The run starts training (a resumed run: goes on from its checkpoint)."""

    total_samples: int
    metric: MetricSpec
    resumed: bool
    # A resumed run's evaluations up to its checkpoint, which are not reported again: what a
    # callback keeping a history (early stopping) needs to go on as it would have.
    evaluations: tuple[EvaluationEvent, ...] = ()


class Callback:
    """The hooks, each a no-op here: override those you need. Every hook but `on_end` may
    return `StopRun(reason)` to end the run early; None lets it go on. `on_switch` is given
    the switch as summary.json lists it (`Switch`: at_fraction, from_protocol, to_protocol,
    reason, ...); `on_end` the run's `Summary`, once it has finished (not when it failed)."""

    def on_start(self, event: StartEvent) -> StopRun | None:
        return None

    def on_evaluation(self, event: EvaluationEvent) -> StopRun | None:
        return None

    def on_switch(self, event: Switch) -> StopRun | None:
        return None

    def on_checkpoint(self, event: CheckpointEvent) -> StopRun | None:
        return None

    def on_end(self, summary: Summary) -> None:
        return None


def check_callbacks(callbacks: Any) -> tuple[Any, ...]:
    """`train(callbacks=...)` checked: a list (or tuple) of callback objects, each with at
    least one of the hooks (a `Callback` subclass's instance, or any object with such
    methods); one ConfigError line naming what is wrong otherwise."""
    if callbacks is None:
        return ()
    if not isinstance(callbacks, list | tuple):
        raise ConfigError(
            f"callbacks={callbacks!r}: give a list of callback objects "
            "(e.g. [MyCallback()], each a syncswitch.Callback subclass's instance)"
        )
    for item in callbacks:
        if isinstance(item, type):
            raise ConfigError(
                f"callbacks: {item.__name__} is a class; give an instance ({item.__name__}())"
            )
        if not any(callable(getattr(item, hook, None)) for hook in HOOKS):
            raise ConfigError(
                f"callbacks: {item!r} is not a callback: it has none of the methods "
                f"{', '.join(HOOKS)} (subclass syncswitch.Callback)"
            )
    return tuple(callbacks)
