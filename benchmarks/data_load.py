"""Loading MNIST-1D: generated every time against read from the per-user cache.

Each measurement is a fresh Python process, as a run is: it imports the package (timed apart,
the same in every case) and then times `load_dataset("mnist1d", ...)` alone, in one of three
cases: the cache off (`SYNCSWITCH_CACHE_DIR=off`: generated, as every run did before the
cache), a cold cache (generated, then written), a warm cache (read back and checked). Medians
over --repeats; the cache is a temporary directory of this script's, never the user's.

    .venv/bin/python benchmarks/data_load.py
    .venv/bin/python benchmarks/data_load.py --samples 1000,10000 --repeats 5
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import Timing, add_repeats, check_timing, comma_list, markdown_table, parser

ROOT = Path(__file__).resolve().parents[1]
# What one measurement runs: the import, then the load, each timed.
_MEASURE = """
import json, sys, time
started = time.perf_counter()
from syncswitch.workloads import load_dataset
imported = time.perf_counter()
dataset = load_dataset("mnist1d", mnist1d_samples=int(sys.argv[1]))
loaded = time.perf_counter()
assert len(dataset.x_train) + len(dataset.x_test) == int(sys.argv[1])
print(json.dumps({"import_s": imported - started, "load_s": loaded - imported}))
"""
CASES = ("cache off (generated)", "cold cache (generated, written)", "warm cache (read)")


def measure(samples: int, cache: str) -> dict[str, float]:
    env = {**os.environ, "SYNCSWITCH_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(samples)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def one_round(samples: int, scratch: Path) -> dict[str, dict[str, float]]:
    cache = scratch / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    return {
        CASES[0]: measure(samples, "off"),
        CASES[1]: measure(samples, str(cache)),
        CASES[2]: measure(samples, str(cache)),
    }


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--samples", type=lambda t: comma_list(t, int), default=[10000])
    add_repeats(cli, 5, "rounds of the three cases")
    args = cli.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="data-load-") as scratch:
        for samples in args.samples:
            rounds = [one_round(samples, Path(scratch)) for _ in range(args.repeats)]
            off = statistics.median(r[CASES[0]]["load_s"] for r in rounds)
            for case in CASES:
                load_s = statistics.median(r[case]["load_s"] for r in rounds)
                import_s = statistics.median(r[case]["import_s"] for r in rounds)
                rows.append(
                    (
                        f"{samples:,}",
                        case,
                        f"{import_s:.2f}",
                        f"{load_s:.3f}",
                        f"{off / load_s:.0f}x",
                    )
                )
    title = check_timing(
        f"Loading MNIST-1D, real time (s), median of {args.repeats} fresh processes each",
        Timing.REAL,
    )
    print(title + "\n")
    columns = ("samples", "case", "import (s)", "load (s)", "speed-up")
    print("\n".join(markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
