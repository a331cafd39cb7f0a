"""Samples/s of a transformers GPT-2 through the causal-LM adapter against a plain nn.Module
of the same shape, both through the project.

Real timing, nothing emulated. The two models have the same shape: 6 pre-norm blocks of
width 384 and 6 heads (causal attention, a 4x GELU MLP), learned positions, an untied output
layer over the 256 byte values (about 10.9M parameters each):

- hf: `transformers.GPT2LMHeadModel` from a `GPT2Config` (random weights), adapted by
  `syncswitch.workloads.causal_lm.causal_lm`: dict batches (input_ids, attention_mask,
  labels) of 65-byte windows, `.logits` outputs, next-token targets;
- plain: the project's `CharTransformer` at that shape, on the built-in pysource windows
  (64 input bytes, 64 targets): a plain module returning a tensor.

Both see the same bytes and predict the same 64 positions a sample.

1. The worker step (what a Ray worker and the simulator compute: `backward_on_batch`, the
   batch read through the job's data, forward, loss, backward; one torch thread, as a worker
   has): samples/s from the median of --steps timed steps after one warm-up.
2. A short run end to end on the simulator (train(), 2 workers, AdamW, one evaluation):
   trained samples over the host's real seconds (the simulator's clock is not used), server
   steps and evaluation included.

Each of --repeats repeats runs both, alternating which goes first; the ratio hf / plain is
taken within a repeat and its median over repeats reported.

    python benchmarks/hf_model.py                       # 5 repeats (~6 min here)
    python benchmarks/hf_model.py --repeats 1 --steps 2 --out /tmp/hf   # a quick look

Results: --out (default benchmarks/results/hf-model/): table.md and runs.jsonl.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from harness import (
    RunLog,
    Timing,
    add_out,
    add_repeats,
    cell,
    check_timing,
    markdown_table,
    medians,
    ratio,
    save_text,
)
from harness import parser as harness_parser

from syncswitch import TrainConfig
from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.records.metric import VALIDATION
from syncswitch.runtime.gradient import backward_on_batch
from syncswitch.workloads.causal_lm import causal_lm, collate_causal_lm
from syncswitch.workloads.char_transformer import CharTransformer
from syncswitch.workloads.data import TRAIN, TorchData
from syncswitch.workloads.language import CONTEXT, pysource_data
from syncswitch.workloads.pysource import read_corpus

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from hf_gpt2 import GPT2Factory, Split

KINDS = ("hf", "plain")
LAYERS, WIDTH, HEADS = 6, 384, 6


class PlainGPT:
    """The plain module's factory: CharTransformer at the GPT-2's shape."""

    name = "char-transformer-10m"

    def __call__(self) -> CharTransformer:
        return CharTransformer(context=CONTEXT, width=WIDTH, heads=HEADS, layers=LAYERS)


def job(kind: str, size_bytes: int) -> dict[str, Any]:
    """train()'s keywords for `kind`: the model factory and the three splits."""
    if kind == "hf":
        return {
            "model_factory": causal_lm(GPT2Factory(LAYERS, WIDTH, HEADS), bytes_per_token=1.0),
            "train_data": Split(size_bytes, TRAIN),
            "val_data": Split(size_bytes, VALIDATION),
        }
    data = pysource_data(read_corpus(size_bytes), 0.1)
    return {
        "model_factory": PlainGPT(),
        "train_data": data.dataset(TRAIN),
        "val_data": data.dataset(VALIDATION),
    }


def step_rate(kind: str, size_bytes: int, batch: int, steps: int) -> float:
    """Samples/s of the worker step (see the module docstring), one thread."""
    torch.set_num_threads(1)
    parts = job(kind, size_bytes)
    collate = collate_causal_lm if kind == "hf" else None
    data = TorchData(parts["train_data"], parts["val_data"], collate_fn=collate)
    model = parts["model_factory"]().train()
    flat = FlatParameters(model)
    rng = np.random.default_rng(0)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps + 1):
        indices = rng.choice(data.size(TRAIN), batch, replace=False)
        started = time.perf_counter()
        backward_on_batch(model, flat, data, indices, F.cross_entropy, generator)
        times.append(time.perf_counter() - started)
    return batch / statistics.median(times[1:])  # the first warms up


def run_rate(kind: str, size_bytes: int, batch: int, out: Path) -> dict[str, Any]:
    """A short simulated run's trained samples per real host second."""
    from syncswitch.runtime.train import train

    shutil.rmtree(out, ignore_errors=True)
    config = TrainConfig(
        runtime="sim", workers=2, epochs=1, batch_size=batch, optimizer="adamw", lr=1e-3,
        schedule="bsp", eval_every=1.0, progress=False, out=str(out),
    )  # fmt: skip
    summary = train(config, **job(kind, size_bytes), print_summary=False).summary
    host_s = summary.host_time_s or float("nan")
    return {
        "run_samples_per_s": summary.samples / host_s,
        "validation_loss": (summary.validation or {}).get("loss"),
        "samples": summary.samples,
    }


def table(repeats: list[dict[str, Any]], batch: int, steps: int) -> list[str]:
    middle = medians(repeats)
    rows = []
    for measure, what in (("step", f"worker step (median of {steps})"), ("run", "simulated run")):
        each = ", ".join(cell(r[f"{measure} ratio"], ".3f") for r in repeats)
        rows.append(
            [
                what,
                cell(middle[f"hf {measure}"], ",.1f"),
                cell(middle[f"plain {measure}"], ",.1f"),
                cell(middle[f"{measure} ratio"], ".3f"),
                each,
            ]
        )
    title = (
        f"### transformers GPT-2 against a plain module of its shape (real time, batch "
        f"{batch}, one thread, median of {len(repeats)} repeat(s))"
    )
    return [
        check_timing(title, Timing.REAL),
        "",
        *markdown_table(
            ["measure", "hf samples/s", "plain samples/s", "hf / plain", "per repeat"], rows
        ),
    ]


def main() -> None:
    parser = harness_parser(__doc__, epilog=True)
    add_out(parser, Path(__file__).parent / "results" / "hf-model")
    add_repeats(parser, 5, "repeats of both measures")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    parser.add_argument("--batch", type=int, default=8, help="samples a step (default 8)")
    parser.add_argument(
        "--pysource-bytes", type=int, default=8_000, help="corpus bytes (default 8,000)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = RunLog(args.out / "runs.jsonl")
    log.clear()
    counts = {kind: sum(p.numel() for p in job(kind, args.pysource_bytes)["model_factory"]()
                        .parameters()) for kind in KINDS}  # fmt: skip
    print(f"parameters: hf {counts['hf']:,}, plain {counts['plain']:,}", flush=True)

    repeats: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        figures: dict[str, Any] = {}
        for kind in KINDS if repeat % 2 == 0 else KINDS[::-1]:
            rate = step_rate(kind, args.pysource_bytes, args.batch, args.steps)
            run = run_rate(kind, args.pysource_bytes, args.batch, args.out / "runs" / kind)
            log.append({"repeat": repeat, "kind": kind, "step_samples_per_s": rate, **run})
            figures[f"{kind} step"], figures[f"{kind} run"] = rate, run["run_samples_per_s"]
            print(f"repeat {repeat} {kind}: step {rate:,.1f}, run "
                  f"{run['run_samples_per_s']:,.1f} samples/s", flush=True)  # fmt: skip
        for measure in ("step", "run"):
            figures[f"{measure} ratio"] = ratio(
                figures[f"hf {measure}"], figures[f"plain {measure}"]
            )
        repeats.append(figures)
        lines = table(repeats, args.batch, args.steps)
        lines.append(f"\nParameters: hf {counts['hf']:,}, plain {counts['plain']:,}.")
        save_text(args.out / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
