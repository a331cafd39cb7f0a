"""The built-in language model: the pysource corpus, its windows and splits, the
char-transformer, and perplexity as exp of a split's mean loss."""

from __future__ import annotations

import hashlib
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch.errors import WorkloadError
from syncswitch.records.metric import TEST, VALIDATION
from syncswitch.runtime.evaluator import Evaluator
from syncswitch.workloads.char_transformer import CharTransformer, CharTransformerFactory
from syncswitch.workloads.data import TRAIN
from syncswitch.workloads.language import (
    CONTEXT,
    language_task,
    pysource_data,
    split_corpus,
    windows,
)
from syncswitch.workloads.pysource import FILES, read_corpus, stdlib_dir

SMALL = 60_000  # bytes: a corpus of a few files, read in milliseconds


def test_the_corpus_is_the_listed_files_in_order_and_its_checksum_is_their_bytes():
    corpus = read_corpus(SMALL)
    names = [name for name, _ in corpus.parts]
    assert names == list(FILES[: len(names)]) and list(FILES) == sorted(FILES)
    text = b"".join(part for _, part in corpus.parts)
    assert len(text) == corpus.size_bytes == SMALL
    assert text.startswith((stdlib_dir() / FILES[0]).read_bytes()[:1000])
    assert corpus.sha256 == hashlib.sha256(text).hexdigest()


def test_the_checksum_is_stable_across_reads_and_changes_with_the_text(tmp_path: Path):
    assert read_corpus(SMALL).sha256 == read_corpus(SMALL).sha256
    assert read_corpus(SMALL).sha256 != read_corpus(SMALL + 1).sha256
    # Another interpreter's library (here: a copy with one file changed) is another text.
    same, edited = _copy_library(tmp_path / "same"), _copy_library(tmp_path / "edited")
    first = edited / FILES[0]
    first.write_bytes(b"X" + first.read_bytes()[1:])
    assert read_corpus(SMALL, same).sha256 == read_corpus(SMALL).sha256
    assert read_corpus(SMALL, edited).sha256 != read_corpus(SMALL).sha256


def _copy_library(root: Path) -> Path:
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stdlib_dir() / name, root / name)
    return root


def test_a_missing_file_is_refused_naming_it(tmp_path: Path):
    (tmp_path / "argparse.py").write_text("pass\n")
    with pytest.raises(WorkloadError, match=r"needs ast\.py .* absent") as refused:
        read_corpus(SMALL, tmp_path)
    assert "\n" not in str(refused.value)


def test_targets_are_the_inputs_shifted_by_one_byte_and_windows_share_no_byte():
    text = bytes(range(200))
    x, y = windows(text)
    assert x.dtype == y.dtype == np.int64 and x.shape == y.shape == (3, CONTEXT)
    assert (x[:, 1:] == y[:, :-1]).all()
    assert x[0, 0] == 0 and y[0, -1] == CONTEXT and x[1, 0] == CONTEXT + 1


def test_the_test_split_is_the_end_of_each_file_apart_from_its_training_windows():
    corpus = read_corpus(SMALL)
    splits = split_corpus(corpus)
    train, test = [], []
    for _, text in corpus.parts:
        x, _ = windows(text)
        held = math.ceil(len(x) * 0.1)
        train.append(x[:-held])
        test.append(x[-held:])
    # Position by position: a file's last windows are test, the others train; no window
    # is in both (windows share no byte), whatever their text (source repeats itself).
    assert np.array_equal(splits[TEST][0], np.concatenate(test))
    assert np.array_equal(splits[TRAIN][0], np.concatenate(train))
    assert 0.05 < len(splits[TEST][0]) / (len(splits[TEST][0]) + len(splits[TRAIN][0])) < 0.2


def test_the_validation_split_is_carved_from_training_windows_only():
    corpus = read_corpus(SMALL)
    data = pysource_data(corpus, 0.1)
    rows = {split: [x for x, _ in data.dataset(split)] for split in (TRAIN, VALIDATION, TEST)}
    carved = sorted(tuple(x.tolist()) for x in rows[TRAIN] + rows[VALIDATION])
    assert carved == sorted(tuple(x.tolist()) for x in split_corpus(corpus)[TRAIN][0])
    assert abs(data.size(VALIDATION) / len(carved) - 0.1) < 0.01
    assert data.size(TEST) == len(split_corpus(corpus)[TEST][0])
    x, y = data.train_batch(np.arange(4), None)
    assert x.dtype == torch.int64 and x.shape == y.shape == (4, CONTEXT)


def test_a_factory_refuses_text_that_is_not_the_runs():
    data = pysource_data(read_corpus(SMALL), 0.1)
    factory = data._sources[TRAIN]
    other = type(factory)(factory.size_bytes, factory.val_fraction, TRAIN, "0" * 64)
    with pytest.raises(WorkloadError, match="not the run's"):
        other()


def test_the_model_maps_byte_ids_to_logits_per_position():
    torch.manual_seed(0)
    model = CharTransformer()
    tokens = torch.randint(0, 256, (3, CONTEXT))
    assert model(tokens).shape == (3, 256, CONTEXT)
    assert model(tokens[:, :10]).shape == (3, 256, 10)
    assert CharTransformerFactory().name == "char-transformer"
    assert 100_000 < sum(p.numel() for p in model.parameters()) < 200_000


def test_the_model_is_causal():
    torch.manual_seed(0)
    model = CharTransformer().eval()
    tokens = torch.randint(0, 256, (2, CONTEXT))
    changed = tokens.clone()
    changed[:, 40] = (changed[:, 40] + 1) % 256
    before, after = model(tokens), model(changed)
    assert torch.equal(before[:, :, :40], after[:, :, :40])
    assert not torch.allclose(before[:, :, 40:], after[:, :, 40:])


def test_the_same_seed_builds_the_same_model():
    torch.manual_seed(3)
    first = CharTransformer()
    torch.manual_seed(3)
    second = CharTransformer()
    torch.manual_seed(4)
    third = CharTransformer()
    pairs = list(zip(first.parameters(), second.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in pairs)
    assert not torch.equal(first.embed.weight, third.embed.weight)


def test_perplexity_is_exp_of_the_splits_mean_loss_not_a_mean_of_exps():
    data = pysource_data(read_corpus(SMALL), 0.5)
    task = language_task()
    assert task.names == ("loss", "perplexity", "bits_per_byte") and not task.higher_is_better
    torch.manual_seed(0)
    evaluator = Evaluator(data, CharTransformerFactory(), task)
    weights = torch.cat([p.detach().flatten() for p in evaluator.model.parameters()]).numpy()
    # The validation split is more than one evaluation batch: the loss is a mean of batches.
    assert data.size(VALIDATION) > 256
    measured = evaluator.evaluate(weights, VALIDATION)
    losses, sizes = [], []
    with torch.no_grad():
        for x, y in data.eval_batches(VALIDATION):
            losses.append(float(F.cross_entropy(evaluator.model(x), y)))
            sizes.append(len(y))
    mean = float(np.average(losses, weights=sizes))
    assert measured["loss"] == pytest.approx(mean, rel=1e-6)
    assert measured["perplexity"] == pytest.approx(math.exp(mean), rel=1e-6)
    # Byte tokens: bits per byte is the loss in nats per token over ln 2, exactly.
    assert measured["bits_per_byte"] == measured["loss"] / math.log(2)
    mean_of_exps = float(np.average(np.exp(losses), weights=sizes))
    assert mean_of_exps > measured["perplexity"]  # Jensen: what averaging per batch gives
    # An untrained model is close to uniform over the 256 byte values.
    assert measured["perplexity"] == pytest.approx(256, rel=0.1)


def test_perplexity_of_a_diverged_loss_is_infinite_not_an_error():
    task = language_task("perplexity")
    assert task.primary == "perplexity"
    assert task.finish({"loss": 1e6})["perplexity"] == math.inf
    assert math.isnan(task.finish({"loss": math.nan})["perplexity"])
    with pytest.raises(WorkloadError, match="allowed: loss, perplexity, bits_per_byte"):
        language_task("accuracy")
    assert language_task("bits_per_byte").primary == "bits_per_byte"
