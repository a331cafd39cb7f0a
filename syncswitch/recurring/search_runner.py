"""Running the switch-point search: trial trainings, stored as they finish, then the decision.

The pure search (`syncswitch.core.timing.fraction_search.next_step`) says which trials it
needs; this module runs them through a `Trainer` that the caller passes in (the CLI passes the
runtime's, `syncswitch.runtime.ray.search_trainer`: one `train()` per trial; several at once in
threads of this driver when the trainer has room), stores each in the registry the moment it
finishes, and stores the decision at the end. Before running anything it reads the job's
finished trials from the registry, so a search that was stopped resumes where it was: no
finished trial runs again.

The directories (`<search_dir>/<fingerprint[:12]>/trial-<fraction>-s<seed>/`, with the
markers that say which job made them) are laid out and checked in `search_dirs`.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from syncswitch.config import ConfigError, TrainConfig
from syncswitch.core.timing.fraction_search import (
    SearchDecision,
    SearchSpec,
    SearchSpecError,
    StepKind,
    TrialKey,
    format_fraction,
    next_step,
    schedule_for,
)
from syncswitch.errors import RunDirError
from syncswitch.files import write_json_atomic
from syncswitch.recurring.results import SearchResult, time_saved, trial_from_summary
from syncswitch.recurring.search_dirs import (
    DEFAULT_SEARCH_ROOT,
    JOB_MARKER,
    TRIAL_MARKER,
    SearchDirError,
    claim_job_dir,
    clear_unfinished,
    default_search_dir,
    job_search_dir,
    lock_job_dir,
    lstat_or_none,
    require_plain_dir,
    trial_dir,
)
from syncswitch.recurring.search_report import TraceWriter, write_report
from syncswitch.registry import (
    JobRecord,
    Registry,
    TrialRecord,
    TrialSource,
    describe_job,
    fingerprint,
)
from syncswitch.rundir import Summary, read_summary

__all__ = [
    "AUTO",
    "DEFAULT_SEARCH_ROOT",
    "JOB_MARKER",
    "MAX_PARALLEL_TRIALS",
    "TRIAL_MARKER",
    "SearchDirError",
    "SearchError",
    "SearchListener",
    "SearchOptions",
    "Trainer",
    "claim_job_dir",
    "default_search_dir",
    "job_search_dir",
    "run_search",
    "trial_dir",
]

AUTO = "auto"
# Trials at once: each is a whole training run with its own actors; past this a value is a
# typo (the machine or cluster is also checked before anything starts).
MAX_PARALLEL_TRIALS = 64


class SearchError(RuntimeError):
    """A trial failed; finished trials are stored, so rerunning the command resumes."""


@dataclass(frozen=True)
class SearchOptions:
    tolerance: float = 0.5  # accuracy points
    repeats: int = 2
    resolution: float = 1 / 64
    max_trials: int = 20
    parallel: int | str = 1  # trials at once, or "auto": as many as the cluster's CPUs allow
    search_dir: str | None = None  # default: searches; the job's files go in <fingerprint[:12]>/

    def __post_init__(self) -> None:
        valid_int = (
            isinstance(self.parallel, int)
            and not isinstance(self.parallel, bool)
            and 1 <= self.parallel <= MAX_PARALLEL_TRIALS
        )
        if self.parallel != AUTO and not valid_int:
            raise ConfigError(
                f"parallel = {self.parallel!r} is not allowed; it must be an integer in "
                f"1..{MAX_PARALLEL_TRIALS} or 'auto'"
            )

    def spec(self, base_seed: int) -> SearchSpec:
        try:
            return SearchSpec(
                tolerance_points=self.tolerance,
                repeats=self.repeats,
                resolution=self.resolution,
                max_trials=self.max_trials,
                base_seed=base_seed,
            )
        except SearchSpecError as error:
            raise ConfigError(str(error)) from None


class Trainer(Protocol):
    """Runs trials. The CLI passes the runtime's (`syncswitch.runtime.ray.search_trainer`), which
    trains each trial; tests may script accuracies instead."""

    def capacity(self, requested: int | str, config: TrainConfig) -> tuple[int, str]:
        """How many trials may run at once, and a line saying why."""
        ...

    def run(self, config: TrainConfig, source: dict[str, Any], started: threading.Event) -> Summary:
        """Train one trial; return its Summary. Set `started` once its model is built
        (the next trial is started only then; see `_Search._start`)."""
        ...

    def close(self) -> None: ...


class SearchListener(Protocol):
    def step(self, text: str) -> None: ...

    def trial_started(self, key: TrialKey, running: int) -> None: ...

    def trial_finished(self, run: TrialRecord) -> None: ...


class _Silent:
    def step(self, text: str) -> None:
        pass

    def trial_started(self, key: TrialKey, running: int) -> None:
        pass

    def trial_finished(self, run: TrialRecord) -> None:
        pass


def run_search(
    config: TrainConfig,
    options: SearchOptions,
    registry: Registry,
    *,
    trainer: Trainer,
    listener: SearchListener | None = None,
) -> SearchResult:
    """Search the job's switch point; store every trial and the decision in `registry`.

    One search works in a job's search directory at a time (two would run and clear the same
    trials): a second one, while the first is alive, is one SearchDirError line."""
    job_dir = job_search_dir(_search_root(options), fingerprint(config))
    with lock_job_dir(claim_job_dir(job_dir, fingerprint(config))):
        return _run_search(config, options, registry, trainer, listener)


def _search_root(options: SearchOptions) -> Path:
    return Path(options.search_dir) if options.search_dir else DEFAULT_SEARCH_ROOT


def _run_search(
    config: TrainConfig,
    options: SearchOptions,
    registry: Registry,
    trainer: Trainer,
    listener: SearchListener | None,
) -> SearchResult:
    spec = options.spec(config.seed)
    job_fp = fingerprint(config)
    description = describe_job(config)
    job = registry.ensure_job(job_fp, description)
    search_dir = claim_job_dir(job_search_dir(_search_root(options), job_fp), job_fp)
    listener = listener or _Silent()
    trace = TraceWriter(search_dir, job_fp, description, spec)
    known = {t.key: t for t in registry.trials(job) if t.complete}
    trace.start([run for key, run in sorted(known.items(), reverse=True) if key.seed in spec.seeds])
    try:
        slots, why = trainer.capacity(options.parallel, config)
        listener.step(why)
        if known:
            listener.step(
                f"{len(known)} finished trial(s) of job {job_fp[:12]} in the registry are "
                "reused, not rerun"
            )
        search = _Search(config, spec, registry, job, job_fp, search_dir, trainer, trace, known)
        decision = search.run(slots, listener)
    finally:
        trainer.close()
    stored = registry.record_decision(
        job,
        fraction=decision.fraction,
        tolerance=decision.tolerance_points,
        repeats=decision.repeats,
        evidence={
            **decision.to_plain(),
            "resolution": spec.resolution,
            "max_trials": spec.max_trials,
            "seeds": list(spec.seeds),
            "search_dir": str(search_dir),
        },
        reason=decision.reason,
    )
    result = SearchResult(
        fingerprint=job_fp,
        job=description,
        spec=spec,
        decision=decision,
        stored=stored,
        search_dir=search_dir,
        trace=trace.rows,
        trials=known,
        time_saved=time_saved(decision, known, spec),
        slots=slots,
    )
    result.files = write_report(result, trace)
    return result


class _Search:
    """The loop: ask the pure search what it needs, run it, record it, until it decides."""

    def __init__(
        self,
        config: TrainConfig,
        spec: SearchSpec,
        registry: Registry,
        job: JobRecord,
        job_fp: str,
        search_dir: Path,
        trainer: Trainer,
        trace: Any,
        known: dict[TrialKey, TrialRecord],
    ) -> None:
        self.config = config
        self.spec = spec
        self.registry = registry
        self.job = job
        self.job_fp = job_fp
        self.search_dir = search_dir
        self.trainer = trainer
        self.trace = trace
        self.known = known
        self.running: dict[Future, TrialKey] = {}
        self.concurrent: dict[TrialKey, int] = {}

    def run(self, slots: int, listener: SearchListener) -> SearchDecision:
        pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="trial")
        finished = False
        try:
            decision = self._loop(pool, slots, listener)
            finished = True
            return decision
        finally:
            # Stopped early (Ctrl-C, a failure): queued trials never start, and running ones
            # are not waited for; they end when the trainer is closed, and are redone on resume.
            pool.shutdown(wait=finished, cancel_futures=True)

    def _loop(
        self, pool: ThreadPoolExecutor, slots: int, listener: SearchListener
    ) -> SearchDecision:
        failures: list[str] = []
        while True:
            step = next_step(self.spec, self._accuracies())
            if step.kind is StepKind.RUN and not failures:
                listener.step(step.reason)
                for key in step.trials:
                    if len(self.running) >= slots:
                        break
                    if key in self.running.values():
                        continue
                    recovered = self._recover(key)
                    if recovered is not None:
                        self._finished(recovered, listener)
                        continue
                    self._start(pool, key)
                    listener.trial_started(key, len(self.running))
            if not self.running:
                if failures:
                    raise SearchError(
                        "; ".join(failures) + " - finished trials are stored: run the same "
                        "command again to resume"
                    )
                if step.kind is StepKind.DECIDE:
                    assert step.decision is not None
                    return step.decision
                continue  # trials recovered from disk changed what the search needs
            done, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for future in done:
                key = self.running.pop(future)
                run = self._collect(key, future)
                self._finished(run, listener)
                if not run.complete:
                    failures.append(
                        f"trial {format_fraction(key.fraction)} seed {key.seed} {run.status}"
                    )

    # -- trials ---------------------------------------------------------------------------

    def _accuracies(self) -> dict[TrialKey, float]:
        # `complete` means an accuracy too; the second test says so to the type checker.
        return {
            k: r.final_accuracy
            for k, r in self.known.items()
            if r.complete and r.final_accuracy is not None
        }

    def _trial_config(self, key: TrialKey) -> TrainConfig:
        # A trial's share is fixed: switch options are set aside (`with_schedule`).
        return self.config.with_schedule(
            schedule_for(key.fraction),
            seed=key.seed,
            out=str(trial_dir(self.search_dir, key)),
            progress=False,
        )

    def _source(self, key: TrialKey) -> dict[str, Any]:
        return {
            "kind": "search",
            "fingerprint": self.job_fp,
            "fraction": key.fraction,
            "seed": key.seed,
        }

    def _start(self, pool: ThreadPoolExecutor, key: TrialKey) -> None:
        directory = trial_dir(self.search_dir, key)
        clear_unfinished(directory, self._source(key))
        directory.mkdir()
        write_json_atomic(directory / TRIAL_MARKER, self._source(key))
        started = threading.Event()
        future = pool.submit(self.trainer.run, self._trial_config(key), self._source(key), started)
        self.running[future] = key
        for other in self.running.values():
            self.concurrent[other] = max(self.concurrent.get(other, 1), len(self.running))
        # Trials built in parallel threads would race on torch's global seed: start the next
        # one only after this one has built its initial model (a second or so).
        while not started.wait(0.05) and not future.done():
            pass

    def _collect(self, key: TrialKey, future: Future) -> TrialRecord:
        schedule = schedule_for(key.fraction)
        directory = str(trial_dir(self.search_dir, key))
        concurrent = self.concurrent.pop(key, 1)
        try:
            summary = future.result()
        except Exception as error:
            status = f"failed: {' '.join(str(error).split())[:160] or type(error).__name__}"
            return TrialRecord(
                key.fraction,
                key.seed,
                schedule,
                status,
                None,
                None,
                directory,
                concurrent=concurrent,
                source=TrialSource.RUN,
            )
        return trial_from_summary(
            key, schedule, summary, directory, source=TrialSource.RUN, concurrent=concurrent
        )

    def _recover(self, key: TrialKey) -> TrialRecord | None:
        """A trial that finished on disk but was not stored (stopped in between): keep it."""
        directory = trial_dir(self.search_dir, key)
        if lstat_or_none(directory) is not None:
            require_plain_dir(directory, "trial directory")
        try:
            # Checked as it is read; a summary that does not read is no finished trial.
            summary = read_summary(directory)
        except (OSError, RunDirError):
            return None
        source = summary.schedule_source or {}
        same = (
            summary.complete
            and summary.final_value is not None
            and source.get("kind") == "search"
            and source.get("fingerprint") == self.job_fp
            and source.get("fraction") == key.fraction
            and source.get("seed") == key.seed
        )
        if not same:
            return None
        return trial_from_summary(
            key, schedule_for(key.fraction), summary, str(directory), source=TrialSource.DISK
        )

    def _finished(self, run: TrialRecord, listener: SearchListener) -> None:
        # Stored first: once it is in the registry, no later search runs it again.
        self.registry.record_trial(self.job, run)
        if run.complete:
            self.known[run.key] = run
        self.trace.append(run)
        listener.trial_finished(run)
