"""Small jobs of a user's own, shared by the any-job tests: map-style Datasets of regression
and sequence data, and the models for them."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from syncswitch.workloads import ArrayDataset


class LinearTargets(Dataset):
    """8 float inputs -> a 2-dim float target, a fixed linear map plus noise."""

    def __init__(self, size: int, seed: int) -> None:
        weights = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
        draw = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, 8, generator=draw)
        self.y = self.x @ weights + 0.1 * torch.randn(size, 2, generator=draw)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def regressor() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


class Tokens(Dataset):
    """int64 token sequences whose target is the sequence itself, shifted by one."""

    def __init__(self, size: int, seed: int, vocabulary: int = 6, length: int = 8) -> None:
        draw = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(1, vocabulary, (size, length), generator=draw)
        self.targets = torch.zeros_like(self.tokens)
        self.targets[:, 1:] = self.tokens[:, :-1]

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[index], self.targets[index]


class Tagger(torch.nn.Module):
    def __init__(self, vocabulary: int = 6) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, 16)
        self.rnn = torch.nn.GRU(16, 16, batch_first=True)
        self.head = torch.nn.Linear(16, vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dtype != torch.int64:
            raise TypeError(f"token ids arrived as {tokens.dtype}")
        return self.head(self.rnn(self.embed(tokens))[0]).transpose(1, 2)


class ArraySplit(Dataset):
    """One split of an ArrayDataset as a map-style Dataset, one sample per __getitem__:
    the same samples as the fast path, through the general one."""

    def __init__(self, data: ArrayDataset, split: str) -> None:
        _, self.x, self.y = next(s for s in data.splits() if s[0] == split)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.array(self.x[index], dtype=np.float32))
        return x, torch.tensor(self.y[index], dtype=torch.int64)
