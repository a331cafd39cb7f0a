"""The coordinator: starts the actors, follows the run, writes every result as it arrives.

Protocol decisions happen in the parameter server's synchronizer at version boundaries; the
coordinator stays off the critical path. Every `_POLL_S` it drains what happened from the
servers (updates, switches, evaluation points, snapshots), hands snapshots to the evaluator and
to the checkpoint store, and acts on what went wrong:

- a worker that died is restarted through Ray (its actor is restartable) and rejoins at the
  current version; one that hangs (silent for `worker_timeout_s` while not held by the server)
  is killed first. BSP stops waiting for it meanwhile, ASP simply goes on;
- a parameter server that died is replaced by one restored from the last checkpoint, and the
  workers continue against it: at most one checkpoint interval of work is lost;
- a diverging loss makes the divergence guard roll the servers back to the last good
  checkpoint and pin the run to BSP at a lower learning rate.
Each of these is logged in events.jsonl and summarised in summary.json.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
import torch.nn.functional as F
from ray.exceptions import (
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
    RayTaskError,
)

from syncswitch.config import TrainConfig
from syncswitch.core.checkpoint import CheckpointError, CheckpointStore, LoadedCheckpoint
from syncswitch.core.divergence import (
    DivergenceGuard,
    GiveUp,
    GuardConfig,
    RollbackConfig,
    rollback_decision,
)
from syncswitch.core.hyperparams import MomentumPolicy
from syncswitch.core.online import OnlineMonitor
from syncswitch.core.optimizer import flatten_parameters
from syncswitch.core.records import Decision, EvalPoint, Snapshot
from syncswitch.core.sharding import parameter_shards
from syncswitch.core.synchronizer import SyncConfig
from syncswitch.errors import ConfigError, TrainingStalled
from syncswitch.files import write_json_atomic
from syncswitch.loggers import make_loggers
from syncswitch.results import RunWriter, default_run_dir
from syncswitch.runtime.evaluator import Evaluator
from syncswitch.runtime.progress import ProgressDisplay
from syncswitch.runtime.ray_setup import actor_options, connect
from syncswitch.runtime.run_record import RunRecord
from syncswitch.runtime.server import ParameterServer
from syncswitch.runtime.summary import RunFacts, build_summary
from syncswitch.runtime.worker import Worker, WorkerSpec, join_replies
from syncswitch.workloads import ArrayDataset, build_model, load_dataset

_POLL_S = 0.1
_STARTUP_TIMEOUT_S = 300.0
CHECKPOINT_DIR = "checkpoints"


@dataclass
class RunResult:
    summary: dict[str, Any]
    run_dir: Path
    final_weights: np.ndarray


@dataclass(frozen=True)
class BuiltinModel:
    """A picklable model factory for the built-in models (carries no training data)."""

    name: str
    dataset: ArrayDataset

    def __call__(self) -> torch.nn.Module:
        return build_model(self.name, self.dataset)


def train(
    config: TrainConfig,
    *,
    model_factory: Callable[[], torch.nn.Module] | None = None,
    dataset: ArrayDataset | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    schedule_source: dict[str, Any] | None = None,
    resume: bool = False,
) -> RunResult:
    """Train one job and return its summary; results are written to the run directory.

    `schedule_source` says where the schedule came from (e.g. a stored timing decision); it
    is written to summary.json as is, and defaults to `{"kind": "given"}`. With `resume`, the
    run continues in `config.out` from its last good checkpoint, appending to its files.
    """
    config.validate()
    dataset = dataset or load_dataset(
        config.dataset, config.data_dir, mnist1d_samples=config.mnist1d_samples
    )
    if model_factory is None:
        model_factory = BuiltinModel(config.model_name, _shape_only(dataset))
    run_dir = Path(config.out or default_run_dir(config.schedule))
    checkpoint = load_resume_checkpoint(run_dir) if resume else refuse_used_run_dir(run_dir)
    writer = RunWriter(
        run_dir,
        config.to_dict(),
        config.emulation().describe(),
        faults=config.fault_plan().describe(),
        resume_at=_resume_point(checkpoint),
        loggers=make_loggers(config, run_dir),
    )
    started_ray = connect(config.ray_address, min_cpus=config.workers + config.servers + 1)
    try:
        run = _Run(config, dataset, model_factory, loss_fn, writer, checkpoint)
        run.schedule_source = schedule_source or {"kind": "given"}
        return run.execute()
    finally:
        writer.close()
        if started_ray:
            ray.shutdown()


def refuse_used_run_dir(run_dir: Path) -> None:
    """A new run never writes into an earlier run's directory.

    Its files would append to the old ones, and the old checkpoints would be taken for its
    own by a server recovery or a divergence rollback before it has written any.
    """
    used = [n for n in ("config.json", "summary.json", CHECKPOINT_DIR) if (run_dir / n).exists()]
    if used:
        raise ConfigError(
            f"--out {str(run_dir)!r} already holds a run ({', '.join(used)}); choose another "
            f"directory, remove this one, or continue that run with --resume {run_dir}"
        )


def load_resume_checkpoint(run_dir: Path) -> LoadedCheckpoint:
    """The last good checkpoint of a run directory, or a one-line error saying why not."""
    store = CheckpointStore(run_dir / CHECKPOINT_DIR)
    try:
        return store.load_latest()
    except CheckpointError as error:
        raise ConfigError(f"cannot resume {str(run_dir)!r}: {error}") from None


def _resume_point(checkpoint: LoadedCheckpoint | None) -> tuple[int, float] | None:
    if checkpoint is None:
        return None
    first = checkpoint.state["servers"][0]
    return int(first["samples"]), float(first["time_s"])


class _Run:
    def __init__(
        self,
        config: TrainConfig,
        dataset: ArrayDataset,
        model_factory: Callable[[], torch.nn.Module],
        loss_fn: Callable,
        writer: RunWriter,
        checkpoint: LoadedCheckpoint | None,
    ) -> None:
        self.config = config
        self.dataset = dataset
        self.model_factory = model_factory
        self.loss_fn = loss_fn
        self.writer = writer
        self.resumed_from = checkpoint
        self.total_samples = round(config.epochs * len(dataset.y_train))
        self.store = CheckpointStore(writer.dir / CHECKPOINT_DIR)
        self.record = (
            RunRecord.from_state(checkpoint.state["coordinator"]) if checkpoint else RunRecord()
        )
        if checkpoint:
            self.record.metrics = [
                m for m in self.record.metrics if m["samples"] <= checkpoint.info.samples
            ]
        self.guard = (
            DivergenceGuard(GuardConfig(), initial_level=self.record.guard_initial_level)
            if config.divergence_guard
            else None
        )
        self.schedule_source: dict[str, Any] = {"kind": "given"}
        self.state: dict[str, Any] = {}
        self._pending_evals: dict[Any, tuple[EvalPoint, float]] = {}
        self._eval_slices: list[list[tuple[EvalPoint, np.ndarray]]] = []
        self._snapshots: dict[str, list[list[Snapshot]]] = defaultdict(list)
        self._restarts: dict[int, int] = defaultdict(int)
        self._killed: set[int] = set()  # hung workers killed, until they rejoin
        self._finished: dict[int, dict] = {}
        self._restarting: dict[int, Any] = {}  # worker -> its `ready` call while Ray restarts it
        self._last_checkpoint_s = time.monotonic()
        self._pids: dict[str, Any] = {"driver": os.getpid()}

    # -- lifecycle ------------------------------------------------------------------------------

    def execute(self) -> RunResult:
        cfg = self.config
        setup_started = time.perf_counter()
        torch.manual_seed(cfg.seed)
        initial = flatten_parameters(self.model_factory()).numpy()
        self.shards = parameter_shards(len(initial), cfg.servers)
        self.initial = initial
        self.dataset_ref = ray.put(self.dataset)
        restore = self.resumed_from.state["servers"] if self.resumed_from else None
        self.servers = self._start_servers(restore)
        self.evaluator = (
            ray.remote(Evaluator)
            .options(**actor_options())
            .remote(self.dataset_ref, self.model_factory, self.loss_fn)
        )
        self.workers = [self._start_worker(i) for i in range(cfg.workers)]
        try:
            pids = _wait_ready([w.ready.remote() for w in self.workers])
            _wait_ready([self.evaluator.ready.remote()])
            self._pids["workers"] = dict(enumerate(pids))
            self._write_pids()
            setup_s = time.perf_counter() - setup_started
            self._announce(initial)
            ray.get([s.begin.remote() for s in self.servers])
            elapsed_s = _resume_point(self.resumed_from)[1] if self.resumed_from else 0.0
            # Stragglers timed in seconds count run time, which a resumed run carries over.
            self.started_at = time.time() - elapsed_s
            self.runs = {
                w.run.remote(self.started_at, self.servers, [self.dataset_ref]): i
                for i, w in enumerate(self.workers)
            }
            with ProgressDisplay(enabled=cfg.progress, total_samples=self.total_samples) as show:
                self._follow(show)
            worker_stats = [self._finished[i] for i in sorted(self._finished)]
            self.writer.worker_stats(worker_stats)
            final_weights = self._final_weights()
            self._checkpoint([ray.get(s.final_snapshot.remote()) for s in self.servers])
            summary = self._summary(setup_s, worker_stats, status="complete")
            self.writer.summary(summary)
            torch.save(
                {"flat_weights": torch.tensor(final_weights)}, self.writer.dir / "final_weights.pt"
            )
            return RunResult(summary, self.writer.dir, final_weights)
        except BaseException as error:
            # Whatever was produced stays on disk; the summary says how the run ended.
            self.writer.summary(self._summary(0.0, [], status=f"failed: {error!r}"))
            raise
        finally:
            for actor in [*self.servers, self.evaluator, *self.workers]:
                ray.kill(actor, no_restart=True)

    def _start_servers(self, restore: list[dict] | None) -> list:
        cfg = self.config
        sync_config = SyncConfig(
            workers=cfg.workers,
            total_samples=self.total_samples,
            schedule=cfg.parsed_schedule(),
            lr=cfg.lr,
            momentum=cfg.momentum,
            momentum_policy=MomentumPolicy(cfg.momentum_at_switch),
            momentum_ramp_fraction=cfg.momentum_ramp,
            lr_schedule=cfg.lr_schedule_spec(),
            eval_every=cfg.eval_every,
            count_bsp_by_work=cfg.greedy_return,
            checkpoint_every=cfg.checkpoint_every,
        )
        emulated = cfg.emulation().enabled
        monitor = (
            OnlineMonitor(cfg.workers, cfg.online(), cfg.scenario() if emulated else None)
            if cfg.watches_stragglers
            else None
        )
        server_cls = ray.remote(ParameterServer)
        servers = [
            server_cls.options(**actor_options(), max_concurrency=4 * cfg.workers + 16).remote(
                sync_config,
                self.initial[shard],
                cfg.weight_decay,
                monitor,
                restore[index] if restore else None,
            )
            for index, shard in enumerate(self.shards)
        ]
        self._pids["servers"] = _wait_ready([s.pid.remote() for s in servers])
        return servers

    def _start_worker(self, index: int) -> Any:
        cfg = self.config
        spec = WorkerSpec(
            worker=index,
            workers=cfg.workers,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            emulation=cfg.emulation(),
            model_factory=self.model_factory,
            loss_fn=self.loss_fn,
            shards=tuple(self.shards),
            faults=cfg.fault_plan().for_worker(index),
        )
        # Restartable: after a crash Ray starts the actor again with the same arguments.
        options = {**actor_options(), "max_restarts": cfg.max_worker_restarts}
        return ray.remote(Worker).options(**options).remote(spec)

    def _announce(self, initial: np.ndarray) -> None:
        cfg = self.config
        if self.resumed_from:
            info = self.resumed_from.info
            refused = [f"{r.path.name}: {r.reason}" for r in self.resumed_from.refused]
            payload = {"checkpoint": info.to_record(), "refused_checkpoints": refused}
            self.record.failures.append({"kind": "resumed", **payload})
            self.writer.event("run_resumed", payload)
            return
        self.writer.event(
            "run_started",
            {
                "workers": cfg.workers,
                "servers": cfg.servers,
                "schedule": cfg.schedule,
                "total_samples": self.total_samples,
                "parameters": len(initial),
                "emulation": cfg.emulation().describe(),
                "online": cfg.online().describe() if cfg.watches_stragglers else None,
                "faults": cfg.fault_plan().describe() or None,
            },
        )

    # -- following the run ------------------------------------------------------------------

    def _follow(self, show: ProgressDisplay) -> None:
        while True:
            time.sleep(_POLL_S)
            try:
                drained = ray.get([s.drain.remote() for s in self.servers])
            except RayActorError as error:
                self._recover_servers(f"parameter server died: {type(error).__name__}")
                continue
            self.state = drained[0]["state"]
            self._record(drained)
            self._check_quarantine()
            self._collect_evals(block=False)
            show.update(self.state, self.record.metrics[-1] if self.record.metrics else None)
            if self._check_runs():
                self._recover_servers("parameter server died (seen by a worker)")
                continue
            self._check_restarts()
            self._check_hung()
            self._checkpoint_by_time()
            if self.state["done"] and not self.runs and not self._restarting:
                self._collect_evals(block=True)
                return

    def _record(self, drained: list[dict]) -> None:
        first = drained[0]
        self.writer.updates(first["applied"])
        self.writer.drops(first["dropped"])
        for update in first["applied"]:
            self.record.add_update(update.protocol, update.staleness, update.loss)
        for event in first["switches"]:
            entry = event.to_summary()
            self.record.switches.append(entry)
            self.writer.event("switch", entry)
        for event in first["straggler_events"]:
            self.record.straggler_events.append(event)
            self.writer.event(event["event"], {k: v for k, v in event.items() if k != "event"})
        for decision in first["decisions"]:
            self._log_decision(decision)
        self._queue_evaluations(drained)
        self._take_snapshots(drained)
        self._watch_divergence(first["applied"])

    def _queue_evaluations(self, drained: list[dict]) -> None:
        """Evaluate a point once every shard has sent its slice of the weights.

        Shards snapshot at the same sample counts but are drained at slightly different
        moments, so one shard may already hold a point that another has not reached yet.
        """
        while len(self._eval_slices) < len(drained):
            self._eval_slices.append([])
        for queue, shard in zip(self._eval_slices, drained, strict=False):
            queue.extend(shard["evaluations"])
        while all(self._eval_slices):
            shard_points = [queue.pop(0) for queue in self._eval_slices]
            point = shard_points[0][0]
            weights = np.concatenate([w for _, w in shard_points])
            ref = self.evaluator.evaluate.remote(weights)
            self._pending_evals[ref] = (point, self.record.take_train_loss())

    def _check_quarantine(self) -> None:
        """Stop when no worker is left to train: every one is quarantined for bad gradients.

        Otherwise the run would go on forever, each gradient dropped and counted, none
        applied (seen with ASP diverging without the guard: every gradient non-finite).
        """
        quarantined = self.state.get("quarantined", [])
        if len(quarantined) < self.config.workers:
            return
        reasons = {
            d["worker"]: d["reason"] for d in self.record.decisions if d["action"] == "quarantine"
        }
        example = next(iter(reasons.values()), "bad gradients")
        raise TrainingStalled(
            f"every worker ({len(quarantined)}) is quarantined for bad gradients (e.g. {example}); "
            f"nothing can be applied, so the run stops at {self.state.get('progress', 0):.1%} of "
            "its samples. A diverging run: try the divergence guard or a lower learning rate"
        )

    def _log_decision(self, decision: Decision) -> None:
        entry = decision.to_record()
        self.record.decisions.append(entry)
        self.writer.event("decision", entry)

    def _collect_evals(self, block: bool) -> None:
        if not self._pending_evals:
            return
        refs = list(self._pending_evals)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=None if block else 0)
        # Keep evaluation rows in training order even if results come back out of order.
        for ref in refs:
            if ref not in ready:
                break
            point, train_loss = self._pending_evals.pop(ref)
            accuracy, loss = ray.get(ref)
            row = {
                "time_s": round(point.time_s, 4),
                "samples": point.samples,
                "fraction": round(point.fraction, 6),
                "version": point.version,
                "protocol": point.protocol,
                "test_accuracy": accuracy,
                "test_loss": loss,
                "train_loss": train_loss,
                "samples_per_s": round(point.samples / point.time_s, 2) if point.time_s else "",
            }
            self.record.metrics.append(row)
            self.writer.metric(row)
            self.writer.summary(self._summary(0.0, [], status="running"))

    # -- failures -----------------------------------------------------------------------------

    def _check_runs(self) -> bool:
        """Collect finished worker runs and restart dead workers; True if a server died."""
        if not self.runs:
            return False
        ready, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
        server_died = False
        for ref in ready:
            worker = self.runs.pop(ref)
            try:
                self._finished[worker] = ray.get(ref)
            except RayTaskError as error:
                # The worker's own code raised: a failed call to a server, or a real error.
                if not isinstance(error.cause, RayActorError):
                    raise
                server_died = True  # the worker is fine; it runs again after the recovery
            except RayActorError as error:
                self._restart_worker(worker, _death_reason(error, worker in self._killed))
        return server_died

    def _restart_worker(self, worker: int, reason: str) -> None:
        self._restarts[worker] += 1
        restarts = self._restarts[worker]
        if restarts > self.config.max_worker_restarts:
            raise RuntimeError(
                f"worker {worker} failed {restarts} times (max_worker_restarts = "
                f"{self.config.max_worker_restarts}); last: {reason}"
            )
        ray.get([s.worker_lost.remote(worker) for s in self.servers])
        entry = {
            "kind": "worker",
            "worker": worker,
            "reason": reason,
            "restart": restarts,
            "at_fraction": round(self.state.get("progress", 0.0), 6),
            "time_s": round(self.state.get("time_s", 0.0), 3),
            "recovery": "restarted through Ray; rejoins at the current version",
        }
        self.record.failures.append(entry)
        self.writer.event("worker_failed", entry)
        # Ray is restarting the actor; a call made before it is up again fails, so the run is
        # submitted once `ready` answers (see _check_restarts).
        self._restarting[worker] = self.workers[worker].ready.remote()

    def _check_restarts(self) -> None:
        if not self._restarting:
            return
        refs = list(self._restarting.values())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for worker, ref in list(self._restarting.items()):
            if ref not in ready:
                continue
            try:
                pid = ray.get(ref)
            except ActorUnavailableError:
                self._restarting[worker] = self.workers[worker].ready.remote()  # not up yet
                continue
            del self._restarting[worker]
            self._pids["workers"][worker] = pid
            self._write_pids()
            run = self.workers[worker].run.remote(
                self.started_at, self.servers, [self.dataset_ref], self._restarts[worker]
            )
            self.runs[run] = worker

    def _check_hung(self) -> None:
        timeout_s = self.config.worker_timeout_s
        for key, silent_s in self.state.get("silent_s", {}).items():
            worker = int(key)
            if silent_s < timeout_s:
                self._killed.discard(worker)
                continue
            if worker in self._killed or worker in self._finished:
                continue
            # Killed, Ray restarts it; its failed run is then restarted like any dead worker's.
            self._killed.add(worker)
            self.writer.event(
                "worker_hung", {"worker": worker, "silent_s": silent_s, "timeout_s": timeout_s}
            )
            ray.kill(self.workers[worker], no_restart=False)

    def _recover_servers(self, reason: str) -> None:
        """Replace every server shard by one restored from the last good checkpoint."""
        before = dict(self.state)
        try:
            loaded = self.store.load_latest()
        except CheckpointError as error:
            raise RuntimeError(
                f"{reason}, and there is no checkpoint to recover from: {error}"
            ) from None
        for server in self.servers:
            ray.kill(server, no_restart=True)
        # Every worker run must end (they fail on their next call to the dead server) before
        # the workers get the new servers: a worker handles one call at a time.
        if self.runs:
            ray.wait(list(self.runs), num_returns=len(self.runs), timeout=_STARTUP_TIMEOUT_S)
            for ref, worker in list(self.runs.items()):
                # A failed run runs again below (Ray restarts a worker that died with it).
                with contextlib.suppress(RayTaskError, RayActorError, GetTimeoutError):
                    self._finished[worker] = ray.get(ref, timeout=0)
            self.runs.clear()
        self.servers = self._start_servers(loaded.state["servers"])
        # Slices that only some shards had sent belong to the lost timeline: drop them.
        self._eval_slices.clear()
        self._snapshots.clear()
        ray.get([s.begin.remote() for s in self.servers])
        lost = int(before.get("samples", 0)) - loaded.info.samples
        entry = {
            "kind": "server",
            "reason": reason,
            "at_fraction": round(before.get("progress", 0.0), 6),
            "recovery": f"restored from {loaded.info.path.name}",
            "checkpoint_samples": loaded.info.samples,
            "samples_lost": max(lost, 0),
            "refused_checkpoints": [f"{r.path.name}: {r.reason}" for r in loaded.refused],
        }
        self.record.failures.append(entry)
        self.writer.event("server_failed", entry)
        self._write_pids()
        restart = [
            w
            for w in range(self.config.workers)
            if w not in self._finished and w not in self._restarting
        ]
        for worker in restart:
            run = self.workers[worker].run.remote(
                self.started_at, self.servers, [self.dataset_ref], self._restarts[worker]
            )
            self.runs[run] = worker

    # -- checkpoints and divergence -----------------------------------------------------------

    def _take_snapshots(self, drained: list[dict]) -> None:
        """Shards snapshot at the same points; a checkpoint is written once all have."""
        for index, shard in enumerate(drained):
            for snapshot in shard["snapshots"]:
                queues = self._snapshots[snapshot.label]
                while len(queues) < len(drained):
                    queues.append([])
                queues[index].append(snapshot)
        for queues in self._snapshots.values():
            while queues and all(queues):
                self._checkpoint([queue.pop(0) for queue in queues])

    def _checkpoint(self, shard_snapshots: list[Snapshot]) -> None:
        first = shard_snapshots[0]
        state = {
            "servers": [s.state for s in shard_snapshots],
            "coordinator": {
                **self.record.to_state(),
                "metrics": [m for m in self.record.metrics if m["samples"] <= first.samples],
            },
        }
        info = self.store.save(
            state,
            samples=first.samples,
            label=first.label,
            meta={
                "progress": round(first.progress, 6),
                "version": first.version,
                "time_s": round(first.time_s, 3),
            },
        )
        self.record.checkpoints += 1
        self._last_checkpoint_s = time.monotonic()
        self.writer.event("checkpoint", info.to_record())

    def _checkpoint_by_time(self) -> None:
        every_s = self.config.checkpoint_every_s
        if every_s and time.monotonic() - self._last_checkpoint_s >= every_s:
            self._last_checkpoint_s = time.monotonic()
            for server in self.servers:
                server.request_snapshot.remote("timed")

    def _watch_divergence(self, applied: list) -> None:
        if self.guard is None:
            return
        for update in applied:
            verdict = self.guard.observe(
                update.loss, progress=update.progress, time_s=update.time_s
            )
            self.record.guard_initial_level = self.guard.initial_level
            if verdict is not None:
                self._respond_to_divergence(verdict)
                return

    def _respond_to_divergence(self, verdict: Any) -> None:
        state = self.state
        response = rollback_decision(
            verdict,
            state.get("lr_scale", 1.0),
            MomentumPolicy(state.get("momentum_policy", self.config.momentum_at_switch)),
            RollbackConfig(lr_factor=self.config.rollback_lr_factor),
            rollbacks_done=self.record.rollbacks,
        )
        if isinstance(response, GiveUp):
            self._log_decision(response.to_decision())
            self.guard = None  # nothing more to do about it; the summary says so
            return
        healthy = int(verdict.healthy_progress * self.total_samples)
        try:
            loaded = self.store.load_latest(max_samples=healthy)
        except CheckpointError as error:
            self._log_decision(
                replace(
                    response.to_decision(),
                    action="give_up",
                    reason=f"{verdict.reason}; no checkpoint to roll back to ({error})",
                )
            )
            self.guard = None
            return
        ray.get(
            [
                server.roll_back.remote(
                    shard_state,
                    response.protocol,
                    response.lr_scale,
                    response.momentum.value,
                    f"divergence rollback {response.number}",
                )
                for server, shard_state in zip(self.servers, loaded.state["servers"], strict=True)
            ]
        )
        self.record.rollbacks += 1
        decision = response.to_decision()
        self._log_decision(
            replace(decision, reason=f"{decision.reason}; restored {loaded.info.path.name}")
        )
        self.guard.reset()

    # -- the end --------------------------------------------------------------------------------

    def _final_weights(self) -> np.ndarray:
        _, weights, _, _ = join_replies(ray.get([s.pull.remote(-1) for s in self.servers]))
        return weights

    def _write_pids(self) -> None:
        """actors.json: which process is which, for operators (and fault-injection tests)."""
        write_json_atomic(self.writer.dir / "actors.json", self._pids)

    def _summary(self, setup_s: float, worker_stats: list[dict], status: str) -> dict[str, Any]:
        return build_summary(
            RunFacts(
                config=self.config,
                record=self.record,
                state=self.state or {},
                total_samples=self.total_samples,
                schedule_source=self.schedule_source,
                run_dir=self.writer.dir,
            ),
            setup_s=setup_s,
            worker_stats=worker_stats,
            status=status,
        )


def _death_reason(error: RayActorError, killed_as_hung: bool) -> str:
    if killed_as_hung:
        return "hung: silent longer than worker_timeout_s, killed"
    return f"died ({type(error).__name__})"


def _wait_ready(refs: list) -> list:
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=_STARTUP_TIMEOUT_S)
    if pending:
        raise RuntimeError(
            f"{len(pending)} actor(s) did not start within {_STARTUP_TIMEOUT_S:.0f} s: the Ray "
            "cluster may lack the CPUs they request (see `ray status`)"
        )
    return ray.get(refs)


def _shape_only(dataset: ArrayDataset) -> ArrayDataset:
    """The dataset's shape and kind without its samples, for a model factory to carry."""
    return replace(
        dataset,
        x_train=dataset.x_train[:1],
        y_train=dataset.y_train[:1],
        x_test=dataset.x_test[:1],
        y_test=dataset.y_test[:1],
    )
