"""An online run's share in the registry: kind `online`, reused by --schedule auto, listed by
`syncswitch jobs` apart from a search's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.recurring.auto import auto_schedule, describe_source
from syncswitch.recurring.online import online_share, record_online_decision
from syncswitch.registry import ONLINE, SEARCH, Registry, describe_job, fingerprint
from syncswitch.rundir import OnlineTimingSummary, Summary
from tests.rundir.samples import sample_summary


def online_summary(at: float = 0.4375, **changes) -> Summary:
    timing = OnlineTimingSummary(
        rule="staleness",
        threshold=0.35,
        floor=0.0625,
        ceiling=0.875,
        switched=True,
        at_fraction=at,
        decided_at=at + 0.002,
        reason="signal",
        describe=f"switch at {at:.3f} (staleness: signal; staleness_ratio 0.3)",
        values={"staleness_ratio": 0.3, "threshold": 0.35},
    )
    values = {"status": "complete", "schedule": "online", "online_timing": timing, **changes}
    return replace(sample_summary(), **values)


def test_an_online_decision_round_trips_and_auto_reuses_it(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    config = TrainConfig(schedule="online", workers=8, runtime="sim")
    stored = record_online_decision(config, online_summary(), str(db))
    assert stored is not None and stored.kind == ONLINE and stored.fraction == 0.4375
    assert stored.evidence["rule"] == "staleness" and stored.evidence["reason"] == "signal"
    with Registry(db) as registry:
        job = registry.job(fingerprint(config))
        assert job is not None and [d.kind for d in registry.decisions(job)] == [ONLINE]
    # The same job asked with --schedule auto (the switch options are not part of the job).
    auto = TrainConfig(schedule="auto", workers=8, runtime="sim", switch_ceiling=0.5)
    assert fingerprint(auto) == fingerprint(config)
    schedule, source = auto_schedule(auto, str(db))
    assert schedule == "bsp:0.4375,asp" and source["decision_kind"] == ONLINE
    assert "online run" in describe_source(source)


def test_only_a_complete_bsp_online_asp_run_that_left_bsp_is_stored(tmp_path: Path) -> None:
    config = TrainConfig(schedule="online")
    assert online_share(config, online_summary()) == 0.4375
    assert online_share(config, online_summary(status="failed: boom")) is None
    kept = replace(
        online_summary(),
        online_timing=replace(online_summary().online_timing, switched=False, at_fraction=None),
    )
    assert online_share(config, kept) is None
    longer = TrainConfig(schedule="bsp:online,asp:0.9,bsp")
    assert online_share(longer, online_summary()) is None
    assert record_online_decision(longer, online_summary(), str(tmp_path / "r.db")) is None


def test_jobs_tells_search_decisions_from_online_ones(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    config = TrainConfig(schedule="online", workers=8)
    with Registry(db) as registry:
        job = registry.ensure_job(fingerprint(config), describe_job(config))
        registry.record_decision(
            job, fraction=0.5, tolerance=0.5, repeats=2, evidence={}, reason="searched"
        )
    record_online_decision(config, online_summary(), str(db))
    with Registry(db) as registry:
        job = registry.job(fingerprint(config))
        assert job is not None
        assert [d.kind for d in registry.decisions(job)] == [SEARCH, ONLINE]
    assert main(["jobs", "--registry", str(db)]) == 0
    listing = " ".join(capsys.readouterr().out.split())
    assert "online run" in listing
    assert main(["jobs", "--registry", str(db), "--show", fingerprint(config)[:10]]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "from a search" in shown and "from an online run" in shown


def test_a_share_not_worth_reusing_is_not_stored(tmp_path: Path) -> None:
    """The ceiling's share (the signal never crossed, as in a short test run) and a run a
    rollback changed would be reused silently by `--schedule auto`: neither is stored."""
    from syncswitch.recurring.online import unworthy_share
    from syncswitch.rundir import Reliability

    config = TrainConfig(schedule="online")
    assert unworthy_share(online_summary()) is None
    ceiling = online_summary(
        online_timing=replace(online_summary().online_timing, reason="ceiling", at_fraction=0.875)
    )
    assert "ceiling" in str(unworthy_share(ceiling))
    assert record_online_decision(config, ceiling, str(tmp_path / "r.db")) is None
    rolled = online_summary(
        reliability=Reliability(checkpoints=1, failures=[], rollbacks=1, pinned_protocol="bsp")
    )
    assert "schedule was changed" in str(unworthy_share(rolled))
    assert record_online_decision(config, rolled, str(tmp_path / "r.db")) is None


def test_the_cli_says_when_it_does_not_store(tmp_path: Path, monkeypatch, capsys) -> None:
    from syncswitch.cli.main import build_parser
    from syncswitch.cli.train import _store_online_share

    args = build_parser().parse_args(["train", "--registry", str(tmp_path / "r.db")])
    ceiling = online_summary(
        online_timing=replace(online_summary().online_timing, reason="ceiling", at_fraction=0.875)
    )
    _store_online_share(args, TrainConfig(schedule="online"), ceiling)
    err = capsys.readouterr().err
    assert "share was not stored for `--schedule auto`: the phase ended at its ceiling" in err
    _store_online_share(args, TrainConfig(schedule="online"), online_summary())
    assert "stored the online run's BSP share 0.4375" in capsys.readouterr().err
