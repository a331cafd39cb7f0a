"""A Hugging Face-style causal language model through `train()`, without glue of the user's.

`causal_lm(model_factory)` wraps a factory of a model that takes `input_ids` (and
`attention_mask`) as keywords and returns its logits as `.logits` (a `transformers`
`ModelOutput`), a dict's `"logits"`, a tuple's first item or a tensor. `train()` recognises
the wrapper and fills in the rest of the job:

- **batches**: each sample is a dict of 1-D tensors, `input_ids` and optionally
  `attention_mask` (1: a real token, 0: padding) and `labels` (the token each position
  stands for, -100 where it is not counted; default: `input_ids`), as in `transformers`.
  The labels are shifted here: position t is trained to predict label t+1, and a label
  whose `attention_mask` is 0 becomes -100, so padding is never counted.
- **outputs**: the model is called with the batch's `input_ids` and `attention_mask` only
  (the labels stay out: its own loss would be a mean per batch, while the split's loss is
  summed over its counted tokens and divided once, exactly; workloads/meter.py), without
  a key-value cache (training never reuses it), and its logits are returned as
  `(batch, vocabulary, positions - 1)`: the layout `F.cross_entropy` takes.
- **task**: cross-entropy in nats per token over the counted tokens, perplexity, and bits
  per byte when `bytes_per_token` is given (1 for byte-level tokens); summary.json adds
  tokens per second.

Nothing here imports `transformers`: any module of that calling convention fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import default_collate

from syncswitch.errors import WorkloadError
from syncswitch.workloads.identity import model_name_of
from syncswitch.workloads.language import language_task
from syncswitch.workloads.scores import IGNORED_CLASS
from syncswitch.workloads.task import Task

INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
LABELS = "labels"


class CausalLMAdapter(torch.nn.Module):
    """The wrapped model: a batch dict in, next-token logits `(batch, vocabulary, length - 1)`
    out. Its parameters are the wrapped model's, under the prefix `model.`."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "use_cache"):
            # A transformers model would otherwise build and return every layer's keys and
            # values on each training forward, to be thrown away.
            config.use_cache = False

    def forward(self, inputs: Any) -> torch.Tensor:
        if isinstance(inputs, Mapping):
            kept = {k: inputs[k] for k in (INPUT_IDS, ATTENTION_MASK) if k in inputs}
            outputs = self.model(**kept)
        else:
            outputs = self.model(inputs)
        logits = logits_of(outputs)
        if logits.ndim != 3:
            raise WorkloadError(
                f"a causal language model's logits must be (batch, length, vocabulary); got "
                f"shape {tuple(logits.shape)}"
            )
        # The last position predicts past the window: no label to compare it with.
        return logits[:, :-1, :].transpose(1, 2)


def logits_of(outputs: Any) -> torch.Tensor:
    """The logits of a model's output: `.logits`, a dict's "logits", a tuple's first item,
    or the tensor itself."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping) and "logits" in outputs:
        found = outputs["logits"]
    elif hasattr(outputs, "logits"):
        found = outputs.logits
    elif isinstance(outputs, tuple | list) and outputs:
        found = outputs[0]
    else:
        found = None
    if not isinstance(found, torch.Tensor):
        raise WorkloadError(
            f"a causal language model must return logits (a tensor, .logits, a dict's "
            f"'logits' or a tuple's first item), not a {type(outputs).__name__}"
        )
    return found


def collate_causal_lm(samples: Any) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Dict samples (input_ids, attention_mask, labels) as (inputs, next-token targets):
    targets are the labels shifted by one, -100 wherever the mask is 0. A dataset whose
    `__getitems__` returns the batch already stacked (one dict of 2-D tensors) is taken as
    it is: no per-sample dicts to collate."""
    listed = isinstance(samples, list | tuple) and len(samples) > 0
    first = samples[0] if listed else samples
    if isinstance(samples, Mapping) and INPUT_IDS in samples:
        batch = dict(samples)
    elif listed and isinstance(first, Mapping) and INPUT_IDS in first:
        batch = default_collate(list(samples))
    else:
        kind = type(first).__name__
        raise WorkloadError(
            f"a causal language model's sample must be a dict with {INPUT_IDS!r} (and "
            f"optionally {ATTENTION_MASK!r}, {LABELS!r}); got a {kind}"
        )
    ids = batch[INPUT_IDS]
    mask = batch.get(ATTENTION_MASK)
    labels = batch.get(LABELS, ids)
    targets = labels[:, 1:].clone()
    if mask is not None:
        targets[mask[:, 1:] == 0] = IGNORED_CLASS
    inputs = {INPUT_IDS: ids} if mask is None else {INPUT_IDS: ids, ATTENTION_MASK: mask}
    return inputs, targets


@dataclass(frozen=True)
class CausalLM:
    """A picklable factory of the adapted model (`causal_lm` makes one); `train()` takes it
    as `model_factory=` and gives the job its collate function and language-model task."""

    model_factory: Callable[[], torch.nn.Module]
    bytes_per_token: float | None = None

    def __post_init__(self) -> None:
        if not callable(self.model_factory) or isinstance(self.model_factory, torch.nn.Module):
            raise WorkloadError(
                f"causal_lm() takes a callable that builds the model, not "
                f"{type(self.model_factory).__name__}"
            )
        per_token = self.bytes_per_token
        if per_token is not None and not per_token > 0:
            raise WorkloadError(f"bytes_per_token={per_token!r} must be a number above 0")

    def __call__(self) -> CausalLMAdapter:
        return CausalLMAdapter(self.model_factory())

    @property
    def name(self) -> str:
        """The wrapped factory's name (config.json, the report, the fingerprint)."""
        return model_name_of(self.model_factory)

    def task(self, primary_metric: str | None = None) -> Task:
        return language_task(primary_metric, self.bytes_per_token, job="a causal language model")


def causal_lm(
    model_factory: Callable[[], torch.nn.Module], *, bytes_per_token: float | None = None
) -> CausalLM:
    """`model_factory` (a picklable callable building a `transformers` causal LM or any
    model of its calling convention) adapted for `train()`; `bytes_per_token`: the bytes of
    text a token stands for on average (1 for byte-level tokens), for bits per byte."""
    return CausalLM(model_factory, bytes_per_token)
