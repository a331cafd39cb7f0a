"""SIGTERM and SIGHUP stop a simulated run as Ctrl-C does (Ray's driver does this for a run on
Ray): the run's summary says failed and why, and `--resume` continues it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from syncswitch.errors import RunStopped


@contextmanager
def signals_stop(active: bool) -> Iterator[None]:
    """SIGTERM and SIGHUP stop a simulated run as Ctrl-C does: the summary says failed and
    why, one line says so, and `--resume` continues it (Ray's driver does this for a run on
    Ray). The previous handlers are back when the run ends."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(number: int, _frame: Any) -> None:
        raise RunStopped(f"{signal.Signals(number).name} received; continue with --resume")

    wanted = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {number: signal.signal(number, stop) for number in wanted}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
