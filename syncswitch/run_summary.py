"""What a run prints at its end (`syncswitch train`, and `train()` unless told not to): a short
table for people, or JSON for scripts."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from syncswitch.command import program
from syncswitch.config import MAX_CONFIG_FILE_BYTES, TrainConfig
from syncswitch.errors import UserError
from syncswitch.records import Accounting
from syncswitch.rundir import (
    OnlineTimingSummary,
    Summary,
    Switch,
    events,
    names,
    read_config,
    read_events,
)
from syncswitch.rundir.changes import changed_headline
from syncswitch.terminal import NOT_A_TERMINAL_WIDTH


def summary_json(summary: Summary, run_dir: Path) -> str:
    """The short machine-readable summary: the fields the Summary schema marks as headline."""
    return json.dumps({**summary.headline(), "run_dir": str(run_dir)}, indent=2, default=str)


def summary_table(summary: Summary, run_dir: Path, *, library_log: Path | None) -> Table:
    timing = "SIMULATED" if summary.timing == "simulated" else summary.timing
    table = Table(
        title=f"run {summary.status}{changed_headline(summary)}: {summary.schedule}, "
        f"{summary.workers} workers, {timing} timing",
        title_justify="left",
        show_header=False,
        box=None,
        padding=(0, 2, 0, 2),
    )
    table.add_column(style="bold")
    table.add_column()
    metric, final, best = summary.metric, summary.final_value, summary.best_value
    # Where the best was, and the file holding its weights (control/best.py).
    where = f" at {summary.best['fraction']:.0%} (best_weights.pt)" if summary.best else ""
    # A language model's loss is a mean per token: its unit says so beside the name.
    unit = " (nats/token)" if summary.tokens_per_sample and metric.name == "loss" else ""
    table.add_row(
        f"{metric.split} {metric.name}{unit}",
        f"{metric.show(final)} final, {metric.show(best)} best{where}"
        if final is not None
        else "-",
    )
    if summary.stopped_early:
        table.add_row("stopped early", summary.stopped_early)
    if summary.test and metric.split != "test" and metric.name in summary.test:
        table.add_row(
            f"test {metric.name}{unit}", f"{metric.show(summary.test[metric.name])} (final)"
        )
    for split, measured in (("validation", summary.validation), ("test", summary.test)):
        # The job's other metrics (e.g. a language model's perplexity); the loss beside an
        # accuracy is in summary.json, and would only lengthen every classifier's table.
        for name, value in (measured or {}).items():
            if name not in (metric.name, "loss"):
                shown = replace(metric, name=name).show(value)
                table.add_row(f"{split} {name}", f"{shown} (final)")
    wall, setup = summary.wall_time_s or 0.0, summary.setup_time_s or 0.0
    if summary.timing == "simulated" and summary.host_time_s is not None:
        # Simulated seconds are the cluster model's; the host's are what the run took here.
        table.add_row(
            "time",
            f"{wall:,.2f} s SIMULATED training ({summary.host_time_s:,.1f} s on this host)",
        )
    else:
        # The start-up counts from loading the data: the sum of the steps listed above it.
        table.add_row("time", f"{wall:,.2f} s training (+ {setup:,.1f} s start-up, all steps)")
    rate = summary.samples_per_s
    table.add_row("samples/s", f"{rate:,.0f} ({summary.samples:,} samples)" if rate else "-")
    if summary.tokens_per_s is not None:
        # A language model's throughput, labelled as its times are (simulated or measured).
        label = "SIMULATED" if summary.timing == "simulated" else summary.timing
        table.add_row(
            "tokens/s",
            f"{summary.tokens_per_s:,.0f} {label} ({summary.tokens_per_sample} per sample)",
        )
    table.add_row("phases", _phases(summary))
    table.add_row("switches", _switches(summary.switches))
    if summary.online_timing is not None:
        table.add_row("online timing", online_timing_line(summary.online_timing))
    if summary.staleness_rules is not None:
        table.add_row("ASP/SSP rules", _staleness_rules(summary.staleness_rules))
    table.add_row("dropped", _dropped(summary.gradients))
    if summary.placement:
        table.add_row("placement", _placement(summary.placement))
    if library_log is not None:
        # A simulated run starts no Ray: what its libraries print is PyTorch's.
        libraries = "PyTorch" if summary.timing == "simulated" else "Ray/PyTorch"
        table.add_row(f"{libraries} log", str(library_log))
    return table


def print_summary(
    summary: Summary,
    run_dir: Path,
    *,
    library_log: Path | None,
    loggers: list[str],
) -> None:
    # Paths and reasons (a failed run's status) are printed as they are, never as rich markup.
    console = Console(highlight=False, markup=False, emoji=False)
    if not console.is_terminal:
        # A file or a pipe has no width: never cut or wrap a line at rich's default 80.
        console = Console(highlight=False, markup=False, emoji=False, width=NOT_A_TERMINAL_WIDTH)
    console.print(summary_table(summary, run_dir, library_log=library_log))
    same_time = same_time_note(summary, run_dir)
    if same_time:
        print(f"note: {same_time}")
    for line in loggers:
        print(f"  {line}")  # e.g. the command that opens TensorBoard on this run
    # Plain prints: a path must never be wrapped, so it can be copied as it stands.
    print(f"results written to {run_dir}/ ({names.SUMMARY}, {names.METRICS}, {names.UPDATES}, ...)")
    plot = shlex.quote(str(run_dir / "report.png"))
    print(f"plot them: {program()} report {shlex.quote(str(run_dir))} --plot {plot}")


def same_time_note(summary: Summary, run_dir: Path) -> str | None:
    """What a simulated run on the default cluster with no step-time variance must say: there
    every worker's step takes the same time, BSP waits for no one, and BSP, ASP and SSP take
    about the same SIMULATED time (None for any other run)."""
    # The default cluster's network is fast: a preset or file that makes messages costly
    # (wan-1g) makes schedules differ in time without any step-time variance.
    if summary.timing != "simulated" or not summary.cluster:
        return None
    if summary.cluster.get("name") != "default":
        return None
    compute = summary.cluster.get("compute") or {}
    if compute.get("jitter_sigma") or len(set(compute.get("speed_factors") or [1.0])) > 1:
        return None
    try:
        if read_config(run_dir, MAX_CONFIG_FILE_BYTES).get("stragglers"):
            return None
    except (OSError, ValueError, UserError):  # an unreadable config: no claim either way
        return None
    return (
        "this simulated cluster has no step-time variance (no --jitter-sigma, --speed-factors "
        "or --stragglers): every step takes the same time, BSP waits for no one, so BSP, ASP "
        "and SSP take about the same SIMULATED time here and differ in accuracy; add e.g. "
        "--jitter-sigma 0.2 to see the time BSP spends waiting"
    )


def _staleness_rules(rules: dict[str, Any]) -> str:
    """The staleness rules in force, with delay compensation's memory (peak held)."""
    line = str(rules.get("describe", ""))
    peak = rules.get("handed_out_peak_bytes")
    if peak is not None:
        line += f"; weights kept for workers: {peak / 2**20:.2f} MiB at most"
        if rules.get("uncompensated"):
            line += f", {rules['uncompensated']} stale gradients uncompensated"
    return line


def _phases(summary: Summary) -> str:
    samples = summary.samples_by_protocol
    total = sum(samples.values()) or 1
    parts = [
        # Samples are counted by protocol (ssp, local), times by phase name (ssp-1, local-16).
        f"{name} {time_s:,.2f} s "
        f"({samples.get(name, samples.get(name.split('-')[0], 0)) / total:.0%} of samples)"
        for name, time_s in summary.time_by_protocol.items()
    ]
    return ", ".join(parts) or "-"


def _switches(switches: tuple[Switch, ...]) -> str:
    if not switches:
        return "none"
    shown = [
        # The online decision's signal values are the "online timing" row's; the time is what
        # putting the new protocol in force took on the server.
        f"{s.from_protocol}>{s.to_protocol} at {s.at_fraction:.1%} "
        f"({_switch_reason(s.reason)}; in force in {1000 * s.overhead_s:.2f} ms)"
        for s in switches[:3]
    ]
    more = len(switches) - len(shown)
    return "; ".join(shown) + (f"; +{more} more" if more else "")


def _switch_reason(reason: str) -> str:
    return "online timing, see below" if reason.startswith("online_timing") else reason


def online_timing_line(timing: OnlineTimingSummary) -> str:
    """Where an online phase ended and why, with the signal against its threshold then."""
    bounds = f"floor {timing.floor:.3g}, ceiling {timing.ceiling:.3g}"
    rule = f"{timing.rule} rule, threshold {timing.threshold:g}, {bounds}"
    if not timing.switched and timing.decided_at is not None and timing.decided_at >= 1.0:
        # A job of a few BSP rounds reaches its end before the ceiling's switch can land.
        return (
            f"no switch: training ended as the rule decided ({timing.reason}, after "
            f"{timing.checks} check{'s' if timing.checks != 1 else ''}), a job too short to "
            f"leave BSP; {rule}"
        )
    if not timing.switched:
        why = f"decided ({timing.reason})" if timing.reason else "not decided"
        return (
            f"no switch of its own: {why} (a rollback's pinned protocol or a straggler policy "
            f"may have had the last word); {rule}"
        )
    why = {
        "signal": "the signal crossed its threshold",
        "ceiling": "the ceiling was reached first",
        "message_cost": "a message surely costs 1.5 steps' compute or more here",
    }.get(timing.reason or "", timing.reason or "")
    chosen = f"; {timing.follower.get('describe', '')}" if timing.follower else ""
    shown = ", ".join(
        f"{k} {v:.4g}" for k, v in timing.values.items() if v is not None and k != "threshold"
    )
    return (
        f"left BSP at {timing.at_fraction:.1%} of samples: {why} ({timing.rule}, threshold "
        f"{timing.threshold:g}; {shown}; {bounds}){chosen}"
    )


def _dropped(gradients: Accounting) -> str:
    count = gradients.dropped_total
    reasons = ", ".join(f"{n} {reason}" for reason, n in gradients.dropped.items()) if count else ""
    text = f"{count} of {gradients.sent:,} gradients" if gradients.sent else str(count)
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


def logger_lines(config: TrainConfig, run_dir: Path) -> list[str]:
    """Where the loggers' results are, and any that failed during the run."""
    lines = []
    if "tensorboard" in (config.logger or ()):
        lines.append(f"tensorboard --logdir {run_dir / 'tensorboard'}")
    if "mlflow" in (config.logger or ()):
        from syncswitch.loggers.mlflow import default_tracking_uri, viewing_hint

        lines.append(viewing_hint(config.tracking_uri or default_tracking_uri(run_dir)))
    if lines:
        for failed in events.of_kind(read_events(run_dir), events.LoggerFailed):
            lines.append(f"logger {failed.logger} failed mid-run: {failed.reason}")
    return lines
