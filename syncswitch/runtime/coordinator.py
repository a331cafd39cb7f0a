"""The coordinator: starts the actors, follows the run, writes every result as it arrives.

Protocol decisions happen in the parameter server's synchronizer at version boundaries; the
coordinator stays off the critical path. It polls the server for what happened (updates,
switches, evaluation snapshots), hands snapshots to the evaluator, and writes the run directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
import torch.nn.functional as F

from syncswitch.config import TrainConfig
from syncswitch.core.hyperparams import MomentumPolicy
from syncswitch.core.online import OnlineMonitor
from syncswitch.core.optimizer import flatten_parameters
from syncswitch.core.records import EvalPoint
from syncswitch.core.sharding import parameter_shards
from syncswitch.core.synchronizer import SyncConfig
from syncswitch.results import RunWriter
from syncswitch.runtime.evaluator import Evaluator
from syncswitch.runtime.progress import ProgressDisplay
from syncswitch.runtime.ray_setup import actor_options, connect
from syncswitch.runtime.server import ParameterServer
from syncswitch.runtime.worker import Worker, WorkerSpec, join_replies
from syncswitch.workloads import ArrayDataset, build_model, load_dataset

_POLL_S = 0.1
_STARTUP_TIMEOUT_S = 300.0


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
) -> RunResult:
    """Train one job and return its summary; results are written to the run directory.

    `schedule_source` says where the schedule came from (e.g. a stored timing decision); it
    is written to summary.json as is, and defaults to `{"kind": "given"}`.
    """
    config.validate()
    dataset = dataset or load_dataset(
        config.dataset, config.data_dir, mnist1d_samples=config.mnist1d_samples
    )
    if model_factory is None:
        model_factory = BuiltinModel(config.model_name, _shape_only(dataset))
    run_dir = Path(config.out or _default_run_dir(config))
    writer = RunWriter(run_dir, config.to_dict(), config.emulation().describe())
    started_ray = connect(config.ray_address, min_cpus=config.workers + config.servers + 1)
    try:
        run = _Run(config, dataset, model_factory, loss_fn, writer)
        run.schedule_source = schedule_source or {"kind": "given"}
        return run.execute()
    finally:
        writer.close()
        if started_ray:
            ray.shutdown()


class _Run:
    def __init__(
        self,
        config: TrainConfig,
        dataset: ArrayDataset,
        model_factory: Callable[[], torch.nn.Module],
        loss_fn: Callable,
        writer: RunWriter,
    ) -> None:
        self.config = config
        self.dataset = dataset
        self.model_factory = model_factory
        self.loss_fn = loss_fn
        self.writer = writer
        self.total_samples = round(config.epochs * len(dataset.y_train))
        self.metrics: list[dict[str, Any]] = []
        self.switches: list[dict[str, Any]] = []
        self.staleness: dict[str, list[int]] = {}
        self.straggler_events: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self._losses: list[float] = []
        self._pending_evals: dict[Any, EvalPoint] = {}
        self._eval_train_loss: dict[Any, float] = {}  # mean train loss since the previous point
        self.state: dict[str, Any] = {}
        self.schedule_source: dict[str, Any] = {"kind": "given"}

    def execute(self) -> RunResult:
        cfg = self.config
        setup_started = time.perf_counter()
        torch.manual_seed(cfg.seed)
        initial = flatten_parameters(self.model_factory()).numpy()
        shards = parameter_shards(len(initial), cfg.servers)
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
        )
        monitor = (
            OnlineMonitor(
                cfg.workers,
                cfg.online(),
                cfg.scenario() if cfg.emulation().enabled else None,
            )
            if cfg.watches_stragglers
            else None
        )
        dataset_ref = ray.put(self.dataset)
        server_cls = ray.remote(ParameterServer)
        servers = [
            server_cls.options(**actor_options(), max_concurrency=4 * cfg.workers + 16).remote(
                sync_config, initial[shard], cfg.weight_decay, monitor
            )
            for shard in shards
        ]
        evaluator = (
            ray.remote(Evaluator)
            .options(**actor_options())
            .remote(dataset_ref, self.model_factory, self.loss_fn)
        )
        worker_cls = ray.remote(Worker)
        workers = [
            worker_cls.options(**actor_options()).remote(
                WorkerSpec(
                    worker=i,
                    workers=cfg.workers,
                    batch_size=cfg.batch_size,
                    seed=cfg.seed,
                    emulation=cfg.emulation(),
                    model_factory=self.model_factory,
                    loss_fn=self.loss_fn,
                    shards=tuple(shards),
                ),
                dataset_ref,
                servers,
            )
            for i in range(cfg.workers)
        ]
        actors = [*servers, evaluator, *workers]
        try:
            _wait_ready([w.ready.remote() for w in workers] + [evaluator.ready.remote()])
            setup_s = time.perf_counter() - setup_started
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
                },
            )
            ray.get([s.begin.remote() for s in servers])
            started_at = time.time()
            runs = [w.run.remote(started_at) for w in workers]
            with ProgressDisplay(enabled=cfg.progress, total_samples=self.total_samples) as show:
                self._follow(servers, evaluator, runs, show)
            worker_stats = ray.get(runs)
            self.writer.worker_stats(worker_stats)
            final_weights = self._final_weights(servers)
            summary = self._summary(setup_s, worker_stats, status="complete")
            self.writer.summary(summary)
            torch.save(
                {"flat_weights": torch.tensor(final_weights)},
                self.writer.dir / "final_weights.pt",
            )
            return RunResult(summary, self.writer.dir, final_weights)
        except BaseException as error:
            # Whatever was produced stays on disk; the summary says how the run ended.
            self.writer.summary(self._summary(0.0, [], status=f"failed: {error!r}"))
            raise
        finally:
            for actor in actors:
                ray.kill(actor)

    # -- following the run ------------------------------------------------------------------

    def _follow(self, servers: list, evaluator: Any, runs: list, show: ProgressDisplay) -> None:
        done = False
        while not done or self._pending_evals:
            time.sleep(_POLL_S)
            drained = ray.get([s.drain.remote() for s in servers])
            self._record(drained, evaluator)
            self._collect_evals(block=False)
            self.state = drained[0]["state"]
            show.update(self.state, self.metrics[-1] if self.metrics else None)
            finished, _ = ray.wait(runs, num_returns=len(runs), timeout=0)
            for ref in finished:
                ray.get(ref)  # re-raises a worker's failure here, not after a hang
            done = self.state["done"] and len(finished) == len(runs)
            if done:
                self._collect_evals(block=True)

    def _record(self, drained: list[dict], evaluator: Any) -> None:
        first = drained[0]
        self.writer.updates(first["applied"])
        self.writer.drops(first["dropped"])
        for record in first["applied"]:
            self._losses.append(record.loss)
            self.staleness.setdefault(record.protocol, []).append(record.staleness)
        for event in first["switches"]:
            entry = event.to_summary()
            self.switches.append(entry)
            self.writer.event("switch", entry)
        for record in first["straggler_events"]:
            self.straggler_events.append(record)
            self.writer.event(record["event"], {k: v for k, v in record.items() if k != "event"})
        for decision in first["decisions"]:
            entry = decision.to_record()
            self.decisions.append(entry)
            self.writer.event("decision", entry)
        # Each server shard snapshots its slice at the same sample counts: join them per point.
        for shard_points in zip(*(d["evaluations"] for d in drained), strict=True):
            point = shard_points[0][0]
            weights = np.concatenate([w for _, w in shard_points])
            ref = evaluator.evaluate.remote(weights)
            self._pending_evals[ref] = point
            self._eval_train_loss[ref] = self._take_train_loss()

    def _take_train_loss(self) -> float:
        losses, self._losses = self._losses, []
        return float(np.mean(losses)) if losses else float("nan")

    def _collect_evals(self, block: bool) -> None:
        if not self._pending_evals:
            return
        refs = list(self._pending_evals)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=None if block else 0)
        # Keep evaluation rows in training order even if results come back out of order.
        for ref in refs:
            if ref not in ready:
                break
            point = self._pending_evals.pop(ref)
            accuracy, loss = ray.get(ref)
            row = {
                "time_s": round(point.time_s, 4),
                "samples": point.samples,
                "fraction": round(point.fraction, 6),
                "version": point.version,
                "protocol": point.protocol,
                "test_accuracy": accuracy,
                "test_loss": loss,
                "train_loss": self._eval_train_loss.pop(ref),
                "samples_per_s": round(point.samples / point.time_s, 2) if point.time_s else "",
            }
            self.metrics.append(row)
            self.writer.metric(row)
            self.writer.summary(self._summary(0.0, [], status="running"))

    def _final_weights(self, servers: list) -> np.ndarray:
        _, weights, _, _ = join_replies(ray.get([s.pull.remote(-1) for s in servers]))
        return weights

    # -- the summary ------------------------------------------------------------------------

    def _summary(self, setup_s: float, worker_stats: list[dict], status: str) -> dict[str, Any]:
        accuracies = [m["test_accuracy"] for m in self.metrics]
        final = self.metrics[-1] if self.metrics and self.metrics[-1]["fraction"] >= 1.0 else None
        state = self.state or {}
        wall_s = final["time_s"] if final else state.get("time_s", 0.0)
        samples = state.get("samples", 0)
        return {
            "status": status,
            "final_accuracy": final["test_accuracy"] if final else None,
            "best_accuracy": max(accuracies) if accuracies else None,
            "final_test_loss": final["test_loss"] if final else None,
            "wall_time_s": wall_s,
            "setup_time_s": round(setup_s, 3),
            "samples": samples,
            "samples_per_s": samples / wall_s if wall_s else None,
            "updates": state.get("version", 0),
            "updates_per_s": state.get("version", 0) / wall_s if wall_s else None,
            "schedule": self.config.schedule,
            "schedule_source": self.schedule_source,
            "time_by_protocol": state.get("time_by_protocol", {}),
            "switches": self.switches,
            "staleness": {
                name: {"mean": float(np.mean(v)), "max": int(np.max(v)), "gradients": len(v)}
                for name, v in self.staleness.items()
            },
            "gradients": state.get("accounting", {}),
            "workers": self.config.workers,
            "worker_step_time_mean_s": (
                float(np.mean([w["step_time_mean_s"] for w in worker_stats]))
                if worker_stats
                else None
            ),
            "emulation": self.config.emulation().describe(),
            "samples_by_protocol": state.get("samples_by_protocol", {}),
            "online": self._online_summary(state),
            "run_dir": str(self.writer.dir),
        }

    def _online_summary(self, state: dict[str, Any]) -> dict[str, Any] | None:
        cfg = self.config
        if not cfg.watches_stragglers:
            return None
        detected = [e for e in self.straggler_events if e["event"] == "straggler_detected"]
        delays = [e["delay_s"] for e in detected if "delay_s" in e]
        return {
            **cfg.online().describe(),
            "planned_bsp_samples": round(self._planned_bsp_fraction() * self.total_samples),
            "bsp_samples": state.get("samples_by_protocol", {}).get("bsp", 0),
            "detections": len(detected),
            # Scored only against emulated stragglers (ground truth); unknown on real hardware.
            "false_detections": (
                sum(1 for e in detected if e.get("false_detection"))
                if self.config.emulation().enabled
                else None
            ),
            "detection_delay_s_median": float(np.median(delays)) if delays else None,
            "excluded_at_end": state.get("excluded", []),
            "decisions": self.decisions,
            "straggler_events": self.straggler_events,
        }

    def _planned_bsp_fraction(self) -> float:
        phases = self.config.parsed_schedule().phases
        starts = [0.0, *(p.end for p in phases[:-1])]
        return sum(p.end - a for p, a in zip(phases, starts, strict=True) if p.spec.name == "bsp")


def _wait_ready(refs: list) -> None:
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=_STARTUP_TIMEOUT_S)
    if pending:
        raise RuntimeError(
            f"{len(pending)} actor(s) did not start within {_STARTUP_TIMEOUT_S:.0f} s: the Ray "
            "cluster may lack the CPUs they request (see `ray status`)"
        )
    ray.get(ready)


def _shape_only(dataset: ArrayDataset) -> ArrayDataset:
    """The dataset's shape and kind without its samples, for a model factory to carry."""
    return replace(
        dataset,
        x_train=dataset.x_train[:1],
        y_train=dataset.y_train[:1],
        x_test=dataset.x_test[:1],
        y_test=dataset.y_test[:1],
    )


def _default_run_dir(config: TrainConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    label = config.schedule.replace(":", "").replace(",", "-")
    return os.path.join("runs", f"{stamp}-{label}")
