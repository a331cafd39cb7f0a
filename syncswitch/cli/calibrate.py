"""`syncswitch calibrate RUN_DIR [RUN_DIR ...] -o cluster.yaml`: fit the simulator's cluster
model to finished Ray runs, and say how well its replay matches each of them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from syncswitch.errors import ConfigError

_EXAMPLES = """examples:
  syncswitch train --workers 8 --step-time-ms 20 --schedule bsp:0.25,asp --out runs/cal
  syncswitch calibrate runs/cal -o cluster.yaml
  syncswitch calibrate runs/cal-4 runs/cal-12 -o cluster.yaml    # two worker counts
  syncswitch train --runtime sim --cluster cluster.yaml --workers 8 --schedule asp

Runs of your own model are calibrated when the command line names it again (--model
mypkg.models:Net): the path in a run's config.json is never imported.
The fitted model is replayed on each run's whole job; a model whose replay misses a run's
wall time or a protocol's seconds per step by more than 5% is not written unless --force.
What is fitted to what is written into the file's `notes` (docs/simulator.md).
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "calibrate",
        help="fit a cluster model for --runtime sim to finished Ray runs",
        description="Fit the simulator's cluster model (step times, nodes and host CPU,\n"
        "latency) to the records of finished Ray runs, and write it as a cluster file.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "run_dirs",
        metavar="RUN_DIR",
        nargs="+",
        help="complete run directories of Ray runs (e.g. two worker counts), fitted together",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        required=True,
        help="cluster file to write (.yaml, .yml or .toml is read back by --cluster; YAML here)",
    )
    parser.add_argument(
        "--no-refine",
        action="store_true",
        help="skip replaying the run on the simulator to refine the fit (faster, rougher)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write the model even if its replay misses one of its runs by more than 5%%",
    )
    parser.add_argument(
        "--model",
        metavar="MODULE:NAME",
        default=None,
        help="the runs' own model, by the import path they trained (a run directory never "
        "chooses code to import: a run whose config.json names one is refused without it)",
    )
    parser.add_argument(
        "--cores",
        type=int,
        metavar="N",
        default=None,
        help="cores of the node the runs ran on (default: this machine's)",
    )
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from syncswitch.calibration import MAX_REPLAY_ERROR, calibrate, cluster_yaml
    from syncswitch.files import check_output, write_output

    output = Path(args.output)
    if output.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"--output {str(output)!r}: use a .yaml or .yml file name")
    check_output(output, "--output")  # before the fit, which takes a while
    if args.cores is not None and not 1 <= args.cores <= 1 << 16:
        raise ConfigError(f"--cores {args.cores} is not allowed; it must be in 1..65536")
    print(f"syncswitch: fitting a cluster model to {' '.join(args.run_dirs)} ...", file=sys.stderr)
    model, report = calibrate(
        args.run_dirs, refine=not args.no_refine, cores=args.cores, model_path=args.model
    )
    for replay in report["replays"]:
        missing = [key for key in replay.measured if key not in replay.simulated]
        if missing:
            print(f"  {replay.run}: the replay has no steady {', '.join(missing)} steps")
        for key, error in replay.errors().items():
            unit, scale = ("s", 1.0) if key == "wall" else ("ms per step", 1e3)
            print(
                f"  {replay.run} ({replay.workers} workers) {key}: measured "
                f"{replay.measured[key] * scale:.2f} {unit}, simulated "
                f"{replay.simulated[key] * scale:.2f} {unit} ({100 * error:+.1f}%)"
            )
    compute, network, host = model.compute, model.network, model.host_cpu
    print(
        f"  fitted: step {compute.step_time_ms:.2f} ms, jitter sigma {compute.jitter_sigma:.3f}, "
        f"{model.nodes.cores or 'unlimited'} cores per node, host CPU per step "
        f"{host.worker_ms:.3f} ms framework + {host.compute_ms:.3f} ms compute, server "
        f"{model.server.message_ms:.3f} ms per gradient + {model.server.reply_ms:.3f} ms per "
        f"reply, latency {network.latency_ms:.3f} ms"
    )
    worst = max(report["replays"], key=lambda r: abs(r.worst()[1]))
    key, error = worst.worst()
    if key not in worst.simulated and not args.force:
        raise ConfigError(
            f"the model's replay of {worst.run} has no steady {key} steps (it rolled back or "
            f"ended early): {output} not written (--force writes it)"
        )
    if abs(error) > MAX_REPLAY_ERROR and not args.force:
        scale = 1.0 if key == "wall" else 1e3
        simulated = worst.simulated.get(key, 0.0) * scale
        raise ConfigError(
            f"the model's replay misses {worst.run} {key} by {100 * error:+.1f}% (measured "
            f"{worst.measured[key] * scale:.2f}, simulated {simulated:.2f}; limit "
            f"{100 * MAX_REPLAY_ERROR:g}%): {output} not written (--force writes it)"
        )
    write_output(output, cluster_yaml(model), "--output")
    print(f"cluster model written to {output}")
    return 0
