"""The built-in language model on the simulator, end to end, and through the CLI."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from syncswitch.config import TrainConfig
from syncswitch.runtime.train import train
from syncswitch.workloads.pysource import read_corpus

TINY = dict(
    runtime="sim",
    dataset="pysource",
    pysource_bytes=40_000,  # about 480 training windows: 15 steps of 4 workers x 8
    workers=4,
    batch_size=8,
    epochs=0.5,
    lr=0.5,
    schedule="bsp:0.5,asp",
    eval_every=0.5,
    progress=False,
)


def test_a_tiny_language_model_run_reports_loss_and_perplexity(tmp_path: Path) -> None:
    result = train(TrainConfig(**TINY, out=str(tmp_path / "lm")))
    summary = result.summary
    assert summary.complete and summary.metric.name == "loss"
    assert not summary.metric.higher_is_better
    for block in (summary.validation, summary.test):
        assert block is not None and set(block) == {"loss", "perplexity", "bits_per_byte"}
        assert block["perplexity"] == pytest.approx(math.exp(block["loss"]), rel=1e-9)
        # Byte tokens: bits per byte is the loss in nats per token over ln 2.
        assert block["bits_per_byte"] == pytest.approx(block["loss"] / math.log(2), rel=1e-12)
    # Tokens/s: samples/s x the 64 positions of a window, simulated as samples/s is.
    assert summary.timing == "simulated" and summary.tokens_per_sample == 64
    assert summary.samples_per_s is not None and summary.tokens_per_s is not None
    assert summary.tokens_per_s == pytest.approx(summary.samples_per_s * 64, rel=1e-9)
    # It learnt something: uniform over 256 byte values is a loss of ln 256 = 5.55.
    assert summary.validation["loss"] < math.log(256) - 0.3
    config = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert config["dataset"] == "pysource" and config["model"] == "char-transformer"
    assert config["corpus_sha256"] == read_corpus(40_000).sha256
    with (tmp_path / "lm" / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {"val_loss", "val_perplexity"} <= set(rows[-1])
    last = rows[-1]
    assert float(last["val_perplexity"]) == pytest.approx(math.exp(float(last["val_loss"])))


def test_the_cli_trains_it_and_shows_perplexity(tmp_path: Path) -> None:
    flags = [
        "--runtime", "sim", "--dataset", "pysource", "--pysource-bytes", "20000",
        "--workers", "2", "--batch-size", "8", "--epochs", "0.25", "--schedule", "bsp",
        "--eval-every", "0.5", "--no-progress", "--out", str(tmp_path / "cli"),
    ]  # fmt: skip
    done = _cli("train", *flags)
    assert done.returncode == 0, done.stderr
    assert "validation perplexity" in done.stdout and "test perplexity" in done.stdout
    assert "validation loss (nats/token)" in done.stdout
    assert "validation bits_per_byte" in done.stdout
    tokens = [line for line in done.stdout.splitlines() if line.strip().startswith("tokens/s")]
    assert len(tokens) == 1 and "SIMULATED" in tokens[0] and "64 per sample" in tokens[0]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--dataset", "pysource", "--model", "cnn1d"], "model 'cnn1d' does not fit dataset"),
        (["--model", "char-transformer"], "char-transformer is built for pysource"),
        (["--dataset", "pysource", "--pysource-bytes", "5"], "pysource_bytes"),
    ],
)
def test_mismatched_models_and_sizes_are_refused_in_one_line(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    done = _cli("train", "--runtime", "sim", "--out", str(tmp_path / "x"), *flags)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and said in errors[0], done.stderr


def test_the_switch_point_search_refuses_it_in_one_line() -> None:
    # The search's tolerance is in accuracy points; this job is judged by its loss.
    done = _cli("search", "--runtime", "sim", "--dataset", "pysource")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "judged by its loss" in done.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "syncswitch.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)
