"""Taking a snapshot of the synchronizer, and loading one's parts back into the collaborators
that hold them (the synchronizer assigns the rest: its `LiveState`)."""

from __future__ import annotations

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.gate import Gate
from syncswitch.core.sync.live import LiveState
from syncswitch.core.sync.local_phase import LocalPhase
from syncswitch.core.sync.records import Snapshot
from syncswitch.core.sync.server_optimizer import ServerOptimizer
from syncswitch.core.sync.state import OptimizerState, SynchronizerState
from syncswitch.core.sync.update import Updater
from syncswitch.core.sync.waitroom import WaitRoom


class Snapshots:
    def __init__(
        self,
        config: SyncConfig,
        optimizer: ServerOptimizer,
        room: WaitRoom,
        gate: Gate,
        local: LocalPhase,
        updater: Updater,
    ) -> None:
        self.config = config
        self.optimizer = optimizer
        self.room = room
        self.gate = gate
        self.local = local
        self.updater = updater

    def take(self, live: LiveState, label: str, now_s: float) -> Snapshot:
        """The synchronizer's state at run second `now_s`, at a version boundary."""
        if self.room.pending:
            raise RuntimeError("a snapshot is taken at a version boundary, with no one waiting")
        state = live.capture(
            optimizer=OptimizerState.of(self.optimizer.state_dict()),
            clocks=self.room.clocks,
            ledger=self.gate.ledger.to_plain(),
            outer_buffer=self.local.outer_buffer(),
            time_s=now_s,
        )
        progress = self.config.progress(live.samples)
        return Snapshot(label, live.samples, progress, live.version, now_s, state)

    def load(self, state: SynchronizerState) -> None:
        """The parts of `state` the collaborators hold: weights and momentum, SSP clocks, the
        outer momentum; the statistics forget the round before (the weights jumped)."""
        self.optimizer.load_state_dict(state.optimizer.as_dict())
        self.room.clocks = dict(state.clocks)
        self.local.load_outer_buffer(state.local.outer_buffer)
        stats = self.updater.stats
        if stats is not None:
            stats.forget()  # the weights jumped: no drift across it
