"""`char-transformer`: a small causal transformer over bytes, for the `pysource` corpus.

Byte embeddings plus learned positions, LAYERS pre-norm blocks (causal self-attention with
HEADS heads, then a 4x GELU MLP), a final LayerNorm and an untied output layer over the
256 byte values. About 137k parameters at the defaults: a worker's step on 32 windows of
64 bytes takes tens of milliseconds on one CPU core. No dropout: a step draws no random
numbers, and the model is small beside the text it sees in one epoch.

The output head is untied from the embedding: a tied weight is one parameter under two
names in the state_dict, and every runtime moves a model as one flat vector of its
parameters; untied costs 16k parameters and keeps that mapping one-to-one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from syncswitch.errors import WorkloadError
from syncswitch.workloads.language import CONTEXT, VOCABULARY

CHAR_TRANSFORMER = "char-transformer"
WIDTH = 64  # d_model
HEADS = 4
LAYERS = 2
_INIT_STD = 0.02  # GPT-2's


class CausalBlock(nn.Module):
    """x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)); position t attends to 0..t."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, width = x.shape
        qkv = self.qkv(self.norm1(x)).view(n, t, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (n, heads, t, head width)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(n, t, width))
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    """Byte ids (batch, length <= context) -> logits (batch, 256, length): the layout
    `F.cross_entropy` takes against targets (batch, length)."""

    def __init__(
        self,
        context: int = CONTEXT,
        width: int = WIDTH,
        heads: int = HEADS,
        layers: int = LAYERS,
        vocabulary: int = VOCABULARY,
    ) -> None:
        super().__init__()
        if width % heads:
            raise WorkloadError(f"width {width} must be a multiple of heads {heads}")
        self.context = context
        self.embed = nn.Embedding(vocabulary, width)
        self.positions = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.Sequential(*(CausalBlock(width, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary)
        self._init_weights()

    def _init_weights(self) -> None:
        # GPT-2's, drawn from torch's global generator in a fixed order (the same seed, the
        # same model): N(0, 0.02) weights, zero biases, and the projections into the residual
        # stream smaller with depth, so the stream's variance does not grow with the blocks.
        nn.init.normal_(self.embed.weight, std=_INIT_STD)
        nn.init.normal_(self.positions, std=_INIT_STD)
        residual = [w for block in self.blocks for w in _residual_weights(block)]
        for module in self.modules():
            if isinstance(module, nn.Linear):
                scaled = any(module.weight is p for p in residual)
                std = _INIT_STD / math.sqrt(2 * len(self.blocks)) if scaled else _INIT_STD
                nn.init.normal_(module.weight, std=std)
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        if length > self.context:
            raise WorkloadError(f"{length} tokens exceed the model's context of {self.context}")
        hidden = self.blocks(self.embed(tokens) + self.positions[:length])
        return self.head(self.norm(hidden)).transpose(1, 2)


def _residual_weights(block: nn.Module) -> tuple[torch.Tensor, ...]:
    assert isinstance(block, CausalBlock)
    out = block.mlp[2]
    assert isinstance(out, nn.Linear)
    return block.proj.weight, out.weight


@dataclass(frozen=True)
class CharTransformerFactory:
    """The built-in model factory for `pysource` (picklable; `name` is what runs record)."""

    name: str = CHAR_TRANSFORMER

    def __call__(self) -> CharTransformer:
        return CharTransformer()
