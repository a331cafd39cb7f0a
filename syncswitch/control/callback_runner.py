"""The controller's side of callbacks (control/callbacks.py): it turns what the run records (a
metrics row, a switch, a checkpoint written, the summary) into events, calls every callback's
hook, and keeps the first stop asked for until the controller takes it.

A hook that raises (or returns anything but None or a StopRun) never reaches the controller:
the run stops as if the hook had asked, with the error as the reason, so everything produced
so far and the final files are written as for any early stop; that callback is not called
again, the others are, and `train()` raises `CallbackError` with `failure` once the run's
files are written (runtime/train.py). The error is also said at once, in one line on stderr,
since a run on Ray may take a while to wind down.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from syncswitch.control.callbacks import (
    CheckpointEvent,
    EvaluationEvent,
    StartEvent,
    StopRun,
)
from syncswitch.control.evaluations import MetricsRow
from syncswitch.core.reliability.checkpoints import CheckpointInfo
from syncswitch.records import Switch
from syncswitch.records.metric import MetricSpec
from syncswitch.user_code import described

if TYPE_CHECKING:
    from syncswitch.rundir import Summary


class CallbackRunner:
    def __init__(self, callbacks: Sequence[Any] = ()) -> None:
        """`callbacks`: checked by `check_callbacks` (train() does)."""
        self.callbacks: list[Any] = list(callbacks)
        self.metric = MetricSpec()
        self.failure: str | None = None  # the first hook that raised, in one line
        self.error: BaseException | None = None  # what it raised
        self._failed: set[int] = set()  # callbacks not called again (by id)
        self._stop: str | None = None  # asked for, not taken yet
        self._stop_asked = False  # the first stop asked for is the only one kept

    def install(self, builtin: Sequence[Any], metric: MetricSpec) -> None:
        """The config's own callbacks (early stopping) go first; `metric` is the run's
        primary metric, which every evaluation event carries."""
        self.callbacks = [*builtin, *self.callbacks]
        self.metric = metric

    # -- what the controller tells ----------------------------------------------------------------

    def started(self, total_samples: int, resumed: bool, earlier: Sequence[MetricsRow]) -> None:
        evaluations = tuple(self.evaluation(row) for row in earlier)
        self._call("on_start", StartEvent(total_samples, self.metric, resumed, evaluations))

    def evaluated(self, row: MetricsRow) -> None:
        self._call("on_evaluation", self.evaluation(row))

    def switched(self, switch: Switch) -> None:
        self._call("on_switch", switch)

    def checkpointed(self, info: CheckpointInfo) -> None:
        meta = info.meta
        event = CheckpointEvent(
            path=info.path,
            samples=info.samples,
            fraction=float(meta.get("progress", 0.0)),
            version=int(meta.get("version", 0)),
            time_s=float(meta.get("time_s", 0.0)),
            label=info.label,
        )
        self._call("on_checkpoint", event)

    def ended(self, summary: Summary) -> None:
        self._call("on_end", summary)

    def take_stop(self) -> str | None:
        """The reason of the stop asked for since last taken (None: none), once."""
        reason, self._stop = self._stop, None
        return reason

    # -- calling the hooks ----------------------------------------------------------------------

    def evaluation(self, row: MetricsRow) -> EvaluationEvent:
        return EvaluationEvent(
            fraction=row.fraction,
            samples=row.samples,
            version=row.version,
            time_s=row.time_s,
            protocol=row.protocol,
            metric=self.metric,
            metrics=MappingProxyType(dict(row.values)),
            train_loss=row.train_loss,
        )

    def _call(self, hook: str, event: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if id(callback) in self._failed or not callable(method):
                continue
            where = f"{type(callback).__name__}.{hook}"
            try:
                answer = method(event)
            except Exception as error:  # the user's code: any error of theirs stops the run
                self._fail(callback, f"callback {where} raised {described(error)}", error)
                continue
            if isinstance(answer, StopRun):
                self._ask(answer.reason)
            elif answer is not None:
                self._fail(
                    callback,
                    f"callback {where} returned {answer!r}; a hook returns None or StopRun(reason)",
                    None,
                )

    def _ask(self, reason: str) -> None:
        if not self._stop_asked:
            self._stop_asked, self._stop = True, reason

    def _fail(self, callback: Any, line: str, error: BaseException | None) -> None:
        self._failed.add(id(callback))
        if self.failure is None:
            self.failure, self.error = line, error
        print(f"syncswitch: {line}; the run stops", file=sys.stderr)
        self._ask(line)
