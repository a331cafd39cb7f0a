"""The causal language-model adapter (workloads/causal_lm.py): logits objects, dict
batches, next-token targets with padding and -100 labels never counted, and a job of it
through train() on the simulator, with the language-model units (bits per byte, tokens/s)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from syncswitch.config import TrainConfig
from syncswitch.errors import WorkloadError
from syncswitch.rundir import Summary
from syncswitch.runtime.train import train
from syncswitch.workloads.causal_lm import (
    CausalLM,
    CausalLMAdapter,
    causal_lm,
    collate_causal_lm,
    logits_of,
)

VOCABULARY, LENGTH = 16, 9


class TinyLM(torch.nn.Module):
    """A model of transformers' calling convention (keywords in, an object with .logits
    out) that records what it was called with."""

    def __init__(self, style: str = "object") -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCABULARY, 8)
        self.head = torch.nn.Linear(8, VOCABULARY)
        self.style = style
        self.seen: dict[str, torch.Tensor] = {}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        self.seen = {"input_ids": input_ids}
        if attention_mask is not None:
            self.seen["attention_mask"] = attention_mask
        logits = self.head(self.embed(input_ids))
        if self.style == "dict":
            return {"logits": logits, "past_key_values": None}
        if self.style == "tuple":
            return (logits, None)
        return SimpleNamespace(logits=logits, loss=None)


def _sample(ids: list[int], mask: list[int] | None = None, labels: list[int] | None = None):
    sample = {"input_ids": torch.tensor(ids)}
    if mask is not None:
        sample["attention_mask"] = torch.tensor(mask)
    if labels is not None:
        sample["labels"] = torch.tensor(labels)
    return sample


@pytest.mark.parametrize("style", ["object", "dict", "tuple"])
def test_the_adapter_returns_next_token_logits_in_cross_entropys_layout(style: str) -> None:
    adapter = CausalLMAdapter(TinyLM(style))
    ids = torch.randint(0, VOCABULARY, (3, LENGTH))
    mask = torch.ones_like(ids)
    out = adapter({"input_ids": ids, "attention_mask": mask})
    full = adapter.model.head(adapter.model.embed(ids))
    # (batch, vocabulary, length - 1): the last position predicts past the window.
    assert out.shape == (3, VOCABULARY, LENGTH - 1)
    assert torch.equal(out, full[:, :-1, :].transpose(1, 2))
    # The labels never reach the model: its own loss would be a per-batch mean.
    assert set(adapter.model.seen) == {"input_ids", "attention_mask"}


def test_logits_are_found_or_refused_in_one_line() -> None:
    tensor = torch.zeros(1, 2, 3)
    assert logits_of(tensor) is tensor
    assert logits_of({"logits": tensor}) is tensor
    assert logits_of(SimpleNamespace(logits=tensor)) is tensor
    assert logits_of((tensor, None)) is tensor
    with pytest.raises(WorkloadError, match="must return logits"):
        logits_of("text")


def test_a_transformers_config_loses_its_key_value_cache() -> None:
    model = TinyLM()
    model.config = SimpleNamespace(use_cache=True)  # as a transformers model carries one
    CausalLMAdapter(model)
    assert model.config.use_cache is False


def test_targets_are_the_labels_shifted_with_padding_and_minus_100_not_counted() -> None:
    samples = [
        _sample([1, 2, 3, 4], [1, 1, 1, 0], [1, 2, 3, 4]),  # the last token is padding
        _sample([5, 6, 7, 8], [1, 1, 1, 1], [5, -100, 7, 8]),  # a label left out
        _sample([9, 10, 11, 12], [1, 1, 1, 1], [9, 10, 11, 12]),  # every token counts
    ]
    inputs, targets = collate_causal_lm(samples)
    assert set(inputs) == {"input_ids", "attention_mask"}
    assert targets.tolist() == [[2, 3, -100], [-100, 7, 8], [10, 11, 12]]
    # Without labels the ids are the labels; without a mask every token counts.
    inputs, targets = collate_causal_lm([_sample([1, 2, 3]), _sample([4, 5, 6])])
    assert set(inputs) == {"input_ids"} and targets.tolist() == [[2, 3], [5, 6]]
    # A dataset's __getitems__ may hand over the batch already stacked.
    stacked = {"input_ids": torch.tensor([[1, 2, 3]]), "attention_mask": torch.tensor([[1, 1, 0]])}
    assert collate_causal_lm(stacked)[1].tolist() == [[2, -100]]


def test_samples_that_are_not_dicts_of_input_ids_are_refused_in_one_line() -> None:
    with pytest.raises(WorkloadError, match=r"must be a dict with 'input_ids'.*got a tuple"):
        collate_causal_lm([(torch.zeros(3), torch.zeros(3))])
    with pytest.raises(WorkloadError, match="got a dict"):
        collate_causal_lm({"tokens": torch.zeros(1, 3)})


def test_the_loss_and_bits_per_byte_are_exact_over_the_counted_tokens() -> None:
    job = causal_lm(TinyLM, bytes_per_token=1.0)
    model = job()
    torch.manual_seed(0)
    batches = [
        [_sample([1, 2, 3, 4], [1, 1, 0, 0]), _sample([4, 3, 2, 1], [1, 1, 1, 1])],
        [_sample([7, 7, 7, 7], [1, 1, 1, 1], [7, -100, -100, 7])],
    ]
    meter = job.task().meter()
    all_outputs, all_targets = [], []
    with torch.no_grad():
        for samples in batches:
            inputs, targets = collate_causal_lm(samples)
            outputs = model(inputs)
            meter.update(outputs, targets)
            all_outputs.append(outputs.transpose(1, 2).reshape(-1, VOCABULARY))
            all_targets.append(targets.reshape(-1))
    measured = job.task().finish(meter.result())
    counted = torch.cat(all_targets) != -100
    assert int(counted.sum()) == 1 + 3 + 1  # padding and -100 labels are not tokens
    expected = F.cross_entropy(torch.cat(all_outputs)[counted], torch.cat(all_targets)[counted])
    assert measured["loss"] == pytest.approx(float(expected), rel=1e-6)
    assert measured["bits_per_byte"] == pytest.approx(measured["loss"] / math.log(2), rel=1e-12)
    assert measured["perplexity"] == pytest.approx(math.exp(measured["loss"]), rel=1e-12)
    # Tokens of 4 bytes each: 4 times fewer bits per byte.
    four = CausalLM(TinyLM, bytes_per_token=4.0).task().finish(meter.result())
    assert four["bits_per_byte"] == pytest.approx(measured["bits_per_byte"] / 4, rel=1e-12)


def test_without_bytes_per_token_there_is_no_bits_per_byte() -> None:
    task = causal_lm(TinyLM).task()
    assert set(task.names) == {"loss", "perplexity"} and task.per_token
    with pytest.raises(WorkloadError, match="allowed: loss, perplexity"):
        causal_lm(TinyLM).task("bits_per_byte")


@pytest.mark.parametrize(
    ("given", "said"),
    [(TinyLM(), "a callable that builds the model, not TinyLM"), ("x", "not str")],
)
def test_bad_factories_are_refused_in_one_line(given: object, said: str) -> None:
    with pytest.raises(WorkloadError, match=said):
        causal_lm(given)  # type: ignore[arg-type]


def test_bad_bytes_per_token_is_refused_in_one_line() -> None:
    with pytest.raises(WorkloadError, match=r"bytes_per_token=0 must be a number above 0"):
        causal_lm(TinyLM, bytes_per_token=0)


def test_the_wrapper_is_picklable_and_named_after_the_model() -> None:
    job = causal_lm(TinyLM, bytes_per_token=1.0)
    assert pickle.loads(pickle.dumps(job)) == job and job.name == "TinyLM"


class Counting(Dataset):
    """Sequences counting up modulo the vocabulary, the last two of every other one padded."""

    def __init__(self, size: int, seed: int) -> None:
        draw = torch.Generator().manual_seed(seed)
        start = torch.randint(0, VOCABULARY, (size, 1), generator=draw)
        self.ids = (start + torch.arange(LENGTH)) % VOCABULARY
        self.mask = torch.ones_like(self.ids)
        self.mask[::2, -2:] = 0

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.ids[index]
        return {"input_ids": ids, "attention_mask": self.mask[index], "labels": ids}


def test_a_causal_lm_job_trains_on_the_simulator_with_language_model_units(tmp_path: Path):
    config = TrainConfig(
        runtime="sim", workers=2, epochs=3, batch_size=16, optimizer="adamw", lr=0.05,
        schedule="bsp:0.5,asp", eval_every=0.5, progress=False, out=str(tmp_path / "run"),
    )  # fmt: skip
    result = train(
        config,
        model_factory=causal_lm(TinyLM, bytes_per_token=1.0),
        train_data=Counting(256, seed=1),
        val_data=Counting(64, seed=2),
    )
    summary = result.summary
    assert summary.complete and summary.metric.name == "loss"
    assert summary.validation is not None
    assert set(summary.validation) == {"loss", "perplexity", "bits_per_byte"}
    # Counting up is learnt: far below uniform over 16 tokens (ln 16 = 2.77 nats).
    assert summary.validation["loss"] < 1.5, summary.validation
    # Tokens/s = samples/s x positions per sample (LENGTH - 1), labelled simulated.
    assert summary.timing == "simulated" and summary.tokens_per_sample == LENGTH - 1
    assert summary.samples_per_s is not None and summary.tokens_per_s is not None
    assert summary.tokens_per_s == pytest.approx(summary.samples_per_s * (LENGTH - 1), rel=1e-9)
    # summary.json holds both and reads back; a summary from before them reads as None.
    plain = summary.to_plain()
    assert Summary.from_plain(plain) == summary
    older = {k: v for k, v in plain.items() if k not in ("tokens_per_sample", "tokens_per_s")}
    assert Summary.from_plain(older).tokens_per_s is None
    # The weights load back into the adapted model.
    assert isinstance(result.model(), CausalLMAdapter)
