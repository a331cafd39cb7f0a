"""Straggler policies: how a run reacts, while it runs, to stragglers the detector reports.

`--straggler-policy` picks one (`--online-policy`, its old spelling, is an alias); the run
takes it as `RunPlan.stragglers`. "Online" names only online timing (`--schedule online`).
What files hold keeps the old word so that old run directories read: the config field and
key `online_policy`, and summary.json's and the journal's `online`.

They compose with the offline schedule (the BSP prefix, then ASP) and only ever act on the
BSP part of it, where one slow worker stalls everyone:

- none: the baseline; detections are still logged.
- greedy: a detection during BSP switches to ASP at once. With `greedy_return`, the run goes
  back to BSP once every straggler has recovered and stays there until the planned amount of
  BSP work (samples) is done; the synchronizer then counts the BSP phase by work, not by
  progress, so a detour through ASP postpones the planned switch instead of eating into it.
- elastic: stay in BSP, but the barrier stops waiting for flagged workers (their late
  gradients are dropped as `straggler_excluded`); a recovered worker is re-admitted.

A policy only turns detector events into `Decision` values; the synchronizer carries them
out. Both are pure, so a test or a simulator drives them without any runtime.
"""

from __future__ import annotations

from collections.abc import Set
from enum import StrEnum
from typing import Protocol as TypingProtocol

from syncswitch.core.stragglers.detector import EventKind, StragglerEvent
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Action, Decision


class StragglerPolicyKind(StrEnum):
    NONE = "none"
    GREEDY = "greedy"
    ELASTIC = "elastic"


class RunView(TypingProtocol):
    """What a policy may read of the run (the Synchronizer provides it)."""

    @property
    def spec(self) -> ProtocolSpec: ...  # the protocol in force

    @property
    def scheduled_spec(self) -> ProtocolSpec: ...  # the protocol the schedule asks for now

    @property
    def excluded(self) -> Set[int]: ...  # a set or a frozenset: policies only read it

    @property
    def done(self) -> bool: ...

    @property
    def pinned(self) -> ProtocolSpec | None: ...  # set by a divergence rollback


class StragglerPolicy:
    def __init__(
        self, kind: StragglerPolicyKind = StragglerPolicyKind.NONE, greedy_return: bool = False
    ):
        if greedy_return and kind is not StragglerPolicyKind.GREEDY:
            raise ValueError(f"greedy_return applies to the greedy policy only, not {kind.value}")
        self.kind = kind
        self.greedy_return = greedy_return

    @property
    def name(self) -> str:
        return "greedy+return" if self.greedy_return else self.kind.value

    @property
    def counts_bsp_by_work(self) -> bool:
        """Whether a BSP phase must end on planned BSP samples rather than on progress."""
        return self.greedy_return

    def decide(
        self, event: StragglerEvent, run: RunView, flagged: frozenset[int]
    ) -> list[Decision]:
        """Decisions for one detector event; `flagged` is who the detector flags after it."""
        if run.done:
            return []
        if self.kind is StragglerPolicyKind.GREEDY:
            # After a divergence rollback the run stays in BSP: greedy may not leave it.
            return [] if run.pinned is not None else self._greedy(event, run, flagged)
        if self.kind is StragglerPolicyKind.ELASTIC:
            return self._elastic(event, run)
        return []

    def _decision(
        self,
        action: Action,
        event: StragglerEvent,
        reason: str,
        worker: int | None = None,
        protocol: ProtocolSpec | None = None,
    ) -> Decision:
        return Decision(
            action=action,
            policy=self.name,
            reason=reason,
            time_s=event.time_s,
            progress=event.progress,
            worker=worker,
            protocol=protocol,
        )

    def _greedy(
        self, event: StragglerEvent, run: RunView, flagged: frozenset[int]
    ) -> list[Decision]:
        scheduled = run.scheduled_spec
        if event.kind == EventKind.DETECTED:
            detour = run.spec.straggler_detour
            if detour is not None and run.spec == scheduled:
                return [
                    self._decision(
                        Action.SWITCH,
                        event,
                        f"straggler during {run.spec.name.upper()}: {event.reason}",
                        protocol=detour,
                    )
                ]
            return []
        detoured = scheduled.straggler_detour is not None and run.spec != scheduled
        if self.greedy_return and detoured and not flagged:
            return [
                self._decision(
                    Action.RETURN,
                    event,
                    f"all stragglers recovered ({event.reason}); resuming the planned BSP work",
                    protocol=run.scheduled_spec,
                )
            ]
        return []

    def _elastic(self, event: StragglerEvent, run: RunView) -> list[Decision]:
        # Exclusion is a property of the BSP barrier, so it is decided in any phase and takes
        # effect wherever the schedule runs BSP.
        if event.kind == EventKind.DETECTED and event.worker not in run.excluded:
            return [
                self._decision(
                    Action.EXCLUDE,
                    event,
                    f"barrier stops waiting: {event.reason}",
                    worker=event.worker,
                )
            ]
        if event.kind == EventKind.RECOVERED and event.worker in run.excluded:
            return [
                self._decision(
                    Action.READMIT, event, f"back at speed: {event.reason}", worker=event.worker
                )
            ]
        return []
