"""Switch-point search on the reference job: the trace table for the README.

Runs `syncswitch search` on the job of benchmarks/reference.py (MNIST-1D, 8 workers, batch 32,
lr 0.2 with cosine decay, momentum 0.9 scaled at the switch, 80 epochs, emulated 20 ms steps
with lognormal jitter 0.2), with 2 repeats per fraction, tolerance 0.5 points, resolution
1/64, one trial at a time (so wall times are comparable). Trials are stored in a registry
beside the results, so an interrupted run resumes where it stopped when started again.

    python benchmarks/search_trace.py          # the README table (about 25 min on a quiet machine)
    python benchmarks/search_trace.py --quick  # 2 workers, 2 epochs, 4 trials: a minute or two

The table is printed at the end and written to <out>/trace.md, with the plot
<out>/accuracy_vs_fraction.png and the rows in <out>/trace.csv.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from harness import add_out, add_quick, parser

from syncswitch.cli.main import main as syncswitch

FULL = {
    "job": [
        "--workers", "8",
        "--epochs", "80",
        "--step-time-ms", "20",
        "--jitter-sigma", "0.2",
        "--momentum-at-switch", "scale",
    ],
    "search": ["--repeats", "2", "--tolerance", "0.5", "--resolution", "1/64",
               "--max-trials", "20", "--parallel", "1"],
    "out": "benchmarks/results/search",
}  # fmt: skip
QUICK = {
    "job": [
        "--workers", "2",
        "--epochs", "2",
        "--mnist1d-samples", "1000",
        "--eval-every", "0.5",
        "--step-time-ms", "20",
        "--jitter-sigma", "0.2",
    ],
    "search": ["--repeats", "1", "--tolerance", "0.5", "--resolution", "1/8",
               "--max-trials", "4", "--parallel", "1"],
    "out": "benchmarks/results/search-quick",
}  # fmt: skip


def command(quick: bool, out: Path | str | None, registry: str | None) -> list[str]:
    setup = QUICK if quick else FULL
    out = str(out or setup["out"])
    return [
        "search",
        *setup["job"],
        *setup["search"],
        "--search-dir",
        out,
        "--registry",
        registry or f"{out}/registry.db",
    ]


def main() -> int:
    cli = parser(__doc__)
    add_quick(cli, "a small smoke version")
    add_out(cli, None, "search directory (default per mode)")
    cli.add_argument("--registry", default=None, help="registry (default: <out>/registry.db)")
    args = cli.parse_args()
    argv = command(args.quick, args.out, args.registry)
    print("$ syncswitch " + shlex.join(argv), flush=True)
    return syncswitch(argv)


if __name__ == "__main__":
    sys.exit(main())
