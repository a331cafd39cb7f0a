"""summary.json: the run's figures, built from what the coordinator has recorded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from syncswitch.config import TrainConfig
from syncswitch.runtime.run_record import RunRecord


@dataclass(frozen=True)
class RunFacts:
    config: TrainConfig
    record: RunRecord
    state: dict[str, Any]  # the first server's latest state
    total_samples: int
    schedule_source: dict[str, Any]
    run_dir: Path


def build_summary(
    run: RunFacts, *, setup_s: float, worker_stats: list[dict], status: str
) -> dict[str, Any]:
    """summary.json: what the run did so far (`status` says whether it is over)."""
    record = run.record
    accuracies = [m["test_accuracy"] for m in record.metrics]
    final = record.final_metric()
    state = run.state
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
        "schedule": run.config.schedule,
        "schedule_source": run.schedule_source,
        "time_by_protocol": state.get("time_by_protocol", {}),
        "samples_by_protocol": state.get("samples_by_protocol", {}),
        "switches": record.switches,
        "staleness": record.staleness_summary(),
        "gradients": state.get("accounting", {}),
        "workers": run.config.workers,
        "worker_step_time_mean_s": (
            float(np.mean([w["step_time_mean_s"] for w in worker_stats])) if worker_stats else None
        ),
        "emulation": run.config.emulation().describe(),
        "online": _online_summary(run),
        "reliability": {
            "checkpoints": record.checkpoints,
            "failures": record.failures,
            "rollbacks": record.rollbacks,
            "pinned_protocol": state.get("pinned"),
            "lr_scale": state.get("lr_scale", 1.0),
            "guard_initial_loss": record.guard_initial_level,
            # Quarantines, rollbacks: every decision but the online policy's.
            "decisions": [d for d in record.decisions if d["policy"] != _policy_name(run.config)],
            "faults_injected": run.config.fault_plan().describe(),
        },
        "run_dir": str(run.run_dir),
    }


def _policy_name(cfg: TrainConfig) -> str:
    return "greedy+return" if cfg.greedy_return else cfg.online_policy


def _online_summary(run: RunFacts) -> dict[str, Any] | None:
    cfg, state = run.config, run.state
    if not cfg.watches_stragglers:
        return None
    events = run.record.straggler_events
    detected = [e for e in events if e["event"] == "straggler_detected"]
    delays = [e["delay_s"] for e in detected if "delay_s" in e]
    return {
        **cfg.online().describe(),
        "planned_bsp_samples": round(_planned_bsp_fraction(cfg) * run.total_samples),
        "bsp_samples": state.get("samples_by_protocol", {}).get("bsp", 0),
        "detections": len(detected),
        # Scored only against emulated stragglers (ground truth); unknown on real hardware.
        "false_detections": (
            sum(1 for e in detected if e.get("false_detection"))
            if cfg.emulation().enabled
            else None
        ),
        "detection_delay_s_median": float(np.median(delays)) if delays else None,
        "excluded_at_end": state.get("excluded", []),
        "decisions": [d for d in run.record.decisions if d["policy"] == _policy_name(run.config)],
        "straggler_events": events,
    }


def _planned_bsp_fraction(cfg: TrainConfig) -> float:
    phases = cfg.parsed_schedule().phases
    starts = [0.0, *(p.end for p in phases[:-1])]
    return sum(p.end - a for p, a in zip(phases, starts, strict=True) if p.spec.name == "bsp")
