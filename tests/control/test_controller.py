"""The run controller through every path, driven by a scripted runtime (no Ray, no processes).

Real server shards (synchronizer, ledger, checkpoints) on a virtual clock; only the workers
are scripted. Each test reads what the controller decided and what the run directory holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncswitch.control.controller import RunPhase
from syncswitch.control.decisions import (
    FinishShards,
    KillWorker,
    RestartWorker,
    RestoreServers,
    RollBack,
    StartWorker,
)
from syncswitch.core.sync.protocol import BSP
from tests.control.scripted import ScriptedRun, Stopped


def accounted(summary: dict) -> None:
    acct = summary["gradients"]
    assert acct["unaccounted"] == 0
    assert acct["sent"] == acct["applied"] + sum(acct["dropped"].values())


def events(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def decisions_of(run: ScriptedRun, kind: type) -> list:
    return [d for step in run.steps for d in step.decisions if isinstance(d, kind)]


def test_a_run_with_several_switches_follows_its_schedule_to_the_end(tmp_path):
    run = ScriptedRun(tmp_path, schedule="bsp:0.25,asp:0.5,ssp-2:0.75,bsp").run()
    summary = run.summary
    assert summary["status"] == "complete" and run.controller.phase is RunPhase.FINISHED
    assert [(s["from"], s["to"]) for s in summary["switches"]] == [
        ("bsp", "asp"),
        ("asp", "ssp-2"),
        ("ssp-2", "bsp"),
    ]
    assert [m.fraction for m in run.controller.record.metrics] == [0.25, 0.5, 0.75, 1.0]
    assert summary["final_value"] > 0.5  # the quadratic's target is approached
    accounted(summary)
    # The first step starts every worker; the phases go STARTING -> TRAINING -> FINISHING.
    first = run.steps[0]
    assert (first.before, first.after) == (RunPhase.STARTING, RunPhase.TRAINING)
    assert [d.worker for d in first.decisions if isinstance(d, StartWorker)] == [0, 1, 2, 3]
    assert any(s.after is RunPhase.FINISHING for s in run.steps)


@pytest.mark.parametrize(
    ("schedule", "at", "protocol"),
    [("bsp:0.5,asp", 0.2, "bsp"), ("bsp:0.5,asp", 0.7, "asp"), ("bsp:0.5,asp", 0.5, "asp")],
    ids=["mid-bsp", "mid-asp", "at-the-switch"],
)
def test_a_dead_worker_is_restarted_and_the_run_completes(tmp_path, schedule, at, protocol):
    run = ScriptedRun(tmp_path, schedule=schedule, script={at: lambda r: r.kill_worker(2)}).run()
    [restart] = decisions_of(run, RestartWorker)
    assert restart.worker == 2 and restart.restart == 1 and "died" in restart.reason
    [failure] = [f for f in run.summary["reliability"]["failures"] if f["kind"] == "worker"]
    assert failure["worker"] == 2 and failure["at_fraction"] >= at
    restarted = [d for d in decisions_of(run, StartWorker) if d.worker == 2]
    assert [d.incarnation for d in restarted] == [0, 1]
    assert run.summary["status"] == "complete"
    accounted(run.summary)


def test_a_worker_failing_too_often_stops_the_run(tmp_path):
    script = {0.1: lambda r: r.kill_worker(1), 0.2: lambda r: r.kill_worker(1)}
    run = ScriptedRun(tmp_path, schedule="asp", max_worker_restarts=1, script=script)
    with pytest.raises(Stopped, match=r"worker 1 failed 2 times \(max_worker_restarts = 1\)"):
        run.run()
    assert run.controller.phase is RunPhase.FAILED


def test_a_hung_worker_is_killed_once_then_restarted(tmp_path):
    run = ScriptedRun(
        tmp_path, schedule="bsp", worker_timeout_s=0.3, script={0.3: lambda r: r.hang_worker(0)}
    ).run()
    [kill] = decisions_of(run, KillWorker)
    assert kill.worker == 0
    [hung] = events(tmp_path, "worker_hung")
    assert hung["worker"] == 0 and hung["silent_s"] >= 0.3
    [restart] = decisions_of(run, RestartWorker)
    assert restart.worker == 0 and restart.reason.startswith("hung")
    assert run.summary["status"] == "complete"
    accounted(run.summary)


def test_dead_servers_are_restored_from_the_last_checkpoint(tmp_path):
    run = ScriptedRun(tmp_path, schedule="bsp:0.5,asp", script={0.63: ScriptedRun.kill_servers})
    run.run()
    restore_steps = [
        s for s in run.steps if any(isinstance(d, RestoreServers) for d in s.decisions)
    ]
    assert [(s.before, s.after) for s in restore_steps] == [
        (RunPhase.TRAINING, RunPhase.RECOVERING)
    ]
    # ... and once the new shards are up, every unfinished worker trains on against them.
    back = run.steps[run.steps.index(restore_steps[0]) + 1]
    assert (back.before, back.after) == (RunPhase.RECOVERING, RunPhase.TRAINING)
    assert sorted(d.worker for d in back.decisions) == [0, 1, 2, 3]
    [failure] = [f for f in run.summary["reliability"]["failures"] if f["kind"] == "server"]
    assert failure["recovery"].startswith("restored from checkpoint-")
    assert 0 < failure["samples_lost"] <= 0.1 * run.plan.total_samples + 32
    assert run.summary["status"] == "complete"
    accounted(run.summary)


def test_dead_servers_without_a_checkpoint_stop_the_run(tmp_path):
    run = ScriptedRun(
        tmp_path, schedule="bsp", checkpoint_every=0.0, script={0.3: ScriptedRun.kill_servers}
    )
    with pytest.raises(Stopped, match="no checkpoint to recover from"):
        run.run()


def test_a_diverging_loss_is_rolled_back_and_pinned_to_bsp(tmp_path):
    def blow_up(run: ScriptedRun) -> None:
        run.loss_offset = 50.0

    run = ScriptedRun(tmp_path, schedule="bsp:0.5,asp", epochs=8.0, script={0.6: blow_up}).run()
    [rollback] = decisions_of(run, RollBack)
    assert rollback.protocol == BSP and rollback.lr_scale == 0.5
    step = next(s for s in run.steps if rollback in s.decisions)
    assert (step.before, step.after) == (RunPhase.TRAINING, RunPhase.ROLLING_BACK)
    reliability = run.summary["reliability"]
    assert reliability["rollbacks"] == 1 and reliability["pinned_protocol"] == "bsp"
    [logged] = [d for d in reliability["decisions"] if d["action"] == "rollback"]
    assert "restored checkpoint-" in logged["reason"] and logged["progress"] >= 0.6
    assert run.summary["switches"][-1]["to"] == "bsp"
    accounted(run.summary)


def test_elastic_excludes_a_straggler_on_every_shard_and_readmits_it(tmp_path):
    def slow(run: ScriptedRun) -> None:
        run.slow[3] = 5.0

    def recover(run: ScriptedRun) -> None:
        run.slow.pop(3)

    run = ScriptedRun(
        tmp_path,
        schedule="bsp",
        servers=3,
        epochs=10.0,
        online_policy="elastic",
        script={0.2: slow, 0.5: recover},
    ).run()
    online = run.summary["online"]
    assert [(d["action"], d["worker"]) for d in online["decisions"]] == [
        ("exclude", 3),
        ("readmit", 3),
    ]
    assert online["detections"] == 1 and online["excluded_at_end"] == []
    # Every shard followed the one decision: the same gradients were left out everywhere.
    dropped = [s.sync.accounting().dropped.get("straggler_excluded", 0) for s in run.shards]
    assert dropped[0] > 0 and len(set(dropped)) == 1
    versions = {s.sync.live.version for s in run.shards}
    assert len(versions) == 1
    accounted(run.summary)


def test_greedy_leaves_bsp_for_asp_when_a_straggler_appears(tmp_path):
    def slow(run: ScriptedRun) -> None:
        run.slow[1] = 5.0

    run = ScriptedRun(
        tmp_path,
        schedule="bsp:0.5,asp",
        servers=2,
        epochs=10.0,
        online_policy="greedy",
        script={0.1: slow},
    ).run()
    assert [d["action"] for d in run.summary["online"]["decisions"]] == ["switch"]
    assert [s["reason"].split(":")[0] for s in run.summary["switches"]] == ["greedy switch"]
    assert all(s.sync.live.spec.name == "asp" for s in run.shards)
    accounted(run.summary)


def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    first = ScriptedRun(tmp_path, schedule="bsp:0.5,asp").run(stop_at=0.65)
    assert first.summary is None  # the driver "died": no final summary
    resumed = ScriptedRun(tmp_path, schedule="bsp:0.5,asp", resume=True).run()
    summary = resumed.summary
    assert summary["status"] == "complete"
    [resume] = [f for f in summary["reliability"]["failures"] if f["kind"] == "resumed"]
    assert 0.5 <= resume["checkpoint"]["meta"]["progress"] <= 0.65
    # The switch at 0.5 happened before the checkpoint and is carried over, not repeated.
    assert [s["to"] for s in summary["switches"]] == ["asp"]
    assert [m.fraction for m in resumed.controller.record.metrics] == [0.25, 0.5, 0.75, 1.0]
    accounted(summary)


def test_every_worker_quarantined_stops_the_run_as_stalled(tmp_path):
    def poison(run: ScriptedRun) -> None:
        run.loss_offset = float("nan")  # not a gradient problem: the guard sees it ...
        for shard in run.shards:  # ... and every shard quarantines every worker
            for worker in range(run.config.workers):
                for _ in range(3):
                    shard.sync.quarantine.observe(worker, "non_finite")

    run = ScriptedRun(tmp_path, schedule="asp", divergence_guard=False, script={0.3: poison})
    with pytest.raises(Stopped, match=r"every worker \(4\) is quarantined"):
        run.run()
    stop = run.steps[-1]
    assert stop.after is RunPhase.FAILED and stop.decisions[0].stalled


def test_timed_checkpoints_follow_the_injected_clock(tmp_path):
    run = ScriptedRun(
        tmp_path, schedule="bsp", epochs=10.0, checkpoint_every=0.0, checkpoint_every_s=0.5
    )
    run.run()
    timed = [e for e in events(tmp_path, "checkpoint") if e["label"] == "timed"]
    # Rounds advance the clock by 0.02 s: about one timed checkpoint per 0.5 s of run.
    assert len(timed) >= 2
    assert run.summary["reliability"]["checkpoints"] == len(events(tmp_path, "checkpoint"))


def test_one_shard_done_ends_the_workload_on_every_shard(tmp_path):
    # Shards that dropped a gradient differently (a policy decision reaching them a moment
    # apart) can be a few samples apart; workers stop on the first "done", so the others end
    # too instead of holding workers at a barrier.
    run = ScriptedRun(tmp_path, schedule="bsp", servers=2)
    behind = run.shards[1]
    behind.sync.live.samples -= 8  # one worker batch behind the first shard
    run.run()
    finish = [s for s in run.steps if any(isinstance(d, FinishShards) for d in s.decisions)]
    assert len(finish) == 1
    assert all(shard.sync.live.done for shard in run.shards)
    assert [m.fraction for m in run.controller.record.metrics] == [0.25, 0.5, 0.75, 1.0]
    assert run.summary["status"] == "complete"
    accounted(run.summary)


def test_where_the_actors_run_goes_to_the_summary_and_each_change_is_logged(tmp_path):
    run = ScriptedRun(tmp_path, schedule="bsp")
    first = {"placement": "spread", "node_ids": ["a", "b"], "nodes_seen": ["a", "b"]}
    moved = {"placement": "spread", "node_ids": ["b"], "nodes_seen": ["a", "b"]}
    for placement in (first, first, moved):  # the runtime reports; a repeat is no change
        step = run.controller.on_placed(placement)
        assert step.decisions == [] and step.before is step.after
    run.run()
    assert run.summary["placement"] == moved
    logged = [{k: v for k, v in e.items() if k != "event"} for e in events(tmp_path, "placement")]
    assert logged == [first, moved]


def test_a_run_failing_before_its_first_drain_still_writes_its_summary(tmp_path):
    # The actors did not start: no shard has reported, so no gradient was sent.
    run = ScriptedRun(tmp_path, schedule="bsp")
    run.controller.fail(RuntimeError("actors did not start"))
    run.writer.close()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"].startswith("failed: RuntimeError")
    assert summary["gradients"]["sent"] == 0 and summary["gradients"]["applied"] == 0
    assert run.controller.phase is RunPhase.FAILED
