"""`carry_out` tells online timing's switch from a straggler policy's by its type."""

from __future__ import annotations

import pytest
import torch

from syncswitch.core.stragglers.monitor import carry_out
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.records import Action, Decision, EndOnlinePhase
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.core.timing.rules import TIMING_POLICY


def _online_sync() -> Synchronizer:
    config = SyncConfig(
        workers=4, total_samples=4 * 4 * 100, schedule=Schedule.parse("bsp:online,asp"), lr=0.1
    )
    return Synchronizer(config, FlatSGD(torch.zeros(3)), clock=lambda: 0.0)


def test_end_online_phase_is_recorded_as_the_timing_switch_it_was() -> None:
    end = EndOnlinePhase.at("switch at 0.300 (staleness_noise: signal)", 1.5, 0.3, ASP)
    plain = Decision(Action.SWITCH, TIMING_POLICY, end.reason, 1.5, 0.3, protocol=ASP)
    assert end.to_plain() == plain.to_plain()
    assert end.to_plain()["policy"] == "online_timing" and end.to_plain()["action"] == "switch"


def test_end_online_phase_is_only_a_timing_switch() -> None:
    with pytest.raises(ValueError, match="online timing only switches"):
        EndOnlinePhase(Action.EXCLUDE, TIMING_POLICY, "no", 0.0, 0.0, worker=1)
    with pytest.raises(ValueError, match="online timing only switches"):
        EndOnlinePhase(Action.SWITCH, "greedy", "no", 0.0, 0.0, protocol=ASP)


def test_carry_out_ends_the_online_phase_on_the_typed_decision() -> None:
    sync = _online_sync()
    outcome = carry_out(sync, EndOnlinePhase.at("the rule fired", 0.0, 0.0, ASP))
    assert [s.reason for s in outcome.switches] == ["online_timing: the rule fired"]
    assert sync.live.spec == ASP


def test_a_policy_switch_is_not_the_end_of_the_online_phase() -> None:
    sync = _online_sync()
    greedy = Decision(Action.SWITCH, "greedy", "straggler during BSP", 0.0, 0.0, protocol=ASP)
    outcome = carry_out(sync, greedy)
    assert [s.reason for s in outcome.switches] == ["greedy switch: straggler during BSP"]
