"""A Hugging Face `transformers` GPT-2 trained on Python source bytes, on the simulator and
on Ray, with AdamW.

The model is built from a `GPT2Config` with random weights: nothing is downloaded (no
weights, no tokenizer). The tokens are the text's bytes (a vocabulary of 256), so the loss
in nats per token divided by ln 2 is bits per byte exactly. `causal_lm()` adapts the model
to `train()`: batches of dicts (input_ids, attention_mask, labels), `.logits` outputs,
next-token targets with padding never counted. Needs the `hf` extra
(`.venv/bin/pip install -c constraints.txt -e '.[hf]'`).

    .venv/bin/python examples/hf_gpt2.py                      # 10.9M parameters, sim then Ray
    .venv/bin/python examples/hf_gpt2.py --small --runtime sim   # a tiny model, seconds
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path

# Never reach the Hub: the model is built from a config, the tokens are bytes.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

from syncswitch import TrainConfig, train
from syncswitch.records.metric import TEST, VALIDATION
from syncswitch.workloads.causal_lm import causal_lm
from syncswitch.workloads.data import TRAIN
from syncswitch.workloads.language import CONTEXT, PysourceSplit
from syncswitch.workloads.pysource import read_corpus


@dataclass(frozen=True)
class GPT2Factory:
    """A picklable factory of a randomly initialised GPT-2 over byte tokens."""

    layers: int = 6
    width: int = 384
    heads: int = 6
    name: str = "hf-gpt2"

    def __call__(self) -> GPT2LMHeadModel:
        config = GPT2Config(
            vocab_size=256,
            n_positions=CONTEXT + 1,
            n_embd=self.width,
            n_layer=self.layers,
            n_head=self.heads,
            # torch's fused GELU, as the built-in char-transformer uses: GPT-2's default
            # tanh approximation ("gelu_new") is six elementwise passes in Python, and made
            # a worker's step 16% slower (benchmarks/results/hf-model/notes.md).
            activation_function="gelu",
            # No dropout, as the built-in char-transformer; untied output layer: the
            # project moves a model as one flat vector of its parameters.
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            tie_word_embeddings=False,
            use_cache=False,
            bos_token_id=None,  # GPT-2's 50256 is outside a byte vocabulary
            eos_token_id=None,
        )
        return GPT2LMHeadModel(config)


class ByteWindows(Dataset):
    """One split of the built-in pysource corpus as transformers-style samples: windows of
    CONTEXT + 1 bytes as input_ids, an attention mask of ones, labels equal to the ids."""

    def __init__(self, size_bytes: int, split: str, val_fraction: float = 0.1) -> None:
        corpus = read_corpus(size_bytes)
        windows = PysourceSplit(size_bytes, val_fraction, split, corpus.sha256)()
        x, y = windows.tensors
        self.ids = torch.cat([x, y[:, -1:]], dim=1)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.ids[index]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        # The batch stacked at once (the adapter takes a dict of 2-D tensors as it is).
        ids = self.ids[torch.tensor(indices)]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


@dataclass(frozen=True)
class Split:
    """A picklable factory of one split: each Ray process builds its own."""

    size_bytes: int
    split: str

    def __call__(self) -> ByteWindows:
        return ByteWindows(self.size_bytes, self.split)


def run(args: argparse.Namespace, runtime: str, model: GPT2Factory) -> None:
    config = TrainConfig(
        runtime=runtime,
        workers=args.workers,
        epochs=args.epochs,
        batch_size=args.batch_size,
        optimizer="adamw",
        lr=args.lr,
        weight_decay=0.01,
        schedule="bsp:0.5,asp",
        eval_every=args.eval_every,
        progress=args.progress,
        out=str(Path(args.out) / runtime) if args.out else None,
    )
    result = train(
        config,
        model_factory=causal_lm(model, bytes_per_token=1.0),  # byte tokens
        train_data=Split(args.pysource_bytes, TRAIN),
        val_data=Split(args.pysource_bytes, VALIDATION),
        test_data=Split(args.pysource_bytes, TEST),
        dataset_name="pysource-bytes",
    )
    summary = result.summary
    assert summary.validation is not None and summary.tokens_per_s is not None
    label = "SIMULATED" if summary.timing == "simulated" else summary.timing
    validation = summary.validation
    print(f"[{runtime}] run directory: {result.run_dir}")
    print(
        f"[{runtime}] validation loss {validation['loss']:.4f} nats/token, "
        f"{validation['bits_per_byte']:.4f} bits/byte, perplexity {validation['perplexity']:.2f}"
    )
    print(
        f"[{runtime}] tokens/s {summary.tokens_per_s:,.0f} {label} "
        f"({summary.samples_per_s or 0:,.1f} samples/s x {summary.tokens_per_sample} tokens)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("both", "sim", "ray"), default="both")
    parser.add_argument("--small", action="store_true", help="a tiny model (CI)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=float, default=0.5)
    parser.add_argument("--pysource-bytes", type=int, default=20_000)
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.add_argument("--out", default=None, help="a directory for the runs (sim/, ray/)")
    args = parser.parse_args()

    model = GPT2Factory(layers=2, width=64, heads=4) if args.small else GPT2Factory()
    parameters = sum(p.numel() for p in model().parameters())
    print(f"GPT-2 (transformers, random init): {parameters:,} parameters")
    print(f"untrained: ln 256 = {math.log(256):.3f} nats/token = 8 bits/byte")
    for runtime in ("sim", "ray") if args.runtime == "both" else (args.runtime,):
        run(args, runtime, model)


if __name__ == "__main__":
    main()
