"""`syncswitch train --runtime sim --schedule online`: the run decides, and says where and why."""

from __future__ import annotations

import json

from syncswitch.cli.main import main
from syncswitch.registry import ENV_VAR
from syncswitch.rundir import names, read_summary


def test_a_simulated_online_run_switches_and_says_where_and_why(
    tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "registry.db"))
    out = tmp_path / "run"
    argv = ["train", "--runtime", "sim", "--workers", "8", "--schedule", "online"]
    argv += ["--epochs", "6", "--mnist1d-samples", "2000", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    printed = " ".join(captured.out.split())
    assert "online timing left BSP at" in printed
    summary = read_summary(out)
    timing = summary.online_timing
    assert timing is not None and timing.switched and timing.reason in ("signal", "ceiling")
    assert timing.floor <= timing.at_fraction <= timing.ceiling + 0.05
    assert [(s.from_protocol, s.to_protocol) for s in summary.switches] == [("bsp", "asp")]
    assert summary.switches[0].at_fraction == timing.at_fraction
    assert timing.values  # the signal values at that moment
    events = [json.loads(line) for line in (out / names.EVENTS).read_text().splitlines()]
    assert [e["reason"] for e in events if e["event"] == "online_timing"] == [timing.reason]
    assert (out / names.TIMING_SIGNALS).exists()
    # A share the signal chose is stored for the job (`--schedule auto` reuses it); the
    # ceiling's is not, and the run says so.
    if timing.reason == "signal":
        assert "stored the online run's BSP share" in captured.err
    else:
        assert "share was not stored for `--schedule auto`" in captured.err
