"""Fault injection: what a run promises when processes die, gradients go bad or ASP diverges.

Every scenario trains the same job with `syncswitch train` in a subprocess (its own local Ray),
and breaks it for real: processes are killed with SIGKILL by the process ids in the run's
actors.json, the driver itself is killed and the run resumed with `--resume`, checkpoints are
truncated or replaced by a file carrying a code-execution payload. Bad gradients, a crash at
the exact switch point and divergence are injected through the config (`faults:`, labelled in
every result file). Prints one table row per scenario as it finishes and appends the raw
figures to --out/runs.jsonl. All step times are EMULATED.

    python benchmarks/faults.py                      # every scenario (about 25 minutes here)
    python benchmarks/faults.py --only server,resume
    python benchmarks/faults.py --only sustained --sustained-minutes 5
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import (
    RunLog,
    Timing,
    add_out,
    add_table,
    check_timing,
    comma_list,
    markdown_table,
    parser,
    read_summary,
    row_from,
)

from syncswitch.errors import RunDirError
from syncswitch.rundir import Summary, names

SCENARIOS = (
    "clean",
    "worker-bsp",
    "worker-asp",
    "worker-switch",
    "server",
    "resume",
    "bad-gradients",
    "divergence",
    "corrupt-checkpoint",
    "payload-checkpoint",
    "sustained",
)
TRAIN_SAMPLES = 8000  # MNIST-1D's training split at the default 10,000 samples


@dataclass
class Job:
    name: str
    args: list[str]
    epochs: float
    kills: list[tuple[float, Callable[[Path], str]]] = field(default_factory=list)


@dataclass
class FaultRow:
    """One scenario's line in runs.jsonl: what was done, how the run ended, the gradients'
    balance (sent = applied + dropped, unaccounted 0) and how it recovered."""

    scenario: str
    done: str
    final_accuracy: float | None
    status: str
    sent: int | None
    applied: int | None
    dropped: dict[str, int]
    unaccounted: int | None
    recovery: str
    wall_time_s: float | None
    emulation: Any
    clean_accuracy: float | None = None


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--epochs", type=float, default=40.0)
    cli.add_argument("--only", help="comma-separated scenario names: " + ", ".join(SCENARIOS))
    cli.add_argument("--sustained-minutes", type=float, default=5.0)
    add_out(cli, "benchmarks/results/faults")
    add_table(cli, "the newest row per scenario")
    args = cli.parse_args()
    out = args.out
    log = RunLog(out / "runs.jsonl")
    if args.table:
        print_table(log)
        return
    out.mkdir(parents=True, exist_ok=True)
    chosen = comma_list(args.only) if args.only else list(SCENARIOS)
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        cli.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {SCENARIOS}")
    print_header()
    clean_acc = None
    for name in chosen:
        row = SCENARIO_RUNNERS[name](args, out)
        if name == "clean":
            clean_acc = row.final_accuracy
        row.clean_accuracy = clean_acc
        log.append(row)
        print_row(row)


# -- running and breaking jobs ---------------------------------------------------------------


def base_args(epochs: float, run_dir: Path, schedule: str = "bsp:0.5,asp") -> list[str]:
    return [
        "--workers", "8", "--epochs", f"{epochs:g}", "--schedule", schedule,
        "--step-time-ms", "20", "--jitter-sigma", "0.2", "--no-progress",
        "--out", str(run_dir),
    ]  # fmt: skip


def start(args: list[str], log_path: Path) -> subprocess.Popen:
    log = log_path.open("ab")
    # Own process group: a kill of the driver is a kill of the driver, not of this script.
    return subprocess.Popen(
        [sys.executable, "-m", "syncswitch.cli.main", "train", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def fresh(run_dir: Path) -> None:
    """A scenario runs again from scratch (train() refuses an earlier run's directory)."""
    shutil.rmtree(run_dir, ignore_errors=True)


def progress(run_dir: Path, total: int) -> float:
    try:
        summary = read_summary(run_dir)
    except (OSError, RunDirError):  # not written yet
        return 0.0
    return summary.samples / total


def pids(run_dir: Path) -> FaultRow:
    return json.loads((run_dir / names.ACTORS).read_text())


def kill_worker(worker: int) -> Callable[[Path], str]:
    def kill(run_dir: Path) -> str:
        pid = pids(run_dir)["workers"][str(worker)]
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL worker {worker} (pid {pid})"

    return kill


def kill_server(run_dir: Path) -> str:
    pid = pids(run_dir)["servers"][0]
    os.kill(pid, signal.SIGKILL)
    return f"SIGKILL parameter server (pid {pid})"


def run_job(job: Job, out: Path) -> tuple[Summary, list[str], subprocess.Popen]:
    run_dir = out / job.name
    fresh(run_dir)
    total = round(job.epochs * TRAIN_SAMPLES)
    proc = start(job.args, out / f"{job.name}.log")
    done = []
    kills = sorted(job.kills)
    while proc.poll() is None:
        time.sleep(0.2)
        while kills and progress(run_dir, total) >= kills[0][0]:
            _, kill = kills.pop(0)
            done.append(f"{kill(run_dir)} at {progress(run_dir, total):.2f}")
    summary = read_summary(run_dir)
    return summary, done, proc


def scenario_row(name: str, summary: Summary, done: list[str], recovery: str) -> FaultRow:
    grads = summary.gradients
    return FaultRow(
        scenario=name,
        done="; ".join(done) or "-",
        final_accuracy=summary.final_value,
        status=summary.status,
        sent=grads.sent,
        applied=grads.applied,
        dropped=grads.dropped,
        unaccounted=grads.unaccounted,
        recovery=recovery,
        wall_time_s=summary.wall_time_s,
        emulation=summary.emulation,
    )


def describe_failures(summary: Summary) -> str:
    parts = []
    for failure in summary.reliability.failures:
        if failure["kind"] == "worker":
            parts.append(f"worker {failure['worker']} restarted ({failure['reason']})")
        elif failure["kind"] == "server":
            parts.append(
                f"server restored from checkpoint at {failure['checkpoint_samples']:,} samples, "
                f"{failure['samples_lost']:,} samples lost"
            )
        elif failure["kind"] == "resumed":
            refused = failure["refused_checkpoints"]
            parts.append(
                f"resumed from {failure['checkpoint']['file']}"
                + (f" (refused: {'; '.join(refused)})" if refused else "")
            )
    return "; ".join(parts) or "-"


# -- scenarios -------------------------------------------------------------------------------


def clean(args, out: Path) -> FaultRow:
    summary, done, _ = run_job(
        Job("clean", base_args(args.epochs, out / "clean"), args.epochs), out
    )
    return scenario_row("clean", summary, done, "-")


def worker_bsp(args, out: Path) -> FaultRow:
    return _killed_worker("worker-bsp", 0.25, args, out)


def worker_asp(args, out: Path) -> FaultRow:
    return _killed_worker("worker-asp", 0.75, args, out)


def _killed_worker(name: str, at: float, args, out: Path) -> FaultRow:
    job = Job(name, base_args(args.epochs, out / name), args.epochs, [(at, kill_worker(3))])
    summary, done, _ = run_job(job, out)
    return scenario_row(name, summary, done, describe_failures(summary))


def worker_switch(args, out: Path) -> FaultRow:
    name = "worker-switch"
    spec = out / f"{name}.yaml"
    spec.write_text("- {kind: crash, worker: 3, at: 0.5}\n")
    job = Job(name, [*base_args(args.epochs, out / name), "--faults", str(spec)], args.epochs)
    summary, _, _ = run_job(job, out)
    done = ["injected crash of worker 3 at its first step after the BSP->ASP switch (0.5)"]
    return scenario_row(name, summary, done, describe_failures(summary))


def server(args, out: Path) -> FaultRow:
    name = "server"
    job = Job(name, base_args(args.epochs, out / name), args.epochs, [(0.6, kill_server)])
    summary, done, _ = run_job(job, out)
    interval = round(0.05 * args.epochs * TRAIN_SAMPLES)
    recovery = f"{describe_failures(summary)} (checkpoint interval {interval:,} samples)"
    return scenario_row(name, summary, done, recovery)


def _kill_driver_then_resume(name: str, args, out: Path, damage: Callable[[Path], str] | None):
    run_dir = out / name
    fresh(run_dir)
    total = round(args.epochs * TRAIN_SAMPLES)
    proc = start(base_args(args.epochs, run_dir), out / f"{name}.log")
    while proc.poll() is None and progress(run_dir, total) < 0.5:
        time.sleep(0.2)
    at = progress(run_dir, total)
    if proc.poll() is not None:
        raise RuntimeError(f"{name}: the driver exited (status {proc.returncode}) before the kill")
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and anything it started in its group
    proc.wait()
    done = [f"SIGKILL driver at {at:.2f}"]
    if damage is not None:
        done.append(damage(run_dir / names.CHECKPOINTS))
    resumed = start(["--resume", str(run_dir), "--no-progress"], out / f"{name}.log")
    resumed.wait()
    summary = read_summary(run_dir)
    done.append(f"--resume (exit {resumed.returncode})")
    return scenario_row(name, summary, done, describe_failures(summary))


def resume(args, out: Path) -> FaultRow:
    return _kill_driver_then_resume("resume", args, out, None)


def corrupt_checkpoint(args, out: Path) -> FaultRow:
    def truncate_newest(directory: Path) -> str:
        newest = sorted(directory.glob("checkpoint-*.pt"))[-1]
        data = newest.read_bytes()
        newest.write_bytes(data[: len(data) // 2])
        return f"truncated {newest.name} to half"

    return _kill_driver_then_resume("corrupt-checkpoint", args, out, truncate_newest)


class _Payload:
    """Unpickling this runs a shell command; a safe loader must never get that far."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def payload_checkpoint(args, out: Path) -> FaultRow:
    marker = out / "PAYLOAD-RAN"
    marker.unlink(missing_ok=True)

    def plant(directory: Path) -> str:
        import hashlib

        newest = sorted(directory.glob("checkpoint-*.pt"))[-1]
        buffer = io.BytesIO()
        pickle.dump({"servers": _Payload(marker)}, buffer)
        data = buffer.getvalue()
        newest.write_bytes(data)
        manifest_path = newest.with_suffix(".json")
        manifest = json.loads(manifest_path.read_text())
        manifest.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        manifest_path.write_text(
            json.dumps(manifest)
        )  # a matching hash: only weights_only stops it
        return f"replaced {newest.name} by a pickle that runs `touch` (hash updated to match)"

    row = _kill_driver_then_resume("payload-checkpoint", args, out, plant)
    row.done += f"; payload ran: {marker.exists()}"
    return row


def bad_gradients(args, out: Path) -> FaultRow:
    name = "bad-gradients"
    spec = out / f"{name}.yaml"
    spec.write_text(
        "- {kind: nan_gradient, worker: 1, at: 0.3}\n- {kind: wrong_shape, worker: 2, at: 0.6}\n"
    )
    job = Job(name, [*base_args(args.epochs, out / name), "--faults", str(spec)], args.epochs)
    summary, _, _ = run_job(job, out)
    decisions = [d["reason"] for d in summary.reliability.decisions]
    done = ["injected NaN gradients (worker 1 from 0.3) and wrong-shaped ones (worker 2 from 0.6)"]
    return scenario_row(name, summary, done, "; ".join(decisions) or "-")


def divergence(args, out: Path) -> FaultRow:
    rows = {}
    for guard in ("--divergence-guard", "--no-divergence-guard"):
        name = "divergence" + ("" if guard == "--divergence-guard" else "-unguarded")
        run_args = [
            *base_args(args.epochs, out / name, schedule="bsp:0.25,asp"),
            "--momentum-at-switch", "keep", guard,
        ]  # fmt: skip
        summary, _, _ = run_job(Job(name, run_args, args.epochs), out)
        rows[guard] = summary
    guarded, unguarded = rows["--divergence-guard"], rows["--no-divergence-guard"]
    decisions = guarded.reliability.decisions
    tripped = ", ".join(f"at {d['progress']:.3f}" for d in decisions if d["action"] == "rollback")
    done = [
        "BSP for 25% then ASP with BSP's momentum kept (the reference table's diverging run); "
        f"without the guard: {100 * (unguarded.final_accuracy or 0):.1f}%; "
        f"guard rolled back {tripped or 'never'}"
    ]
    recovery = "; ".join(d["reason"] for d in decisions) or "no rollback"
    return scenario_row("divergence", guarded, done, recovery)


def sustained(args, out: Path) -> FaultRow:
    name = "sustained"
    run_dir = out / name
    minutes = args.sustained_minutes
    # About 300 ASP updates/s of 32 samples here: enough epochs for the minutes asked.
    epochs = round(minutes * 60 * 300 * 32 / TRAIN_SAMPLES)
    fresh(run_dir)
    proc = start(base_args(epochs, run_dir, schedule="asp"), out / f"{name}.log")
    # The clock starts once the run is up (actors.json written): start-up takes longer than
    # a minute on a busy machine, and there is nothing to kill before it.
    while proc.poll() is None and not (run_dir / names.ACTORS).exists():
        time.sleep(0.5)
    started = time.monotonic()
    kills, rss = [], []
    next_kill, next_sample, victim = 60.0, 0.0, 0
    while proc.poll() is None:
        time.sleep(0.5)
        elapsed = time.monotonic() - started
        if elapsed >= next_sample:
            ids = pids(run_dir)
            rss.append((round(elapsed), _rss_mb(ids["servers"][0]), _rss_mb(ids["driver"])))
            next_sample += 10
        if elapsed >= next_kill:
            kills.append(kill_worker(victim % 8)(run_dir))
            victim += 3
            next_kill += 60
    summary = read_summary(run_dir)
    (out / "sustained-rss.json").write_text(json.dumps(rss))
    steady = [r for r in rss if r[1] and r[2]]
    first, last = steady[1] if len(steady) > 1 else steady[0], steady[-1]
    recovery = (
        f"{len(kills)} kills over {summary.wall_time_s / 60:.1f} min; server RSS "
        f"{first[1]:.0f} -> {last[1]:.0f} MB, driver RSS {first[2]:.0f} -> {last[2]:.0f} MB"
    )
    return scenario_row(
        name, summary, [f"ASP, a worker SIGKILLed every 60 s ({len(kills)}x)"], recovery
    )


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


SCENARIO_RUNNERS = {
    "clean": clean,
    "worker-bsp": worker_bsp,
    "worker-asp": worker_asp,
    "worker-switch": worker_switch,
    "server": server,
    "resume": resume,
    "bad-gradients": bad_gradients,
    "divergence": divergence,
    "corrupt-checkpoint": corrupt_checkpoint,
    "payload-checkpoint": payload_checkpoint,
    "sustained": sustained,
}


COLUMNS = (
    "scenario",
    "what was done",
    "final acc %",
    "clean acc %",
    "gradients sent = applied + dropped",
    "dropped by reason",
    "recovery",
)


def print_header() -> None:
    title = (
        "8 workers, EMULATED 20 ms device time per step (lognormal jitter sigma 0.2), "
        "schedule bsp:0.5,asp unless said"
    )
    print(check_timing(title, Timing.EMULATED) + "\n")
    print("\n".join(markdown_table(COLUMNS, [])))


def print_table(log: RunLog) -> None:
    newest = {}
    for record in log.read():
        row = row_from(FaultRow, record)
        newest[row.scenario] = row
    clean_acc = newest["clean"].final_accuracy if "clean" in newest else None
    print_header()
    for name in SCENARIOS:
        if name in newest:
            newest[name].clean_accuracy = clean_acc
            print_row(newest[name])


def print_row(row: FaultRow) -> None:
    acc = row.final_accuracy
    clean = row.clean_accuracy
    dropped = ", ".join(f"{k} {v:,}" for k, v in sorted(row.dropped.items())) or "none"
    balance = (
        f"{row.sent:,} = {row.applied:,} + {sum(row.dropped.values()):,}"
        f" (unaccounted {row.unaccounted})"
        if row.sent is not None
        else "-"
    )
    cells = (
        row.scenario,
        row.done,
        f"{100 * acc:.1f}",
        f"{100 * clean:.1f}" if clean else "-",
        balance,
        dropped,
        row.recovery,
    )
    print(markdown_table(COLUMNS, [cells])[-1], flush=True)


if __name__ == "__main__":
    main()
