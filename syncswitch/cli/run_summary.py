"""What `syncswitch train` prints at the end: a short table for people, or JSON for scripts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# The machine-readable summary's keys (the whole summary is in RUN_DIR/summary.json).
JSON_KEYS = (
    "status",
    "final_accuracy",
    "best_accuracy",
    "wall_time_s",
    "samples_per_s",
    "switches",
)


def summary_json(summary: dict[str, Any], run_dir: Path) -> str:
    return json.dumps(
        {**{k: summary.get(k) for k in JSON_KEYS}, "run_dir": str(run_dir)}, indent=2, default=str
    )


def summary_table(summary: dict[str, Any], run_dir: Path, *, library_log: Path | None) -> Table:
    if summary.get("runtime") == "sim":
        timing = "SIMULATED"
    else:
        timing = "emulated" if (summary.get("emulation") or {}).get("enabled") else "real"
    table = Table(
        title=f"run {summary.get('status', '?')}: {summary.get('schedule')}, "
        f"{summary.get('workers')} workers, {timing} timing",
        title_justify="left",
        show_header=False,
        box=None,
        padding=(0, 2, 0, 2),
    )
    table.add_column(style="bold")
    table.add_column()
    final, best = summary.get("final_accuracy"), summary.get("best_accuracy")
    table.add_row(
        "accuracy", f"{_percent(final)} final, {_percent(best)} best" if final is not None else "-"
    )
    wall, setup = summary.get("wall_time_s") or 0.0, summary.get("setup_time_s") or 0.0
    table.add_row("time", f"{wall:,.2f} s training (+ {setup:,.1f} s start-up)")
    rate = summary.get("samples_per_s")
    table.add_row(
        "samples/s", f"{rate:,.0f} ({summary.get('samples', 0):,} samples)" if rate else "-"
    )
    table.add_row("phases", _phases(summary))
    table.add_row("switches", _switches(summary.get("switches") or []))
    table.add_row("dropped", _dropped(summary.get("gradients") or {}))
    if summary.get("placement"):
        table.add_row("placement", _placement(summary["placement"]))
    if library_log is not None:
        table.add_row("Ray/PyTorch log", str(library_log))
    return table


def print_summary(
    summary: dict[str, Any],
    run_dir: Path,
    *,
    library_log: Path | None,
    loggers: list[str],
) -> None:
    console = Console(highlight=False)
    console.print(summary_table(summary, run_dir, library_log=library_log))
    for line in loggers:
        print(f"  {line}")  # e.g. the command that opens TensorBoard on this run
    # Plain prints: a path must never be wrapped, so it can be copied as it stands.
    print(f"results written to {run_dir}/ (summary.json, metrics.csv, updates.csv, ...)")
    plot = shlex.quote(str(run_dir / "report.png"))
    print(f"plot them: syncswitch report {shlex.quote(str(run_dir))} --plot {plot}")


def _phases(summary: dict[str, Any]) -> str:
    times = summary.get("time_by_protocol") or {}
    samples = summary.get("samples_by_protocol") or {}
    total = sum(samples.values()) or 1
    parts = [
        f"{name} {time_s:,.2f} s ({samples.get(name, 0) / total:.0%} of samples)"
        for name, time_s in times.items()
    ]
    return ", ".join(parts) or "-"


def _switches(switches: list[dict[str, Any]]) -> str:
    if not switches:
        return "none"
    shown = [
        f"{s.get('from')}>{s.get('to')} at {float(s.get('at_fraction', 0)):.1%} "
        f"({s.get('reason')}, {1000 * float(s.get('overhead_s', 0)):.2f} ms)"
        for s in switches[:3]
    ]
    more = len(switches) - len(shown)
    return "; ".join(shown) + (f"; +{more} more" if more else "")


def _dropped(gradients: dict[str, Any]) -> str:
    dropped = gradients.get("dropped") or {}
    count = sum(dropped.values()) if isinstance(dropped, dict) else int(dropped or 0)
    sent = gradients.get("sent")
    reasons = ", ".join(f"{n} {reason}" for reason, n in dropped.items()) if count else ""
    text = f"{count} of {sent:,} gradients" if sent else str(count)
    return text + (f" ({reasons})" if reasons else "")


def _placement(placement: dict[str, Any]) -> str:
    """e.g. "spread: 2 nodes (ab12cd34, ef56ab78) on host vm; workers on cuda (0.25 GPU)"."""
    ids = placement.get("node_ids") or []
    shown = ", ".join(str(node)[:8] for node in ids[:4]) + (", ..." if len(ids) > 4 else "")
    hosts = ", ".join(placement.get("hosts") or []) or "?"
    text = f"{placement.get('placement')}: {len(ids)} node(s) ({shown}) on host {hosts}"
    seen = placement.get("nodes_seen") or []
    if len(seen) > len(ids):
        text += f", {len(seen)} nodes used in all"
    worker = (placement.get("resources") or {}).get("worker") or {}
    if worker:
        gpus = worker.get("num_gpus") or 0
        text += f"; workers on {worker.get('device')}" + (f" ({gpus:g} GPU each)" if gpus else "")
    return text


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"
