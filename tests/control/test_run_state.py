"""A run checkpoint's format: version 2 written, the unversioned layout (1) still resumed from,
anything newer refused in one line with the previous checkpoint used instead."""

import io
import shutil

import pytest
import torch

from syncswitch.control.controller import CHECKPOINT_DIR
from syncswitch.control.evaluations import MetricsRow
from syncswitch.control.record import RunRecord
from syncswitch.control.run_state import STATE_VERSION, RunCheckpoint, run_checkpoint
from syncswitch.core.reliability.checkpoints import CheckpointStore, RefusalKind
from syncswitch.core.stragglers.detector import EventKind, StragglerRecord
from syncswitch.core.sync.protocol import BSP
from syncswitch.core.sync.records import Action, Decision
from syncswitch.core.sync.state import StateFormatError
from syncswitch.records import Switch
from syncswitch.records.failures import Resumption, ServerFailure, WorkerFailure
from tests.control.scripted import ScriptedRun
from tests.security.helpers import valid_state


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
    switch = Switch(0.25, 100, 7, "bsp", "asp", 1.5, 0.001, "schedule")
    decision = Decision(Action.ROLLBACK, "divergence_guard", "loss rose", 2.0, 0.3, None, BSP)
    quarantine = Decision(Action.QUARANTINE, "gradient_admission", "nan", 2.5, 0.31, worker=3)
    record = RunRecord(switches=[switch], decisions=[decision, quarantine], rollbacks=1)
    back = RunRecord.from_plain(torch.load(_saved(record.to_plain()), weights_only=True))
    assert back.switches == [switch] and back.decisions == [decision, quarantine]
    assert back.decisions[0].protocol == BSP and back.decisions[1].action is Action.QUARANTINE
    assert back.to_plain() == record.to_plain()


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


def _typed_record() -> RunRecord:
    """A record holding one of each kind of row, event and failure entry."""
    return RunRecord(
        metrics=[
            MetricsRow(0.0, 0, 0.0, 0, "bsp", {"accuracy": 0.1, "loss": 2.3}, 2.4, None, "test"),
            MetricsRow(
                1.5, 320, 1.0, 40, "asp", {"accuracy": 0.9, "loss": 0.2}, 0.25, 213.33, "test"
            ),
        ],
        straggler_events=[
            StragglerRecord(EventKind.DETECTED, 3, 5.1, 0.5, 0.26, "slow", 0, False, 0.12, 0.06),
            StragglerRecord(EventKind.RECOVERED, 3, 1.02, 1.26, 0.545, "back", 0, delay_s=0.12),
            StragglerRecord(EventKind.DETECTED, 2, 5.05, 1.5, 0.655, "slow", false_detection=True),
            StragglerRecord(EventKind.RECOVERED, 2, 1.01, 1.98, 0.8375, "back"),
        ],
        failures=[
            WorkerFailure(2, "died (killed)", 1, 0.2, 0.18, "restarted"),
            ServerFailure("servers died", 0.6375, "restored from c-6.pt", 768, 48, ("c-7.pt: x",)),
            Resumption({"file": "c-6.pt", "samples": 768, "meta": {"progress": 0.6}}, ()),
        ],
    )


# The plain layout these entries have always had in checkpoints, events.jsonl, metrics.csv
# and summary.json, key order included.
_PLAIN = {
    "metrics": [
        {
            "time_s": 0.0,
            "samples": 0,
            "fraction": 0.0,
            "version": 0,
            "protocol": "bsp",
            "test_accuracy": 0.1,
            "test_loss": 2.3,
            "train_loss": 2.4,
            "samples_per_s": "",
        },
        {
            "time_s": 1.5,
            "samples": 320,
            "fraction": 1.0,
            "version": 40,
            "protocol": "asp",
            "test_accuracy": 0.9,
            "test_loss": 0.2,
            "train_loss": 0.25,
            "samples_per_s": 213.33,
        },
    ],
    "straggler_events": [
        {
            "event": "straggler_detected",
            "worker": 3,
            "ratio": 5.1,
            "time_s": 0.5,
            "progress": 0.26,
            "reason": "slow",
            "episode": 0,
            "false_detection": False,
            "delay_s": 0.12,
            "delay_fraction": 0.06,
        },
        {
            "event": "straggler_recovered",
            "worker": 3,
            "ratio": 1.02,
            "time_s": 1.26,
            "progress": 0.545,
            "reason": "back",
            "episode": 0,
            "delay_s": 0.12,
        },
        {
            "event": "straggler_detected",
            "worker": 2,
            "ratio": 5.05,
            "time_s": 1.5,
            "progress": 0.655,
            "reason": "slow",
            "false_detection": True,
        },
        {
            "event": "straggler_recovered",
            "worker": 2,
            "ratio": 1.01,
            "time_s": 1.98,
            "progress": 0.8375,
            "reason": "back",
        },
    ],
    "failures": [
        {
            "kind": "worker",
            "worker": 2,
            "reason": "died (killed)",
            "restart": 1,
            "at_fraction": 0.2,
            "time_s": 0.18,
            "recovery": "restarted",
        },
        {
            "kind": "server",
            "reason": "servers died",
            "at_fraction": 0.6375,
            "recovery": "restored from c-6.pt",
            "checkpoint_samples": 768,
            "samples_lost": 48,
            "refused_checkpoints": ["c-7.pt: x"],
        },
        {
            "kind": "resumed",
            "checkpoint": {"file": "c-6.pt", "samples": 768, "meta": {"progress": 0.6}},
            "refused_checkpoints": [],
        },
    ],
}


def test_rows_events_and_failures_keep_their_plain_layout_across_a_checkpoint():
    record = _typed_record()
    state = record.to_plain()
    for name, plain in _PLAIN.items():
        assert state[name] == plain, name
        assert [list(entry) for entry in state[name]] == [list(entry) for entry in plain], name
    back = RunRecord.from_plain(torch.load(_saved(state), weights_only=True))
    assert back.metrics == record.metrics
    assert back.straggler_events == record.straggler_events
    assert back.failures == record.failures
    assert back.final_metric() == record.metrics[-1]
    assert repr(back.to_plain()) == repr(state)  # values and their types, as saved


@pytest.mark.parametrize(
    ("name", "damage", "message"),
    [
        # The messages ResumeCheck gave before the entries were typed.
        ("metrics", lambda rows: [*rows, "row"], "a metrics row is not a mapping"),
        ("metrics", lambda rows: [{**rows[0], "samples": "many"}], "samples = 'many'"),
        ("metrics", lambda rows: [{**rows[0], "fraction": True}], "fraction = True"),
        ("metrics", lambda rows: [{**rows[0], "test_loss": "low"}], "test_loss = 'low'"),
        (
            "metrics",
            lambda rows: [{k: v for k, v in rows[0].items() if not k.startswith("test_")}],
            "a metrics row has no measures",
        ),
        ("straggler_events", lambda events: [*events, 3], "must be a list of mappings"),
        ("failures", lambda entries: [*entries, None], "failures must be a list of mappings"),
        # What got through before and tripped a later reader.
        ("metrics", lambda rows: [{**rows[0], "protocol": None}], "protocol = None"),
        ("straggler_events", lambda events: [{**events[0], "event": "slow"}], "named 'slow'"),
        ("straggler_events", lambda events: [{"event": "straggler_detected"}], "missing 'worker'"),
        ("failures", lambda entries: [{**entries[0], "kind": "meteor"}], "kind = 'meteor'"),
        ("failures", lambda entries: [{**entries[1], "refused_checkpoints": "x"}], "strings"),
    ],
)
def test_a_malformed_record_entry_is_refused_in_one_line(name, damage, message):
    controller = _typed_record().to_plain()
    controller[name] = damage(controller[name])
    with pytest.raises(StateFormatError) as raised:
        RunCheckpoint.from_plain({**valid_state(), "controller": controller})
    text = str(raised.value)
    assert text.startswith("controller record: ") and message in text and "\n" not in text
