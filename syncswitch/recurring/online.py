"""An online run's switch point, stored for its job: `--schedule auto` reuses it next time.

A run with `--schedule online` (bsp:online,asp) that completed and left BSP records the BSP
share it ran as a registry decision of kind `online` for the job's fingerprint (the schedule
and the switch-rule options are not part of the job). `syncswitch jobs` tells such decisions
from a search's.

Only a share worth reusing is stored: one the rule chose on its signal, in a run that ran as
planned. A phase ended by its ceiling (the signal never crossed, as in a run of a few epochs)
or a run a rollback changed says nothing about where this job should switch, and a later
`--schedule auto` run would reuse it silently; `unworthy_share` says why one is not stored.
"""

from __future__ import annotations

from typing import Any

from syncswitch.config import TrainConfig
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.registry import (
    ONLINE,
    DecisionRecord,
    Registry,
    RegistryLocation,
    describe_job,
    fingerprint,
)
from syncswitch.rundir import Summary
from syncswitch.rundir.changes import schedule_changes
from syncswitch.rundir.summary import FINAL_ACCURACY


def online_share(config: TrainConfig, summary: Summary) -> float | None:
    """The BSP share a completed `bsp:online,asp` run chose, or None (no such run or share:
    a longer schedule's online phase is not a share of `bsp:F,asp`)."""
    timing = summary.online_timing
    if timing is None or not summary.complete or not timing.switched:
        return None
    phases = config.parsed_schedule().phases
    if len(phases) != 2 or not phases[0].online or timing.at_fraction is None:
        return None
    if phases[1].spec != ProtocolSpec.parse("asp"):  # what `online` leaves BSP for
        return None
    if timing.to_protocol not in (None, "asp"):  # the run chose a local phase to follow
        return None
    return float(timing.at_fraction)


def unworthy_share(summary: Summary) -> str | None:
    """Why an online run's share is not worth reusing, or None when it is."""
    timing = summary.online_timing
    if timing is None or not timing.switched:
        return "the run did not leave BSP on its own"
    if timing.reason == "message_cost":
        return (
            f"a local phase followed ({timing.to_protocol}, chosen for the network's cost); "
            "`--schedule auto` reuses BSP-then-ASP shares only"
        )
    if timing.reason != "signal":
        return "the phase ended at its ceiling, not on its signal (a short run's usually does)"
    if changes := schedule_changes(summary):
        return f"the schedule was changed ({'; '.join(changes)})"
    return None


def record_online_decision(
    config: TrainConfig,
    summary: Summary,
    registry: str | RegistryLocation | None = None,
) -> DecisionRecord | None:
    """Store the share an online run chose for its job (None when there is none to store)."""
    share = online_share(config, summary)
    timing = summary.online_timing
    if share is None or timing is None or unworthy_share(summary) is not None:
        return None
    location = (
        registry if isinstance(registry, RegistryLocation) else RegistryLocation.resolve(registry)
    )
    evidence: dict[str, Any] = {
        "kind": ONLINE,
        "rule": timing.rule,
        "threshold": timing.threshold,
        "floor": timing.floor,
        "ceiling": timing.ceiling,
        "reason": timing.reason,
        "values": timing.values,
        FINAL_ACCURACY: summary.final_value,
        "wall_time_s": summary.wall_time_s,
        "seed": config.seed,
        "run_dir": summary.run_dir,
    }
    with Registry(location) as store:
        job = store.ensure_job(fingerprint(config), describe_job(config))
        return store.record_decision(
            job,
            fraction=round(share, 4),
            tolerance=0.0,  # not a search's tolerance: the run decided from its own signals
            repeats=1,
            evidence=evidence,
            reason=f"online run ({timing.rule}, {timing.reason}): {timing.describe}",
        )
