"""A run checkpoint's format: version 2 written, the unversioned layout (1) still resumed from,
anything newer refused in one line with the previous checkpoint used instead."""

import io
import shutil

import torch

from syncswitch.control.controller import CHECKPOINT_DIR
from syncswitch.control.record import RunRecord
from syncswitch.control.run_state import STATE_VERSION, RunCheckpoint, run_checkpoint
from syncswitch.core.checkpoint import CheckpointStore, RefusalKind
from syncswitch.core.protocol import BSP
from syncswitch.core.records import Action, Decision, SwitchEvent
from tests.control.scripted import ScriptedRun


def _rewrite_latest(run_dir, change) -> None:
    """Save the newest checkpoint again, changed, as the newest (as an older or newer
    syncswitch would have written it)."""
    store = CheckpointStore(run_dir / CHECKPOINT_DIR)
    loaded = store.load_latest()
    store.save(change(dict(loaded.state)), samples=loaded.info.samples, label=loaded.info.label)


def test_new_checkpoints_carry_the_format_version_and_read_back_typed(tmp_path):
    run = ScriptedRun(tmp_path, schedule="bsp:0.5,asp")
    run.run(stop_at=0.65)
    loaded = CheckpointStore(tmp_path / CHECKPOINT_DIR).load_latest()
    assert loaded.state["format_version"] == STATE_VERSION == 2
    checkpoint = RunCheckpoint.from_plain(loaded.state)
    assert len(checkpoint.servers) == 2 and checkpoint.samples == loaded.info.samples
    # The workload it was taken in, so a resume under a changed one can be refused.
    assert checkpoint.total_samples == run.controller.plan.total_samples
    assert checkpoint.to_plain().keys() == loaded.state.keys()


def test_a_checkpoint_in_the_unversioned_layout_resumes_exactly_as_a_new_one(tmp_path):
    ScriptedRun(tmp_path / "new", schedule="bsp:0.5,asp").run(stop_at=0.65)
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    _rewrite_latest(
        tmp_path / "old",
        lambda s: {k: v for k, v in s.items() if k not in ("format_version", "total_samples")},
    )
    assert (
        "format_version"
        not in CheckpointStore(tmp_path / "old" / CHECKPOINT_DIR)
        .load_latest(validate=RunCheckpoint.from_plain)
        .state
    )
    runs = [
        ScriptedRun(tmp_path / name, schedule="bsp:0.5,asp", resume=True).run()
        for name in ("new", "old")
    ]
    new, old = (run.summary for run in runs)
    assert new["status"] == old["status"] == "complete"
    for key in ("gradients", "switches", "samples", "updates", "samples_by_protocol"):
        assert new[key] == old[key], key
    assert runs[0].controller.record.metrics == runs[1].controller.record.metrics
    weights = [
        torch.load(tmp_path / n / "final_weights.pt")["flat_weights"] for n in ("new", "old")
    ]
    assert torch.equal(*weights)


def test_a_newer_format_is_refused_in_one_line_and_the_previous_checkpoint_used(tmp_path):
    ScriptedRun(tmp_path, schedule="bsp:0.5,asp").run(stop_at=0.65)
    store = CheckpointStore(tmp_path / CHECKPOINT_DIR)
    previous = store.load_latest().info
    _rewrite_latest(tmp_path, lambda s: {**s, "format_version": 3})
    loaded = store.load_latest(validate=RunCheckpoint.from_plain)
    [refusal] = loaded.refused
    assert refusal.kind is RefusalKind.WRONG_CONTENTS and "\n" not in refusal.reason
    assert "format_version 3; this code reads versions 1 to 2" in refusal.reason
    assert loaded.info.path == previous.path


def test_the_run_record_keeps_switches_and_decisions_typed_across_a_checkpoint():
    switch = SwitchEvent(0.25, 100, 7, "bsp", "asp", 1.5, 0.001, "schedule")
    decision = Decision(Action.ROLLBACK, "divergence_guard", "loss rose", 2.0, 0.3, None, BSP)
    quarantine = Decision(Action.QUARANTINE, "gradient_admission", "nan", 2.5, 0.31, worker=3)
    record = RunRecord(switches=[switch], decisions=[decision, quarantine], rollbacks=1)
    back = RunRecord.from_state(torch.load(_saved(record.to_state()), weights_only=True))
    assert back.switches == [switch] and back.decisions == [decision, quarantine]
    assert back.decisions[0].protocol == BSP and back.decisions[1].action is Action.QUARANTINE
    assert back.to_state() == record.to_state()


def _saved(plain):
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    buffer.seek(0)
    return buffer


def test_a_validated_load_parses_the_state_once_and_keeps_it(tmp_path):
    ScriptedRun(tmp_path, schedule="asp").run(stop_at=0.5)
    loaded = CheckpointStore(tmp_path / CHECKPOINT_DIR).load_latest(
        validate=RunCheckpoint.from_plain
    )
    assert isinstance(loaded.contents, RunCheckpoint)
    assert run_checkpoint(loaded) is loaded.contents
    unvalidated = CheckpointStore(tmp_path / CHECKPOINT_DIR).load_latest()
    assert unvalidated.contents is None
    assert run_checkpoint(unvalidated).samples == loaded.contents.samples
