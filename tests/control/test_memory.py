"""The start-up memory estimate (control/memory.py) and the refusal of a model this machine
cannot hold (runtime/ray/launch.py), before a run directory or Ray exists."""

from __future__ import annotations

import json

import pytest

from syncswitch.config import TrainConfig
from syncswitch.control.memory import estimate_memory
from syncswitch.control.plan import RunPlan
from syncswitch.errors import ConfigError

P = 1_000_000  # parameters


def _estimate(shared_memory: bool = True, **options):
    config = TrainConfig(**{"workers": 4, "schedule": "bsp", "progress": False, **options})
    return estimate_memory(RunPlan.resolve(config, 8000), P, shared_memory=shared_memory)


def test_a_bsp_run_with_sgd_counts_what_each_process_holds():
    memory = _estimate()
    assert memory.server == {
        "weights": 4 * P,
        "optimizer state": 4 * P,  # the momentum buffer
        "round sum": 4 * P,
        "reply copies": 4 * P,
    }
    # The model computes in the memory it shares with the servers: nothing more.
    assert memory.worker == {"weights and gradient": 8 * P}
    assert memory.others == {"driver": 12 * P, "evaluator": 8 * P}
    assert memory.total_bytes == 16 * P + 4 * 8 * P + 20 * P
    assert memory.to_plain()["estimate"] is True
    assert "activations not counted" in memory.describe()


def test_what_changes_the_estimate():
    base = _estimate()
    assert _estimate(optimizer="adam").server["optimizer state"] == 8 * P
    # Over the socket each message lands in its own buffer, on both sides.
    socket = _estimate(shared_memory=False)
    assert socket.server["received messages"] == 4 * 4 * P
    assert socket.worker["received weights"] == 4 * P
    # A 16-bit wire: the rounded copy on the server, the regions beside the model.
    narrow = _estimate(wire_dtype="bfloat16")
    assert narrow.server["reply copies"] == 6 * P and narrow.worker["shared memory"] == 4 * P
    # Two servers halve each one's share; a local phase adds the workers' own round.
    assert _estimate(servers=2).server["weights"] == 2 * P
    assert _estimate(schedule="bsp:0.5,local-4").worker["local rounds"] == 16 * P
    assert _estimate(schedule="bsp:online,asp").worker.keys() == base.worker.keys() | {
        "local rounds"
    }
    dc = _estimate(schedule="asp", delay_compensation=0.1)
    assert dc.server["delay compensation"] == 4 * 4 * P  # one copy per worker


def test_a_model_the_machine_cannot_hold_is_refused_in_one_line(tmp_path, monkeypatch):
    from syncswitch.runtime.ray import launch
    from syncswitch.runtime.train import train

    # 1 KiB free: less than even the small default model needs.
    monkeypatch.setattr(launch, "available_memory_bytes", lambda: 1 << 10)
    out = tmp_path / "run"
    config = TrainConfig(workers=2, epochs=0.05, progress=False, out=str(out))
    with pytest.raises(ConfigError) as refused:
        train(config)
    message = str(refused.value)
    assert "\n" not in message and "GiB available" in message and "--workers" in message
    assert not out.exists()


def test_the_summary_keeps_the_estimate(tmp_path):
    from syncswitch.runtime.train import train

    config = TrainConfig(
        runtime="sim", workers=2, epochs=0.05, progress=False, out=str(tmp_path / "run")
    )
    result = train(config)
    memory = json.loads((result.run_dir / "summary.json").read_text())["memory"]
    parameters = result.final_weights.size
    assert memory["parameters"] == parameters
    assert memory["per_server_bytes"]["weights"] == 4 * parameters
    assert result.summary["memory"]["total_bytes"] == memory["total_bytes"] > 0
