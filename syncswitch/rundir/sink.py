"""RecordSink: what the run directory writer hands on besides its files.

The writer passes everything it writes (applied and dropped gradients, evaluation rows, online
timing checks, events, worker statistics, the summary) to one optional sink as it writes it.
The loggers' feed (syncswitch.loggers.feed.LoggerFeed, which the runtime builds around the
configured backends) is the one there is; rundir names only this interface, so it imports
nothing of the loggers above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from syncswitch.core.sync.records import DropRecord, UpdateRecord
    from syncswitch.rundir.events import RunEvent
    from syncswitch.rundir.summary import Summary

# A backend of the sink switched off mid-run: (its name, why, one line). The writer records
# it as a LoggerFailed event.
OnFailure = Callable[[str, str], None]


class RecordSink(Protocol):
    def start(
        self, config: dict[str, Any], resume_samples: int | None, on_failure: OnFailure
    ) -> None:
        """Before anything is written: a ConfigError here stops the run before it begins
        (and leaves the directory free for the next try)."""

    def updates(self, records: list[UpdateRecord]) -> None: ...

    def drops(self, records: list[DropRecord]) -> None: ...

    def metric(self, row: dict[str, Any]) -> None: ...

    def timing_signal(self, row: dict[str, Any]) -> None: ...

    def event(self, event: RunEvent) -> None: ...

    def worker_stats(self, rows: list[dict[str, Any]]) -> None: ...

    def summary(self, summary: Summary) -> None: ...

    def close(self) -> None: ...
