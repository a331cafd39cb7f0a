"""Every example under examples/ runs, with short settings on the simulator (no Ray); the
cluster one, which needs a cluster, is parsed. Marked `examples` (`-m "not examples"` skips)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from syncswitch.cli.main import build_parser, main
from syncswitch.cli.train import config_from_args

pytestmark = pytest.mark.examples

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SHORT = ["--runtime", "sim", "--epochs", "1", "--mnist1d-samples", "1000", "--no-progress"]


def run_script(name: str, *args: str) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_custom_model_and_dataset(tmp_path: Path) -> None:
    out = run_script(
        "custom_model.py", "--runtime", "sim", "--epochs", "1", "--out", str(tmp_path / "run")
    )
    assert "recorded as dataset 'two-spirals', model 'SpiralNet'" in out
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["dataset"], saved["model"]) == ("two-spirals", "SpiralNet")


def test_classification_from_a_dataset_read_by_each_worker(tmp_path: Path) -> None:
    out = run_script(
        "classification.py", "--runtime", "sim", "--epochs", "1", "--samples", "1000",
        "--data", str(tmp_path / "npy"), "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert "validation accuracy" in out and "test accuracy" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["metric"]["split"] == "validation" and "accuracy" in summary["test"]


def test_regression_reaches_far_below_the_target_variance(tmp_path: Path) -> None:
    out = run_script("regression.py", "--runtime", "sim", "--workers", "4",
                     "--out", str(tmp_path / "run"))  # fmt: skip
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["metric"] == {"name": "mse", "higher_is_better": False, "split": "validation"}
    assert summary["switches"][0]["to"] == "asp"  # the schedule ran as for classification
    variance = float(out.split("target variance ")[1].split()[0])
    assert summary["validation"]["mse"] < variance / 10 and summary["test"]["mse"] < variance / 10


def test_a_sequence_model_takes_integer_tokens(tmp_path: Path) -> None:
    out = run_script("sequence.py", "--runtime", "sim", "--workers", "4", "--epochs", "3",
                     "--out", str(tmp_path / "run"))  # fmt: skip
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["test"]["accuracy"] > 0.5, out  # chance is 1/12


HF_SMALL = ["--small", "--pysource-bytes", "15000", "--no-progress"]


def _hf_lines(out: str, runtime: str, label: str) -> None:
    """The Hugging Face example's figures for one runtime: loss, bits per byte, tokens/s."""
    said = [line for line in out.splitlines() if line.startswith(f"[{runtime}]")]
    loss = next(line for line in said if "validation loss" in line)
    nats = float(loss.split("validation loss ")[1].split()[0])
    bits = float(loss.split("nats/token, ")[1].split()[0])
    assert nats < 5.545 and bits == pytest.approx(nats / 0.6931471805599453, abs=2e-4), out
    rates = [line.split("tokens/s ")[1].split() for line in said if "tokens/s" in line]
    assert len(rates) == 1 and rates[0][1] == label, out


def test_a_transformers_gpt2_trains_through_the_adapter(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    out = run_script("hf_gpt2.py", "--runtime", "sim", *HF_SMALL, "--out", str(tmp_path))
    _hf_lines(out, "sim", "SIMULATED")
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["tokens_per_sample"] == 64 and summary["tokens_per_s"] > 0
    config = json.loads((tmp_path / "sim" / "config.json").read_text())
    assert config["model"] == "hf-gpt2" and config["dataset"] == "pysource-bytes"


@pytest.mark.slow
def test_the_transformers_gpt2_trains_on_ray(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    out = run_script("hf_gpt2.py", "--runtime", "ray", *HF_SMALL, "--out", str(tmp_path))
    _hf_lines(out, "ray", "real")


def test_scale_study(tmp_path: Path) -> None:
    out = run_script("scale_study.py", "--workers", "8", "--epochs", "1", "--samples", "1000",
                     "--out", str(tmp_path))  # fmt: skip
    assert "SIMULATED timing" in out and "as planned" in out
    assert len(list(tmp_path.glob("w8-*/summary.json"))) == 4


@pytest.mark.parametrize("name", ["job.yaml", "stragglers.yaml"])
def test_yaml_jobs(name: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["train", "--config", str(EXAMPLES / name), *SHORT, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete"


def test_stragglers_example_emulates_its_episode(tmp_path: Path) -> None:
    args = build_parser().parse_args(["train", "--config", str(EXAMPLES / "stragglers.yaml")])
    config = config_from_args(args)
    assert config.online_policy == "elastic" and config.stragglers


def test_cluster_example_parses() -> None:
    argv = ["train", "--config", str(EXAMPLES / "cluster.yaml"), "--ray-address", "10.0.0.5:6379"]
    config = config_from_args(build_parser().parse_args(argv))
    assert config.placement == "spread" and config.dataset == "cifar10"
    assert config.ray_address == "10.0.0.5:6379"  # from the flag: a file never names a cluster
