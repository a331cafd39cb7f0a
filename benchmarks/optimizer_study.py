"""Issue 33's study: what an optimizer's state needs at the BSP-to-ASP switch, on the language
model, with AdamW and with SGD side by side.

Runs `syncswitch train` as a user would (`--dataset pysource --model char-transformer`), once
per (optimizer, workers, seed, configuration), and tabulates the validation loss (final and
best), the time, where BSP ended and whether the run diverged (a divergence-guard rollback,
or a loss that is not finite). The configurations, for each optimizer:

- bsp; asp and bsp:0.25,asp with each state policy at the switch (keep, scale: beta1 or
  momentum over the workers, reset: the first moment or momentum buffer started afresh);
- online timing (`--schedule online`, the default state policy);
- for AdamW only: the staleness-aware rules (`--staleness-lr inverse`,
  `--delay-compensation 0.04`) on asp and on bsp:0.25,asp, and each state policy with the
  other `--async-lr` than Adam's default (`none`: BSP's lr): `linear`, BSP's over the workers.

    .venv/bin/python benchmarks/optimizer_study.py --runtime sim --workers 8,32 --seeds 3
    .venv/bin/python benchmarks/optimizer_study.py --runtime ray --workers 8 --seeds 2 \\
        --step-time-ms 20

On the simulator every time is SIMULATED (a virtual clock from the cluster model); on Ray with
`--step-time-ms` the device time is EMULATED (a sleep pads each step); the table says which.
Results: --out (default benchmarks/results/optimizer-study/<runtime>/): runs.jsonl (a line per
run as it ends; a rerun skips the runs already there) and table.md, rewritten after every run.
"""

from __future__ import annotations

import math
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (
    RunLog,
    Timing,
    add_out,
    check_timing,
    comma_list,
    markdown_table,
    read_summary,
    save_text,
)
from harness import parser as harness_parser

from syncswitch.rundir import names

# Each optimizer's learning rate for this model (of one BSP update; ASP uses lr/workers).
LR = {"adamw": "3e-3", "sgd": "0.2"}  # SGD: 0.5 diverges on this job (docs/language-model.md)


@dataclass(frozen=True)
class Case:
    label: str
    flags: tuple[str, ...]


def cases(optimizer: str) -> list[Case]:
    out = [Case("bsp", ("--schedule", "bsp"))]
    for schedule in ("asp", "bsp:0.25,asp"):
        for policy in ("keep", "scale", "reset"):
            flags = ("--schedule", schedule, "--momentum-at-switch", policy)
            out.append(Case(f"{schedule} {policy}", flags))
    out.append(Case("online", ("--schedule", "online")))
    if optimizer != "adamw":
        return out
    rules = {
        "inverse-lr": ("--staleness-lr", "inverse"),
        "dc 0.04": ("--delay-compensation", "0.04"),
    }
    for schedule in ("asp", "bsp:0.25,asp"):
        for label, flags in rules.items():
            out.append(Case(f"{schedule} {label}", ("--schedule", schedule, *flags)))
    # Adam's learning rate in ASP: BSP's over the workers (linear) or BSP's (none, Adam's
    # default), with each state policy.
    for schedule in ("asp", "bsp:0.25,asp"):
        for policy in ("keep", "scale", "reset"):
            flags = ("--schedule", schedule, "--momentum-at-switch", policy)
            # The other policy than the optimizer's default (the rows above).
            other = "linear" if optimizer == "adamw" else "none"
            out.append(Case(f"{schedule} {policy} async-lr {other}", (*flags, "--async-lr", other)))
    return out


def runs(args: Any) -> Iterator[tuple[str, int, int, Case]]:
    for optimizer in comma_list(args.optimizers):
        for workers in comma_list(args.workers, int):
            for seed in range(args.seeds):
                for case in cases(optimizer):
                    if args.only and not _chosen(case.label, args.only.split("|")):
                        continue
                    yield optimizer, workers, seed, case


def _chosen(label: str, only: list[str]) -> bool:
    """`--only`: a label containing one of the items, or equal to an item given as =LABEL."""
    return any(label == o[1:] if o.startswith("=") else o in label for o in only)


def run_one(args: Any, optimizer: str, workers: int, seed: int, case: Case) -> dict[str, Any]:
    name = f"{optimizer}-w{workers}-s{seed}-{case.label}"
    out = args.out / "runs" / name.replace(":", "").replace(",", "-").replace(" ", "_")
    shutil.rmtree(out, ignore_errors=True)
    command = Path(sys.executable).parent / "syncswitch"
    argv = [str(command), "train", "--runtime", args.runtime, "--workers", str(workers)]
    argv += ["--dataset", "pysource", "--model", "char-transformer", "--optimizer", optimizer]
    argv += ["--lr", LR[optimizer], "--epochs", str(args.epochs), "--seed", str(seed)]
    argv += [*case.flags, "--out", str(out), "--no-progress", "--json"]
    argv += ["--registry", str(args.out / "registry.db")]  # never the user's registry
    if args.runtime == "ray" and args.step_time_ms:
        argv += ["--step-time-ms", str(args.step_time_ms)]
    argv += args.extra
    done = subprocess.run(argv, capture_output=True, text=True)
    row: dict[str, Any] = {
        "optimizer": optimizer,
        "workers": workers,
        "seed": seed,
        "case": case.label,
        "flags": list(case.flags),
        "runtime": args.runtime,
        "timing": _timing(args).value,
    }
    if done.returncode != 0 and not (out / names.SUMMARY).is_file():
        return row | {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    summary = read_summary(out)
    rollbacks = summary.reliability.rollbacks if summary.reliability else 0
    final = summary.final_value
    bsp_end = next((s.at_fraction for s in summary.switches if s.from_protocol == "bsp"), None)
    return row | {
        "status": summary.status,
        "val_loss_final": final,
        "val_loss_best": summary.best_value,
        "test": summary.test,
        "time_s": summary.wall_time_s,
        "bsp_end": bsp_end,
        "rollbacks": rollbacks,
        "diverged": bool(rollbacks) or final is None or not math.isfinite(final),
    }


def _timing(args: Any) -> Timing:
    if args.runtime == "sim":
        return Timing.SIMULATED
    return Timing.EMULATED if args.step_time_ms else Timing.REAL


def table(rows: list[dict[str, Any]], args: Any) -> str:
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["optimizer"], row["workers"], row["case"]), []).append(row)
    bsp = {
        (o, w): statistics.median(r["val_loss_final"] for r in rs if "error" not in r)
        for (o, w, c), rs in groups.items()
        if c == "bsp" and any("error" not in r for r in rs)
    }
    cells = []
    for (optimizer, workers, case), rs in groups.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            cells.append([optimizer, str(workers), case, "error: " + rs[0]["error"], *["-"] * 6])
            continue
        finals = [r["val_loss_final"] for r in ok]
        median = statistics.median(finals)
        spread = max(finals) - min(finals)
        base = bsp.get((optimizer, workers))
        vs = "-" if base is None else f"{100 * (median - base) / base:+.1f}%"
        ends = [r["bsp_end"] for r in ok if r["bsp_end"] is not None]
        cells.append(
            [
                optimizer,
                str(workers),
                case,
                f"{median:.4f}",
                f"{spread:.4f}",
                vs,
                f"{statistics.median(r['time_s'] for r in ok):.1f}",
                f"{statistics.median(ends):.2f}" if ends else "-",
                f"{sum(r['diverged'] for r in ok)}/{len(ok)}",
                str(len(ok)),
            ]
        )
    seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in rows}))
    timing = _timing(args)
    said = {
        Timing.SIMULATED: "SIMULATED time (virtual clock)",
        Timing.EMULATED: f"real time with EMULATED {args.step_time_ms:g} ms steps",
        Timing.REAL: "real time",
    }[timing]
    extra = f", flags {' '.join(args.extra)}" if args.extra else ""
    title = check_timing(
        f"Language model (pysource, char-transformer), {args.epochs:g} epoch(s){extra}, "
        f"runtime {args.runtime}, {said}, seeds {seeds}: validation loss (lower is better), "
        "medians over seeds",
        timing,
    )
    columns = [
        "optimizer",
        "workers",
        "configuration",
        "val loss, final",
        "spread (max-min)",
        "vs BSP",
        "time s",
        "BSP ended at",
        "diverged",
        "runs",
    ]
    return "\n".join([f"### {title}", "", *markdown_table(columns, cells), ""])


def main() -> None:
    parser = harness_parser(__doc__, epilog=True)
    parser.add_argument("--runtime", choices=("ray", "sim"), default="sim")
    parser.add_argument("--workers", default="8", help="comma-separated worker counts")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--optimizers", default="adamw,sgd")
    parser.add_argument(
        "--only", default="", help="|-separated: cases whose label contains one (=LABEL: is)"
    )
    parser.add_argument("--step-time-ms", type=float, default=0.0, help="ray: EMULATED steps")
    parser.add_argument("extra", nargs="*", help="more `syncswitch train` flags, after --")
    add_out(parser, None)
    args = parser.parse_args()
    if args.out is None:
        args.out = Path(__file__).parent / "results" / "optimizer-study" / args.runtime
    args.out.mkdir(parents=True, exist_ok=True)
    log = RunLog(args.out / "runs.jsonl")
    rows = list(log.read()) if (args.out / "runs.jsonl").is_file() else []
    done = {(r["optimizer"], r["workers"], r["seed"], r["case"]) for r in rows}
    for optimizer, workers, seed, case in runs(args):
        if (optimizer, workers, seed, case.label) in done:
            continue
        row = run_one(args, optimizer, workers, seed, case)
        log.append(row)
        rows.append(row)
        save_text(args.out / "table.md", table(rows, args))
        shown = row.get("error") or f"val loss {row['val_loss_final']:.4f}, {row['time_s']:.1f} s"
        print(f"{optimizer} w{workers} s{seed} {case.label}: {shown}", flush=True)
    text = table(rows, args)
    save_text(args.out / "table.md", text)  # also after `--only` chose nothing: rows relabelled
    print(text)


if __name__ == "__main__":
    main()
