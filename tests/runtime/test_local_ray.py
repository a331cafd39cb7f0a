"""Local-H phases through the data plane: the wire carries a round and a delta, and
`syncswitch train --schedule bsp:0.25,local-16` runs on Ray with two shards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from syncswitch.core.sync.local import LocalRound
from syncswitch.rundir import names, read_summary
from syncswitch.runtime.dataplane.wire import (
    REPLY,
    REQUEST,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    with_link_until,
)


def test_a_reply_carries_the_workers_local_round_and_a_request_its_delta_steps() -> None:
    local = LocalRound(steps=16, lr=0.2, momentum=0.9, weight_decay=1e-4, epoch=7,
                       keep_inner_state=True)  # fmt: skip
    assert decode_reply(encode_reply(3, False, 0.5, local)) == (3, False, 0.5, local, None)
    assert decode_reply(encode_reply(3, True, 1.0)) == (3, True, 1.0, None, None)
    stamped = with_link_until(encode_reply(3, False, 0.5, local), 12.25)
    assert decode_reply(stamped) == (3, False, 0.5, local, 12.25)
    header = encode_request(1, 0, 5, 3, 512, 0.7, 0.3, None, 16)
    assert len(header) == REQUEST.size and REPLY.size == len(encode_reply(0, False, 0.0))
    request = decode_request(header, values=None)  # type: ignore[arg-type]
    assert (request.local_steps, request.samples) == (16, 512)
    assert decode_request(encode_request(1, 0, 5, 3, 32, 0.7, 0.3, None), None).local_steps == 0  # type: ignore[arg-type]


# Slow (a command line starting its own Ray): local phases on Ray are in the default set by
# test_training.py's shared-memory-against-socket run and the online test below.
@pytest.mark.slow
@pytest.mark.ray
def test_bsp_then_local_16_trains_on_ray_and_shows_the_phase(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["train", "--schedule", "bsp:0.25,local-16", "--workers", "4", "--servers", "2"]
    argv += ["--epochs", "8", "--mnist1d-samples", "1000", "--no-progress", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "syncswitch.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "bsp>local-16" in proc.stdout
    summary = read_summary(out)
    assert summary.complete and [s.to_protocol for s in summary.switches] == ["local-16"]
    assert summary.samples_by_protocol["local"] > 0 and summary.gradients.unaccounted == 0
    traffic = summary.traffic
    assert traffic is not None
    per_sample = {
        p: traffic["bytes_by_protocol"][p] / summary.samples_by_protocol[p]
        for p in ("bsp", "local")
    }
    assert per_sample["bsp"] / per_sample["local"] >= 16 / 2
    assert summary.final_value is not None and summary.final_value > 0.2
    assert "local-16" in (out / names.UPDATES).read_text()


@pytest.mark.ray
def test_online_s_chosen_local_phase_runs_on_ray(ray_session, tmp_path: Path):
    """The choice is the driver's (control/timing.py): over an emulated link on which a
    message costs several steps (each shard's 10.4 kB at 10 Mbit/s: 8.3 ms each way, against
    5 ms steps), the run chooses a local phase, and the Ray shards and workers enter it from
    the decision (not from their schedule, which says asp) and finish in it."""
    from syncswitch.config import TrainConfig
    from syncswitch.runtime.train import train

    config = TrainConfig(
        schedule="online", workers=4, servers=2, epochs=4, mnist1d_samples=1000,
        batch_size=8, step_time_ms=5.0, link_gbps=0.01, progress=False,
        out=str(tmp_path / "run"),
    )  # fmt: skip
    summary = train(config).summary
    timing = summary.online_timing
    assert summary.complete and timing is not None and timing.reason == "message_cost"
    chosen = timing.follower
    assert chosen is not None and chosen["protocol"].startswith("local-")
    assert [s.to_protocol for s in summary.switches] == [chosen["protocol"]]
    # The workers ran the rounds the servers' replies gave them and sent deltas.
    assert summary.samples_by_protocol["local"] > 0 and summary.traffic is not None
    assert summary.traffic["messages_by_protocol"]["local"] > 0
    assert summary.gradients.unaccounted == 0
