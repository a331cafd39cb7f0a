"""A sequence model with integer inputs: token ids reach an embedding as integers, and the
target is a sequence (one class per position).

The task is a delayed copy: at each position the model must output the token it saw
`DELAY` positions earlier (position t < DELAY outputs token 0). A GRU over embeddings learns
it; token accuracy on the validation split drives every decision.

    .venv/bin/python examples/sequence.py                         # 2 workers on a local Ray
    .venv/bin/python examples/sequence.py --runtime sim --workers 4   # simulated, no Ray
"""

from __future__ import annotations

import argparse
import functools

import torch
from torch.utils.data import Dataset

from syncswitch import TrainConfig, train

VOCABULARY, LENGTH, DELAY = 12, 16, 2


class DelayedCopy(Dataset):
    """`size` sequences of int64 token ids and their targets, drawn from `seed`."""

    def __init__(self, size: int, seed: int) -> None:
        draw = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(1, VOCABULARY, (size, LENGTH), generator=draw)
        self.targets = torch.zeros_like(self.tokens)
        self.targets[:, DELAY:] = self.tokens[:, :-DELAY]

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[index], self.targets[index]


class Tagger(torch.nn.Module):
    """Embedding -> GRU -> a class per position, as outputs (batch, classes, length): the
    layout `F.cross_entropy` and the built-in accuracy take for sequence targets."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCABULARY, width)
        self.rnn = torch.nn.GRU(width, width, batch_first=True)
        self.head = torch.nn.Linear(width, VOCABULARY)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(tokens))
        return self.head(hidden).transpose(1, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("ray", "sim"), default="ray")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=float, default=6)
    parser.add_argument("--out", default=None, help="run directory (default: runs/<time>-...)")
    args = parser.parse_args()

    config = TrainConfig(
        runtime=args.runtime,
        workers=args.workers,
        epochs=args.epochs,
        batch_size=32,
        lr=0.5,
        schedule="bsp:0.5,asp",
        out=args.out,
    )
    result = train(
        config,
        model_factory=Tagger,
        train_data=functools.partial(DelayedCopy, 4096, seed=1),
        val_data=functools.partial(DelayedCopy, 512, seed=2),
        test_data=functools.partial(DelayedCopy, 512, seed=3),
        # Cross-entropy over (batch, classes, length) against (batch, length) and the
        # built-in token accuracy are the defaults: no loss_fn or metrics needed.
        dataset_name="delayed-copy",
    )
    summary = result.summary
    assert summary.validation is not None and summary.test is not None
    print(f"run directory: {result.run_dir}")
    print(f"validation token accuracy {100 * summary.validation['accuracy']:.2f}%")
    chance = 100 / VOCABULARY
    print(f"test token accuracy {100 * summary.test['accuracy']:.2f}% (chance {chance:.1f}%)")


if __name__ == "__main__":
    main()
