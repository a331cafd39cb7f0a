"""The built-in language model on a real local Ray: each worker reads the corpus from its own
interpreter (checked against the run's checksum) and the run reports loss and perplexity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from syncswitch import TrainConfig, train
from syncswitch.calibration.runs import load_runs
from syncswitch.errors import ConfigError
from syncswitch.workloads.pysource import read_corpus

pytestmark = pytest.mark.ray


def test_the_language_model_trains_on_ray(ray_session, tmp_path: Path) -> None:
    config = TrainConfig(
        runtime="ray",
        dataset="pysource",
        pysource_bytes=30_000,
        workers=2,
        batch_size=8,
        epochs=0.5,
        lr=0.5,
        schedule="bsp:0.5,asp",
        eval_every=0.5,
        progress=False,
        out=str(tmp_path / "ray"),
    )
    summary = train(config).summary
    assert summary.complete and summary.runtime == "ray" and summary.gradients.unaccounted == 0
    assert summary.validation is not None and summary.test is not None
    assert summary.validation["loss"] < math.log(256) - 0.3
    assert summary.test["perplexity"] == pytest.approx(math.exp(summary.test["loss"]))
    recorded = json.loads((tmp_path / "ray" / "config.json").read_text())["corpus_sha256"]
    assert recorded == read_corpus(30_000).sha256
    # Calibration holds its runs' data as arrays: it says so rather than failing inside.
    with pytest.raises(ConfigError, match="trained dataset 'pysource'; calibrate reads runs of"):
        load_runs([tmp_path / "ray"])
