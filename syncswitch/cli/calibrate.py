"""`syncswitch calibrate RUN_DIR -o cluster.yaml`: fit the simulator's cluster model to a run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from syncswitch.errors import ConfigError

_EXAMPLES = """examples:
  syncswitch train --workers 8 --step-time-ms 20 --schedule bsp:0.25,asp --out runs/cal
  syncswitch calibrate runs/cal -o cluster.yaml
  syncswitch train --runtime sim --cluster cluster.yaml --workers 8 --schedule asp

What is fitted to what is written into the file's `notes` (docs/simulator.md).
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "calibrate",
        help="fit a cluster model for --runtime sim to a finished Ray run",
        description="Fit the simulator's cluster model (step times, latency, server cost) to\n"
        "the records of a finished Ray run, and write it as a cluster file.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a complete run directory of a Ray run")
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
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from syncswitch.calibration import calibrate, cluster_yaml
    from syncswitch.files import check_output, write_output

    output = Path(args.output)
    if output.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"--output {str(output)!r}: use a .yaml or .yml file name")
    check_output(output, "--output")  # before the fit, which takes a while
    print(f"syncswitch: fitting a cluster model to {args.run_dir} ...", file=sys.stderr)
    model, report = calibrate(args.run_dir, refine=not args.no_refine)
    write_output(output, cluster_yaml(model), "--output")
    measured = report["measured_s_per_step"]
    last = report["refine_rounds"][-1]["simulated_s_per_step"] if report["refine_rounds"] else {}
    for protocol, seconds in measured.items():
        simulated = last.get(protocol)
        shown = f", simulated {simulated * 1e3:.2f} ms" if simulated else ""
        print(f"  {protocol}: measured {seconds * 1e3:.2f} ms per step{shown}")
    compute, network, server = model.compute, model.network, model.server
    print(
        f"  fitted: step {compute.step_time_ms:.2f} ms, jitter sigma {compute.jitter_sigma:.3f}, "
        f"latency {network.latency_ms:.3f} ms, server {server.message_ms:.3f} ms per gradient"
    )
    print(f"cluster model written to {output}")
    return 0
