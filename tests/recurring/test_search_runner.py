"""The search runner with a scripted trainer: storing, resuming, failures, parallel trials, report.

The trainer here returns scripted accuracies instead of training, so these tests check the
runner's bookkeeping in milliseconds; tests/recurring/test_search_e2e.py trains for real on Ray.
"""

import csv
import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from syncswitch.config import ConfigError, TrainConfig
from syncswitch.core.timing.fraction_search import SearchSpec, StepKind, TrialKey, next_step
from syncswitch.recurring.search_runner import SearchError, SearchOptions, run_search, trial_dir
from syncswitch.registry import Registry, TrialRecord, fingerprint
from syncswitch.rundir import Summary, names
from tests.rundir.samples import sample_summary


def accuracy_of(key: TrialKey) -> float:
    # Holds from 1/8 up; small per-seed noise that averages out.
    base = 0.96 if key.fraction >= 0.125 else 0.93
    return base + (0.002 if key.seed % 2 else -0.002)


def wall_of(key: TrialKey) -> float:
    return 20.0 + 80.0 * key.fraction  # BSP 100 s, ASP 20 s, linear in between


class ScriptedTrainer:
    def __init__(self, slots: int = 1, fail: set | None = None, stop_after: int | None = None):
        self.slots = slots
        self.fail = fail or set()
        self.stop_after = stop_after
        self.calls: list[TrialKey] = []
        self.max_running = 0
        self._running = 0
        self._lock = threading.Lock()

    def capacity(self, requested, config):
        return (self.slots if requested == "auto" else min(requested, self.slots)), "scripted"

    def run(self, config: TrainConfig, source: dict, started: threading.Event) -> Summary:
        key = TrialKey(source["fraction"], source["seed"])
        assert config.schedule == ("bsp" if key.fraction == 1 else f"bsp:{key.fraction!r},asp")
        assert config.seed == key.seed and not config.progress
        started.set()
        with self._lock:
            self.calls.append(key)
            if self.stop_after is not None and len(self.calls) > self.stop_after:
                raise KeyboardInterrupt  # as if the search were killed here
            self._running += 1
            self.max_running = max(self.max_running, self._running)
        try:
            time.sleep(0.02 if self.slots > 1 else 0)  # let parallel trials overlap
            if key in self.fail:
                raise RuntimeError("worker 1 died")
            # A run directory as train() leaves it.
            out = Path(config.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / names.CONFIG).write_text("{}")
            summary = sample_summary(
                final_value=accuracy_of(key),
                wall_time_s=wall_of(key),
                schedule_source=source,
                run_dir=str(out),
            )
            (out / names.SUMMARY).write_text(json.dumps(summary.to_plain()))
            return summary
        finally:
            with self._lock:
                self._running -= 1

    def close(self) -> None:
        pass


JOB = TrainConfig(workers=4, epochs=2.0, mnist1d_samples=1000, progress=False)


def search(tmp_path: Path, trainer, **options):
    values = dict(repeats=2, resolution=1 / 32, search_dir=str(tmp_path / "search"))
    values.update(options)
    registry = Registry(tmp_path / "registry.db")
    try:
        return run_search(JOB, SearchOptions(**values), registry, trainer=trainer)
    finally:
        registry.close()


def job_dir(tmp_path: Path, job: TrainConfig = JOB) -> Path:
    return tmp_path / "search" / fingerprint(job)[:12]


def expected_decision(**spec):
    values = dict(repeats=2, resolution=1 / 32)
    values.update(spec)
    results: dict = {}
    while (step := next_step(SearchSpec(**values), results)).kind is StepKind.RUN:
        results.update({k: accuracy_of(k) for k in step.trials})
    return step.decision


def test_search_stores_every_trial_and_the_decision_and_writes_the_report(tmp_path) -> None:
    trainer = ScriptedTrainer()
    result = search(tmp_path, trainer)
    decision = result.decision
    assert decision == expected_decision()
    assert decision.fraction == 0.125  # 1/16 fails, 3/32 fails, 1/8 is within 1/32 of it
    assert len(trainer.calls) == len(set(trainer.calls)) == decision.trials_used
    with Registry(tmp_path / "registry.db") as registry:
        job = registry.job(fingerprint(JOB))
        assert len(registry.trials(job)) == decision.trials_used
        stored = registry.latest_decision(job)
        assert stored.id == result.stored.id and stored.fraction == 0.125
        assert stored.evidence["tried"][0]["label"] == "1/2" and stored.reason == decision.reason
    # Time saved: the chosen fraction's mean wall time against BSP's.
    saved = result.time_saved
    assert (saved.bsp_wall_s, saved.chosen_wall_s) == (100.0, 30.0) and saved.comparable
    # The report files, in the job's own directory under the (shareable) search dir.
    directory = tmp_path / "search" / fingerprint(JOB)[:12]
    assert result.search_dir == directory
    with (directory / "trace.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == decision.trials_used and {r["source"] for r in rows} == {"run"}
    trace = json.loads((directory / "trace.json").read_text())
    assert trace["decision"]["label"] == "1/8" and trace["time_saved"]["speedup"] == pytest.approx(
        100 / 30
    )
    table = (directory / "trace.md").read_text()
    assert "| **1/8 (chosen)** |" in table and "70.0 s saved" in table
    assert table.count("\n| ") == 1 + len(decision.evidence)  # BSP, then each fraction tried
    assert (directory / "accuracy_vs_fraction.png").read_bytes()[:4] == b"\x89PNG"
    assert trial_dir(directory, TrialKey(0.09375, 1)).name == "trial-0.09375-s1"


def test_a_stopped_search_resumes_without_rerunning_finished_trials(tmp_path) -> None:
    first = ScriptedTrainer(stop_after=5)
    with pytest.raises(KeyboardInterrupt):
        search(tmp_path, first)
    finished = first.calls[:5]
    second = ScriptedTrainer()
    result = search(tmp_path, second)
    assert not set(finished) & set(second.calls)
    assert len(finished) + len(second.calls) == result.decision.trials_used
    assert result.decision == expected_decision()
    sources = [r.source for r in result.trace]
    assert sources.count("registry") == 5
    # A third run has nothing left to do and finds the same decision already stored.
    third = ScriptedTrainer()
    again = search(tmp_path, third)
    assert third.calls == [] and again.stored.id == result.stored.id


def test_a_trial_finished_on_disk_but_not_stored_is_not_rerun(tmp_path) -> None:
    first = ScriptedTrainer(stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        search(tmp_path, first, repeats=1)
    # As if killed between the training's end and the registry write:
    key = first.calls[0]
    with Registry(tmp_path / "registry.db") as registry:
        job = registry.job(fingerprint(JOB))
        assert len(registry.trials(job)) == 2
    missed = TrialKey(0.25, 0)
    ScriptedTrainer().run(
        replace(JOB, schedule="bsp:0.25,asp", out=str(trial_dir(job_dir(tmp_path), missed))),
        {"kind": "search", "fingerprint": fingerprint(JOB), "fraction": 0.25, "seed": 0},
        threading.Event(),
    )
    second = ScriptedTrainer()
    result = search(tmp_path, second, repeats=1)
    assert missed not in second.calls and key not in second.calls
    assert [r.source for r in result.trace if r.key == missed] == ["disk"]


def test_a_failed_trial_stops_the_search_in_one_line_and_is_rerun_later(tmp_path) -> None:
    broken = TrialKey(0.25, 1)
    with pytest.raises(SearchError) as error:
        search(tmp_path, ScriptedTrainer(fail={broken}))
    message = str(error.value)
    assert "trial 1/4 seed 1 failed: worker 1 died" in message and "resume" in message
    assert "\n" not in message
    with Registry(tmp_path / "registry.db") as registry:
        statuses = {
            (t.fraction, t.seed): t.status for t in registry.trials(registry.job(fingerprint(JOB)))
        }
    assert statuses[(0.25, 1)].startswith("failed")
    retry = ScriptedTrainer()
    result = search(tmp_path, retry)
    assert broken in retry.calls and TrialKey(0.25, 0) not in retry.calls
    assert result.decision == expected_decision()


def test_parallel_trials_run_together_and_their_times_are_flagged(tmp_path) -> None:
    trainer = ScriptedTrainer(slots=4)
    result = search(tmp_path, trainer, parallel="auto")
    assert result.slots == 4 and trainer.max_running > 1
    assert result.decision == expected_decision()  # the same path, just faster
    assert not result.time_saved.comparable
    assert "not comparable" in (job_dir(tmp_path) / "trace.md").read_text()
    assert max(r.concurrent for r in result.trace) > 1


def test_trials_stored_by_another_search_of_the_same_job_are_reused(tmp_path) -> None:
    with Registry(tmp_path / "registry.db") as registry:
        job = registry.ensure_job(fingerprint(JOB), {})
        for seed in (0, 1):
            key = TrialKey(1.0, seed)
            registry.record_trial(
                job,
                TrialRecord(1.0, seed, "bsp", "complete", accuracy_of(key), 100.0, "/elsewhere"),
            )
    trainer = ScriptedTrainer()
    search(tmp_path, trainer)
    assert all(k.fraction != 1.0 for k in trainer.calls)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"parallel": 0}, "parallel = 0"),
        ({"parallel": "many"}, "'auto'"),
        ({"tolerance": -0.5}, "tolerance = -0.5"),
        ({"max_trials": 2}, "max_trials = 2"),
    ],
)
def test_bad_options_are_config_errors(tmp_path, options, fragment) -> None:
    with pytest.raises(ConfigError) as error:
        search(tmp_path, ScriptedTrainer(), **options)
    assert fragment in str(error.value)
