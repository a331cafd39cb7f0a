"""CPU seconds per applied gradient, split by role, for ASP workers on MNIST-1D.

Runs pure ASP (8 workers by default), with emulated 20 ms device time and without emulation,
several times each. During the steady part of each run it reads the CPU times of every
process this script started (/proc/<pid>/stat) at the start and end of a window, and the
number of applied gradients (rows of the run's updates.csv) at the same two moments. The run
directory's actors.json says which process is the server, a worker, the evaluator; this
process is the driver; every other descendant of this process is Ray's own (GCS, raylet,
dashboard, idle Ray workers). The forward/backward CPU per gradient is measured separately,
in this process on one thread, right after each run (same model, batch size and data), and
subtracted from the workers' CPU. That is a warm-cache figure; the workers also measure each
step's compute CPU in place (worker_steps.csv `compute_cpu_mean_s`: weights in, batch,
forward, backward, gradient out, on a core shared with ten other processes), and the last
columns subtract that instead. Medians of the runs are printed as a markdown table.

With --profile-s, one more emulated run is profiled with py-spy (server and worker 0,
sampling only the thread that holds the GIL, i.e. Python-side CPU) and the top functions by
self and total samples are written as text. Per-thread CPU from /proc (Ray's C++ threads
included) is in runs.json for every run.

    python benchmarks/cpu_breakdown.py --repeats 3 --profile-s 10

Results: --out, default benchmarks/results/cpu-breakdown/ (table.md, runs.json,
profile-*.txt), written as they are produced.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from harness import (
    Timing,
    add_out,
    add_repeats,
    args_record,
    check_timing,
    comma_list,
    markdown_table,
    save_json,
    save_text,
)
from harness import (
    parser as cli,
)

from syncswitch.config import TrainConfig
from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.core.sync.sharding import BatchStream
from syncswitch.rundir import names
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train
from syncswitch.workloads import build_model, load_dataset, prepare_batch

_TICK = os.sysconf("SC_CLK_TCK")
OUT = Path("benchmarks/results/cpu-breakdown")  # the default of --out
ROLES = ("server", "workers_excl_fb", "forward_backward", "driver_evaluator", "ray", "total")


# -- reading /proc ------------------------------------------------------------------------


def _stat_fields(path: str) -> list[str] | None:
    try:
        with open(path) as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu_s(pid: int) -> float | None:
    fields = _stat_fields(f"/proc/{pid}/stat")
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICK


def descendants(root: int) -> set[int]:
    """`root` and every process below it (Ray's processes are children of the driver)."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fields = _stat_fields(f"/proc/{pid}/stat")
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(pid))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of one process's threads, grouped by thread name (Ray names its own)."""
    totals: Counter[str] = Counter()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as handle:
                name = handle.read().strip()
        except OSError:
            continue
        if fields is not None:
            totals[name] += (int(fields[11]) + int(fields[12])) / _TICK
    return dict(totals)


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all processes, anyone's)."""
    with open("/proc/stat") as handle:
        ticks = [int(v) for v in handle.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / _TICK


def count_rows(path: Path) -> int:
    try:
        with open(path, "rb") as handle:
            return max(0, handle.read().count(b"\n") - 1)  # less the header
    except OSError:
        return 0


class Mark:
    """Everything read at one end of the measuring window."""

    def __init__(self, run_dir: Path) -> None:
        self.time_s = time.monotonic()
        self.applied = count_rows(run_dir / names.UPDATES)
        self.machine_s = machine_busy_s()
        self.cpu_s = {pid: process_cpu_s(pid) for pid in descendants(os.getpid())}
        actors = json.loads((run_dir / names.ACTORS).read_text())
        self.server = actors["servers"][0]
        self.worker0 = actors["workers"]["0"]
        self.server_threads = thread_cpu_s(self.server)
        self.worker0_threads = thread_cpu_s(self.worker0)


def role_of(pid: int, actors: dict) -> str:
    if pid in actors["servers"]:
        return "server"
    if pid in actors["workers"].values():
        return "workers"
    if pid == actors["driver"] or pid == actors["actors"]["evaluator"]["pid"]:
        return "driver_evaluator"
    return "ray"


# -- forward/backward on its own ----------------------------------------------------------


def forward_backward_cpu_ms(config: TrainConfig, iterations: int = 300) -> dict[str, float]:
    """CPU ms per gradient, on one thread of this process: the forward/backward pass alone,
    and the worker's whole gradient step (load weights, batch, forward/backward, copy out)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dataset = load_dataset(config.dataset, mnist1d_samples=config.mnist1d_samples)
        torch.manual_seed(0)
        model = build_model(config.model_name, dataset)
        model.train()
        flat = FlatParameters(model)
        weights = flat.values.numpy().copy()
        batches = BatchStream(torch.arange(len(dataset.y_train)).numpy(), config.batch_size, 0, 0)
        generator = torch.Generator().manual_seed(0)

        def batch() -> tuple[torch.Tensor, torch.Tensor]:
            indices = batches.next_indices()
            return prepare_batch(
                dataset,
                dataset.x_train[indices],
                dataset.y_train[indices],
                train=True,
                generator=generator,
            )

        x, y = batch()
        for _ in range(20):  # warm up
            flat.zero_grad()
            F.cross_entropy(model(x), y).backward()
        started = time.thread_time()
        for _ in range(iterations):
            flat.zero_grad()
            F.cross_entropy(model(x), y).backward()
        fb_ms = 1000 * (time.thread_time() - started) / iterations
        started = time.thread_time()
        for _ in range(iterations):
            flat.load(weights)
            x, y = batch()
            flat.zero_grad()
            F.cross_entropy(model(x), y).backward()
            flat.gradient_to_host()
        step_ms = 1000 * (time.thread_time() - started) / iterations
        return {"forward_backward_ms": fb_ms, "gradient_step_ms": step_ms}
    finally:
        torch.set_num_threads(threads)


# -- one run --------------------------------------------------------------------------------


def run_once(config: TrainConfig, warmup_s: float, window_s: float, on_window=None) -> dict:
    """Train `config`; measure CPU by role over a window in its steady part."""
    run_dir = Path(config.out)
    marks: dict[str, Mark] = {}
    failed: list[BaseException] = []

    def sample() -> None:
        try:
            # Past start-up: the workers are training (gradients applied), then warmup_s more.
            while count_rows(run_dir / names.UPDATES) < 50:
                time.sleep(0.2)
            time.sleep(warmup_s)
            marks["a"] = Mark(run_dir)
            if on_window is not None:
                on_window(marks["a"])
            time.sleep(window_s)
            marks["b"] = Mark(run_dir)
        except BaseException as error:  # reported by the caller
            failed.append(error)

    shutil.rmtree(run_dir, ignore_errors=True)  # measured again from scratch
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    summary = train(config, print_summary=False).summary
    sampler.join(timeout=1)
    if failed or "b" not in marks:
        raise RuntimeError(
            f"the window did not fit in the run ({failed or 'ended early'}): raise --epochs"
        )
    a, b = marks["a"], marks["b"]
    if b.applied >= summary.updates:
        raise RuntimeError("the run ended inside the window: raise --epochs")
    actors = json.loads((run_dir / names.ACTORS).read_text())
    actors["workers"] = {int(k): v for k, v in actors["workers"].items()}
    used: Counter[str] = Counter()
    for pid, end_s in b.cpu_s.items():
        if end_s is not None:
            used[role_of(pid, actors)] += end_s - (a.cpu_s.get(pid) or 0.0)
    applied = b.applied - a.applied
    window = b.time_s - a.time_s
    ours_s = sum(used.values())
    row = {
        "applied_in_window": applied,
        "window_s": window,
        "updates_per_s": applied / window,
        "run_updates_per_s": summary.updates_per_s,
        "cpu_ms_per_gradient": {k: 1000 * v / applied for k, v in used.items()},
        "cores_busy_this_run": ours_s / window,
        "cores_busy_others": (b.machine_s - a.machine_s - ours_s) / window,
        "server_threads_ms_per_gradient": _per_gradient(
            a.server_threads, b.server_threads, applied
        ),
        "worker0_threads_ms_per_worker_gradient": _per_gradient(
            a.worker0_threads, b.worker0_threads, applied / config.workers
        ),
        "worker_compute_wall_ms": _worker_compute_ms(run_dir),
        "worker_compute_cpu_ms": _worker_compute_ms(run_dir, "compute_cpu_mean_s"),
    }
    return row


def _per_gradient(a: dict[str, float], b: dict[str, float], applied: float) -> dict[str, float]:
    used = {name: 1000 * (b[name] - a.get(name, 0.0)) / applied for name in b}
    return dict(sorted(((k, round(v, 3)) for k, v in used.items() if v > 0), key=lambda kv: -kv[1]))


def _worker_compute_ms(run_dir: Path, column: str = "compute_mean_s") -> float | None:
    """The workers' own mean of a step's compute (worker_steps.csv): wall time (under
    contention), or with `compute_cpu_mean_s` its CPU time, measured in place."""
    import csv

    try:
        with open(run_dir / names.WORKER_STEPS) as handle:
            rows = list(csv.DictReader(handle))
    except OSError:
        return None
    values = [float(r[column]) for r in rows if r.get(column)]
    return 1000 * statistics.mean(values) if values else None


def split_roles(row: dict, fb_ms: float) -> dict[str, float]:
    """Per applied gradient: the workers' CPU less the forward/backward pass, and the total."""
    cpu = row["cpu_ms_per_gradient"]
    split = {
        "server": cpu.get("server", 0.0),
        "workers_excl_fb": cpu.get("workers", 0.0) - fb_ms,
        "forward_backward": fb_ms,
        "driver_evaluator": cpu.get("driver_evaluator", 0.0),
        "ray": cpu.get("ray", 0.0),
    }
    split["total"] = sum(split.values())
    split["framework"] = split["total"] - fb_ms
    return split


# -- profile ----------------------------------------------------------------------------------


def py_spy() -> str | None:
    candidate = Path(sys.executable).with_name("py-spy")
    return str(candidate) if candidate.exists() else shutil.which("py-spy")


def profile_summary(raw_path: Path, top: int = 25) -> str:
    """Top functions by self and total samples from py-spy's raw (collapsed) output."""
    self_count: Counter[str] = Counter()
    total_count: Counter[str] = Counter()
    thread_count: Counter[str] = Counter()
    samples = 0
    for line in raw_path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        if frames[0].startswith(("thread ", "process ")):
            thread_count[frames[0]] += count
            frames = frames[1:]
        # No Python frame: the thread holds the GIL in native code (Ray's Cython/C++).
        frames = [_function(f) for f in frames] or ["(native code, no Python frame)"]
        samples += count
        self_count[frames[-1]] += count
        for name in set(frames):
            total_count[name] += count
    lines = [f"{samples} samples (GIL held)"]
    if thread_count:
        lines.append("by thread:")
        lines += [f"  {100 * n / samples:5.1f}%  {t}" for t, n in thread_count.most_common(8)]
    for title, counts in (("self", self_count), ("total (inclusive)", total_count)):
        lines.append(f"top {top} by {title}:")
        lines += [f"  {100 * n / samples:5.1f}%  {name}" for name, n in counts.most_common(top)]
    return "\n".join(lines) + "\n"


def _function(frame: str) -> str:
    """'push_pull (syncswitch/runtime/ray/server.py:123)' -> 'push_pull (.../server.py)'."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    parts = where.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else where
    return f"{name} ({short})" if where else name


def profile_run(config: TrainConfig, args: argparse.Namespace) -> None:
    tool = py_spy()
    if tool is None:
        print("py-spy not found: no profile (pip install py-spy)", flush=True)
        return
    outputs: list[tuple[str, Path, subprocess.Popen]] = []

    def start(mark: Mark) -> None:
        for name, pid in (("server", mark.server), ("worker0", mark.worker0)):
            raw = Path(args.out) / f"profile-{name}.raw.txt"
            command = [
                tool,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(max(1, round(args.profile_s))),
            ]
            command += ["--rate", "100", "--format", "raw", "--threads", "--output", str(raw)]
            # Only the thread holding the GIL: Python-side CPU, not threads waiting in C
            # (py-spy counts a thread blocked in Ray's C++ or in time.sleep as active).
            command.append("--gil")
            if args.native:
                command.append("--native")
            log = open(Path(args.out) / f"profile-{name}.log", "w")  # noqa: SIM115 (closed with the process)
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            outputs.append((name, raw, process))

    run_once(config, args.warmup_s, args.profile_s + 2, on_window=start)
    for name, raw, process in outputs:
        process.wait(timeout=60)
        if not raw.exists():
            print(f"py-spy gave no profile of the {name} (see {args.out}/profile-{name}.log)")
            continue
        text = profile_summary(raw)
        (Path(args.out) / f"profile-{name}.txt").write_text(text)
        print(f"\n## py-spy, {name} ({args.profile_s} s, emulated ASP)\n\n{text}", flush=True)


# -- the table --------------------------------------------------------------------------------


COLUMNS = (
    "mode",
    "updates/s",
    "server",
    "workers excl. fwd/bwd",
    "fwd/bwd",
    "driver + evaluator",
    "Ray processes",
    "total",
    "framework (total - fwd/bwd)",
    "fwd/bwd in place",
    "framework (total - fwd/bwd in place)",
    "cores busy (run / others)",
)


def table(results: dict, args: argparse.Namespace) -> str:
    """The markdown table: one row per mode (emulated device time, or none), medians."""
    step_times = comma_list(args.step_times_ms, float)
    timings = {Timing.EMULATED if ms else Timing.REAL for ms in step_times}
    title = (
        f"ASP, {args.workers} workers, MNIST-1D cnn1d, batch {args.batch_size}; CPU ms per "
        f"applied gradient over a {args.window_s:g} s steady window; medians of "
        f"{args.repeats} runs; {os.cpu_count()} cores, shared machine; timing per mode: "
        + ", ".join(mode_label(ms) for ms in step_times)
    )
    head = check_timing(title, *timings) + "\n\n" + "\n".join(markdown_table(COLUMNS, [])) + "\n"
    rows = []
    for mode, runs in results.items():
        if not runs:
            continue
        med = {k: statistics.median(r["split"][k] for r in runs) for k in (*ROLES, "framework")}
        rate = statistics.median(r["updates_per_s"] for r in runs)
        ours = statistics.median(r["cores_busy_this_run"] for r in runs)
        others = statistics.median(r["cores_busy_others"] for r in runs)
        cells = " | ".join(f"{med[k]:.2f}" for k in (*ROLES, "framework"))
        in_place = [r for r in runs if r.get("worker_compute_cpu_ms")]
        if in_place:
            fb = statistics.median(r["worker_compute_cpu_ms"] for r in in_place)
            framework = statistics.median(
                r["split"]["total"] - r["worker_compute_cpu_ms"] for r in in_place
            )
            cells += f" | {fb:.2f} | {framework:.2f}"
        else:
            cells += " | - | -"
        rows.append(f"| {mode} | {rate:.0f} | {cells} | {ours:.2f} / {others:.2f} |")
    return head + "\n".join(rows) + "\n"


def mode_label(step_time_ms: float) -> str:
    if step_time_ms:
        return f"EMULATED {step_time_ms:g} ms device time (sigma 0.2)"
    return "no emulation (real compute only)"


def main() -> None:
    parser = cli(__doc__)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--step-times-ms", default="20,0", help="emulated ms; 0 = no emulation")
    parser.add_argument("--epochs", type=float, default=40.0)
    add_repeats(parser, 3)
    parser.add_argument("--warmup-s", type=float, default=4.0)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--profile-s", type=float, default=0.0, help="0: no py-spy profile")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames)")
    add_out(parser, OUT)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    start_local(args.workers + 4)

    def config(step_time_ms: float, seed: int) -> TrainConfig:
        return TrainConfig(
            workers=args.workers,
            batch_size=args.batch_size,
            schedule="asp",
            epochs=args.epochs,
            seed=seed,
            step_time_ms=step_time_ms,
            jitter_sigma=0.2,
            progress=False,
            out=str(out / "runs" / f"{step_time_ms:g}ms-s{seed}"),
        )

    step_times = comma_list(args.step_times_ms, float)
    results: dict[str, list[dict]] = {mode_label(ms): [] for ms in step_times}
    for seed in range(args.repeats):
        for ms in step_times:
            cfg = config(ms, seed)
            try:
                row = run_once(cfg, args.warmup_s, args.window_s)
            except RuntimeError as error:  # the run was too short for the window
                print(f"{mode_label(ms)}, seed {seed}: not measured: {error}", flush=True)
                continue
            row["calibration"] = forward_backward_cpu_ms(cfg)
            row["split"] = split_roles(row, row["calibration"]["forward_backward_ms"])
            row["seed"] = seed
            results[mode_label(ms)].append(row)
            split = ", ".join(f"{k} {v:.2f}" for k, v in row["split"].items())
            print(f"{mode_label(ms)}, seed {seed}: {row['updates_per_s']:.0f}/s; {split}")
            save_json(out / "runs.json", {"args": args_record(args), "results": results}, indent=2)
            save_text(out / "table.md", table(results, args))
    print("\n" + table(results, args), flush=True)
    if args.profile_s > 0:
        # Long enough for the warm-up and the profile at ASP's rate here.
        profile_run(replace(config(20.0, 100), epochs=2 * args.epochs), args)


if __name__ == "__main__":
    main()
