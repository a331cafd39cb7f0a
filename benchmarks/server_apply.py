"""Server apply cost: microseconds per applied gradient on a parameter server's update side.

Three ways to apply one gradient to a flat float32 parameter vector, in process, on one thread
(`torch.set_num_threads(1)`, as the Ray server runs), with nothing of the transport:

  (a) `torch.optim.SGD.step()` on one flat Parameter whose `.grad` is set (lr 0.1,
      momentum 0.9, weight decay 5e-4): the floor a plain PyTorch loop pays;
  (b) `FlatSGD.step` alone, same lr, momentum and weight decay;
  (c) `ServerShard.submit` of one ASP gradient, the shard built as runtime/ray/server.py builds
      it (8 workers, weight decay 5e-4, momentum 0.9 scaled to 0.9/8 under ASP): admission
      checks, the ledger, the update, the records the controller drains.

for cnn1d's parameter count (5,210, the reference job) and ResNet-20's (~0.27M). Each repeat
times (a), (b) and (c) back to back, so the ratios (b)/(a) and (c)/(a) are measured in the
same run (medians of the per-repeat ratios); each figure is the median over the repeats of
the time for `--updates` updates after a warm-up, by `time.perf_counter` (wall) and
`time.thread_time` (this thread's CPU; on a shared machine wall includes being preempted).
Every update reuses one gradient tensor (hot in cache, as a gradient the server has just
copied out of its message is); (c) builds a fresh shard per repeat whose run is long enough
that it never ends (a 10,000-update run: it crosses evaluation points, as a real one does).

    python benchmarks/server_apply.py

With `--before-tree DIR` (a checkout of an older commit, e.g. `git worktree add --detach
/tmp/before main`) the same measurement first runs in a subprocess importing `syncswitch`
from DIR, and both are tabled: the before figures of the same benchmark on the old code.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from harness import (
    Timing,
    add_out,
    add_repeats,
    check_timing,
    markdown_table,
    parser,
    save_json,
    save_text,
)

import syncswitch
from syncswitch.control.shard import ServerShard
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.server_optimizer import OptimizerConfig
from syncswitch.workloads import build_model, load_dataset
from syncswitch.workloads.models import resnet20

LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
WORKERS = 8
BATCH = 32
RUN_UPDATES = 10_000  # length of the shard's run in (c): 40 epochs of MNIST-1D at batch 32
WARMUP_UPDATES = 200


def model_sizes() -> list[tuple[str, int]]:
    """(label, parameter count) of the two models the issue names."""
    # The reference job's model, sized by its own dataset (a small MNIST-1D draw is enough).
    cnn1d = build_model("cnn1d", load_dataset("mnist1d", mnist1d_samples=100))
    # ResNet-20 is built for CIFAR-10 (read from disk, never fetched): the model alone.
    sizes = [("cnn1d", cnn1d), ("resnet20", resnet20())]
    return [(name, sum(p.numel() for p in model.parameters())) for name, model in sizes]


# -- the three update paths, each timed over `updates` updates --------------------------------


def _timed(run: Callable[[], None]) -> tuple[float, float]:
    """(wall s, thread CPU s) of one call of `run`."""
    wall, cpu = time.perf_counter(), time.thread_time()
    run()
    return time.perf_counter() - wall, time.thread_time() - cpu


def time_torch_sgd(
    initial: torch.Tensor, gradient: torch.Tensor, updates: int
) -> tuple[float, float]:
    param = torch.nn.Parameter(initial.clone())
    optimizer = torch.optim.SGD([param], lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)

    def steps(n: int) -> None:
        for _ in range(n):
            param.grad = gradient  # as FlatSGD on main set it: the gradient, no copy
            optimizer.step()

    steps(WARMUP_UPDATES)
    return _timed(lambda: steps(updates))


def time_flat_sgd(
    initial: torch.Tensor, gradient: torch.Tensor, updates: int
) -> tuple[float, float]:
    optimizer = FlatSGD(initial, weight_decay=WEIGHT_DECAY)

    def steps(n: int) -> None:
        for _ in range(n):
            optimizer.step(gradient, lr=LR, momentum=MOMENTUM)

    steps(WARMUP_UPDATES)
    return _timed(lambda: steps(updates))


def time_shard_submit(
    initial: torch.Tensor, gradient: torch.Tensor, updates: int
) -> tuple[float, float]:
    config = SyncConfig(
        optimizer=OptimizerConfig(weight_decay=WEIGHT_DECAY),
        workers=WORKERS,
        total_samples=RUN_UPDATES * BATCH,
        schedule=Schedule.single(ASP),
        lr=LR,
        momentum=MOMENTUM,
    )
    return time_submits(config, initial, gradient, updates)


def time_submits(
    config: SyncConfig, initial: torch.Tensor, gradient: torch.Tensor, updates: int
) -> tuple[float, float]:
    """(wall s, thread CPU s) of `updates` ASP submits of `gradient` to a fresh shard."""
    # As ParameterServer.__init__ builds its shard (CPU, no restore, steps not observed).
    shard = ServerShard(config, initial.numpy(), observe_steps=False, device="cpu")
    shard.begin()
    # Built beforehand: the Ray server builds each Gradient from its message (transport side).
    messages = [
        Gradient(
            worker=i % WORKERS,
            sequence=i // WORKERS,
            computed_version=i,
            values=gradient,
            samples=BATCH,
            loss=1.0,
            step_time_s=0.02,
        )
        for i in range(WARMUP_UPDATES + updates)
    ]
    for message in messages[:WARMUP_UPDATES]:
        shard.submit(message)
    timed = messages[WARMUP_UPDATES:]

    def submit_all() -> None:
        for message in timed:
            shard.submit(message)

    result = _timed(submit_all)
    applied = shard.sync.gate.ledger.applied
    if applied != WARMUP_UPDATES + updates:  # every one must have been applied, none dropped
        raise RuntimeError(f"{applied} of {WARMUP_UPDATES + updates} gradients applied")
    return result


PATHS: dict[str, Callable[[torch.Tensor, torch.Tensor, int], tuple[float, float]]] = {
    "a": time_torch_sgd,
    "b": time_flat_sgd,
    "c": time_shard_submit,
}


def measure(updates: int, repeats: int) -> dict:
    """Per model: each path's per-repeat wall and CPU microseconds per update."""
    torch.set_num_threads(1)  # the Ray server's setting (ParameterServer threads=1)
    results = {}
    for name, numel in model_sizes():
        generator = torch.Generator().manual_seed(0)
        initial = torch.randn(numel, generator=generator)
        gradient = torch.randn(numel, generator=generator) * 1e-2
        runs: dict[str, dict[str, list[float]]] = {
            path: {"wall_us": [], "cpu_us": []} for path in PATHS
        }
        for _ in range(repeats):
            # Back to back within a repeat, so a change in the machine's load hits all three.
            for path, run in PATHS.items():
                wall_s, cpu_s = run(initial, gradient, updates)
                runs[path]["wall_us"].append(1e6 * wall_s / updates)
                runs[path]["cpu_us"].append(1e6 * cpu_s / updates)
        results[name] = {"numel": numel, "runs": runs}
        print(f"measured {name} ({numel:,} parameters)", file=sys.stderr, flush=True)
    return {
        "syncswitch": str(Path(syncswitch.__file__).resolve().parent),
        "torch": torch.__version__,
        "updates": updates,
        "repeats": repeats,
        "results": results,
    }


# -- tables --------------------------------------------------------------------------------------


def summarise(measured: dict, metric: str) -> dict[str, dict[str, float]]:
    """Per model: the median of each path and of the per-repeat ratios to (a)."""
    rows = {}
    for name, result in measured["results"].items():
        runs = {path: result["runs"][path][metric] for path in PATHS}
        row = {path: statistics.median(values) for path, values in runs.items()}
        for path in ("b", "c"):
            row[f"{path}/a"] = statistics.median(
                x / a for x, a in zip(runs[path], runs["a"], strict=True)
            )
        rows[name] = row
    return rows


COLUMNS = (
    "parameters",
    "code",
    "(a) torch.optim.SGD",
    "(b) FlatSGD.step",
    "(c) ServerShard.submit, ASP",
    "(b)/(a)",
    "(c)/(a)",
)


def table(versions: list[tuple[str, dict]], metric: str) -> list[str]:
    cells = []
    names = list(versions[0][1]["results"])
    for name in names:
        for label, measured in versions:
            numel = measured["results"][name]["numel"]
            row = summarise(measured, metric)[name]
            cells.append(
                (
                    f"{numel:,} ({name})",
                    label,
                    f"{row['a']:.1f}",
                    f"{row['b']:.1f}",
                    f"{row['c']:.1f}",
                    f"{row['b/a']:.2f}",
                    f"{row['c/a']:.2f}",
                )
            )
    return markdown_table(COLUMNS, cells)


def report(versions: list[tuple[str, dict]], load: tuple[float, float]) -> str:
    first = versions[-1][1]
    title = (
        f"Server apply cost in process, one thread, microseconds per applied gradient (real "
        f"timing, nothing emulated); medians "
        f"of {first['repeats']} repeats x {first['updates']:,} updates; ratios are medians of "
        f"the per-repeat ratios (a, b, c timed back to back). torch {first['torch']}; "
        f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
        f"({os.cpu_count()} cores, shared)."
    )
    lines = [
        check_timing(title, Timing.REAL),
        "",
        "Wall time (`time.perf_counter`):",
        "",
        *table(versions, "wall_us"),
        "",
        "This thread's CPU time (`time.thread_time`):",
        "",
        *table(versions, "cpu_us"),
        "",
    ]
    return "\n".join(lines)


def measure_in(tree: Path, updates: int, repeats: int) -> dict:
    """The same measurement with `syncswitch` imported from `tree` (an older checkout)."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    command = [sys.executable, __file__, "--json", "--updates", str(updates)]
    command += ["--repeats", str(repeats)]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    measured = json.loads(done.stdout)
    if not Path(measured["syncswitch"]).is_relative_to(tree.resolve()):
        raise RuntimeError(f"the before run imported syncswitch from {measured['syncswitch']}")
    return measured


def git_commit(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "?"


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--updates", type=int, default=2000)
    add_repeats(cli, 5)
    cli.add_argument("--before-tree", type=Path, help="an older checkout to measure first")
    cli.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    add_out(cli, "benchmarks/results/server-apply")
    args = cli.parse_args()

    if args.json:
        print(json.dumps(measure(args.updates, args.repeats)))
        return
    load_start = os.getloadavg()[0]
    versions = []
    if args.before_tree is not None:
        before = measure_in(args.before_tree, args.updates, args.repeats)
        versions.append((f"before ({git_commit(args.before_tree)})", before))
    here = Path(syncswitch.__file__).resolve().parent.parent
    versions.append((f"after ({git_commit(here)})", measure(args.updates, args.repeats)))
    text = report(versions, (load_start, os.getloadavg()[0]))
    print(text)
    save_text(args.out / "table.md", text)
    save_json(args.out / "runs.json", {label: measured for label, measured in versions})


if __name__ == "__main__":
    main()
