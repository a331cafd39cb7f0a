"""Adding a protocol is one file: this one defines "BSP with k of n workers" (backup workers,
Chen et al. 2016: a round is applied once the first k of n gradients are in, and the late ones,
computed on the weights before it, are dropped), registers it with the schedule grammar, and
trains with it through the core synchronizer and the simulator, as docs/architecture.md's
recipe says."""

from __future__ import annotations

import re
from collections.abc import Iterator, Set
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from syncswitch.core.sync.admission import DropReason
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.sync.protocols import ProtocolSpec, base, register_protocol
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.workloads import load_dataset
from tests.runtime.jobs import run
from tests.runtime.test_stragglers import accounted


@dataclass(frozen=True)
class BspKOfN(ProtocolSpec):
    k: int  # gradients a round applies; the other workers' are late and dropped

    kind: ClassVar[str] = "bspk"
    grammar: ClassVar[str] = "'bspk-K' with K an integer >= 1"
    barrier: ClassVar[bool] = True

    @classmethod
    def from_name(cls, text: str) -> BspKOfN | None:
        match = re.fullmatch(r"bspk-(\d+)", text)
        return cls(int(match.group(1))) if match else None

    @property
    def name(self) -> str:
        return f"bspk-{self.k}"

    def round_complete(self, arrived: Set[int], active: Set[int]) -> bool:
        return len(arrived & active) >= min(self.k, len(active))

    def refuses(self, computed_version: int, version: int) -> str | None:
        return DropReason.STALE_BEYOND_BOUND if computed_version < version else None


@pytest.fixture(autouse=True)
def k_of_n_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Registered for this file's tests only: the grammar's other tests see the built-ins.
    monkeypatch.setattr(base, "_REGISTERED", dict(base._REGISTERED))
    register_protocol(BspKOfN)
    yield


def test_the_grammar_reads_and_writes_the_new_protocol() -> None:
    schedule = Schedule.parse("bsp:0.5,bspk-3")
    assert schedule.phases[1].spec == BspKOfN(3)
    assert str(schedule) == "bsp:0.5,bspk-3"


def test_a_round_is_applied_at_the_kth_gradient_and_a_late_one_is_dropped() -> None:
    workers, numel = 4, 6
    config = SyncConfig(
        workers=workers, total_samples=10_000, schedule=Schedule.parse("bspk-3"), lr=0.1
    )
    sync = Synchronizer(config, FlatSGD(torch.zeros(numel)))
    sent = []
    for worker in range(3):
        gradient = Gradient(worker, 0, 0, torch.full((numel,), float(worker)), 8, 0.0, 0.0)
        sent.append(sync.submit(gradient))
    assert [len(o.applied) for o in sent] == [0, 0, 3]
    assert sorted(sent[-1].released) == [0, 1, 2] and sync.live.version == 1
    # The mean of 0, 1 and 2 (1) at lr 0.1 scaled by the 3 of 4 gradients the update holds.
    assert torch.allclose(sync.optimizer.weights, torch.full((numel,), -0.075))
    late = sync.submit(Gradient(3, 0, 0, torch.ones(numel), 8, 0.0, 0.0))
    assert [d.reason for d in late.dropped] == [DropReason.STALE_BEYOND_BOUND]
    assert late.released == [3]  # it goes on at once, with the newest weights
    accounting = sync.accounting()
    assert (accounting.sent, accounting.applied, accounting.unaccounted) == (4, 3, 0)


def test_it_trains_on_the_simulator_past_a_straggler_that_holds_bsp_up(tmp_path) -> None:
    data = load_dataset("mnist1d", mnist1d_samples=450).with_validation(1 / 9)
    job = dict(
        runtime="sim",
        workers=4,
        batch_size=8,
        epochs=2.0,
        step_time_ms=25.0,
        stragglers=[{"workers": [3], "start": 0.0, "duration": 1.0, "factor": 5.0}],
        divergence_guard=False,
    )
    bsp = run(tmp_path / "bsp", data, schedule="bsp", **job).summary
    k_of_n = run(tmp_path / "k", data, schedule="bsp:0.25,bspk-3", **job).summary
    assert [(s["from"], s["to"]) for s in k_of_n["switches"]] == [("bsp", "bspk-3")]
    assert k_of_n["gradients"]["dropped"]["stale_beyond_bound"] > 0
    assert accounted(k_of_n)
    # The 5x straggler sets BSP's pace; three of four workers set the rounds' after the switch.
    assert k_of_n["wall_time_s"] < 0.6 * bsp["wall_time_s"]  # SIMULATED seconds, both
