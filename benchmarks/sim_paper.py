"""The paper's setting on the simulator: BSP vs ASP time with the paper-k80 cluster preset.

The simulator's times depend on the model only through its parameter count (message sizes,
server apply cost) and on the cluster model's step times, so this runs a stand-in model with
ResNet-32's exact parameter count (0.46M) on MNIST-1D data, 8 workers, batch 128, and reports
the SIMULATED seconds per sample of BSP and ASP and their ratio beside the paper's measured
10,647 s / 1,607 s (6.6x). Accuracy of the stand-in means nothing and is not reported.

    python benchmarks/sim_paper.py
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from harness import Timing, add_out, check_timing, markdown_table, parser, save_json, save_text
from torch import nn

from syncswitch.config import TrainConfig
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset
from syncswitch.workloads.models import resnet32

PAPER = {"bsp": 10_647.0, "asp": 1_607.0}  # seconds, ResNet-32 / CIFAR-10 / 8 x K80


@dataclass(frozen=True)
class SameSizeAsResNet32:
    """A two-layer network on MNIST-1D's 40 inputs with ResNet-32's parameter count."""

    parameters: int

    def __call__(self) -> nn.Module:
        hidden = (self.parameters - 10) // 51  # 40h + h + 10h + 10
        model = nn.Sequential(nn.Flatten(), nn.Linear(40, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        return model


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--cluster", default="paper-k80")
    cli.add_argument("--epochs", type=float, default=8.0)
    add_out(cli, "benchmarks/results/sim-paper")
    args = cli.parse_args()

    parameters = sum(p.numel() for p in resnet32().parameters())
    factory = SameSizeAsResNet32(parameters)
    stand_in = sum(p.numel() for p in factory().parameters())
    dataset = load_dataset("mnist1d", mnist1d_samples=20000)
    scratch = Path(tempfile.mkdtemp(prefix="sim-paper-"))
    per_sample = {}
    try:
        for schedule in ("bsp", "asp"):
            config = TrainConfig(
                runtime="sim",
                cluster=args.cluster,
                workers=8,
                batch_size=128,
                schedule=schedule,
                epochs=args.epochs,
                lr=0.1,
                eval_every=1.0,
                checkpoint_every=0.0,
                divergence_guard=False,
                progress=False,
                out=str(scratch / schedule),
            )
            torch.manual_seed(0)
            summary = train(
                config, model_factory=factory, dataset=dataset, print_summary=False
            ).summary
            per_sample[schedule] = summary.wall_time_s / summary.samples
            cluster = summary.cluster
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ratio = per_sample["bsp"] / per_sample["asp"]
    paper_ratio = PAPER["bsp"] / PAPER["asp"]
    title = (
        f"8 workers, batch 128, cluster `{args.cluster}` (SIMULATED); a stand-in model with "
        f"{stand_in:,} parameters (ResNet-32: {parameters:,})."
    )
    rows = [
        (
            "simulator (SIMULATED ms per 1,000 samples)",
            f"{1e6 * per_sample['bsp']:.1f}",
            f"{1e6 * per_sample['asp']:.1f}",
            f"{ratio:.2f}x",
        ),
        (
            "paper (measured, whole run)",
            f"{PAPER['bsp']:,.0f} s",
            f"{PAPER['asp']:,.0f} s",
            f"{paper_ratio:.2f}x",
        ),
    ]
    lines = [check_timing(title, Timing.SIMULATED), ""]
    lines += markdown_table(("", "BSP", "ASP", "BSP / ASP time"), rows)
    table = "\n".join(lines)
    save_text(args.out / "table.md", table + "\n")
    record = {
        "simulated": True,
        "seconds_per_sample": per_sample,
        "ratio": ratio,
        "paper": PAPER,
        "cluster": cluster,
    }
    save_json(args.out / "result.json", record)
    print(table)


if __name__ == "__main__":
    main()
