"""`--schedule auto`: the job's stored timing decision, or online timing with a hint.

The job is looked up by its fingerprint (syncswitch.registry.fingerprint); a job that differs
in any fingerprint field has no decision of its own and gets the default. The resolved
schedule and where it came from are returned together, for summary.json's
`schedule_source`.
"""

from __future__ import annotations

from typing import Any

from syncswitch.config import TrainConfig
from syncswitch.core.timing.fraction_search import format_fraction, schedule_for
from syncswitch.registry import Registry, RegistryLocation, fingerprint
from syncswitch.workloads.identity import Workload

# A job with no stored decision decides online (docs/online-timing.md); that run then stores
# its share, so the next `auto` run reuses it.
DEFAULT_SCHEDULE = "online"


def resolve_auto_schedule(
    config: TrainConfig,
    registry: str | RegistryLocation | None = None,
    workload: Workload | None = None,
) -> tuple[TrainConfig, dict[str, Any]]:
    """Replace `schedule: auto` by the stored decision (or the default); say which it was.
    `workload` names a Python-API job's own dataset and model (see fingerprint). Switch
    options a stored fixed share makes moot are set aside (`TrainConfig.with_schedule`)."""
    if not config.schedule_is_auto:
        return config, {"kind": "given"}
    schedule, source = auto_schedule(config, registry, workload)
    return config.with_schedule(schedule), source


def auto_schedule(
    config: TrainConfig,
    registry: str | RegistryLocation | None = None,
    workload: Workload | None = None,
) -> tuple[str, dict[str, Any]]:
    """The schedule `schedule: auto` stands for in `config`'s job, and where it came from."""
    location = (
        registry if isinstance(registry, RegistryLocation) else RegistryLocation.resolve(registry)
    )
    job_fp = fingerprint(config, workload)
    decision = None
    # Looking up never creates a registry: a missing file simply holds no decision.
    if location.exists():
        with Registry(location) as store:
            job = store.job(job_fp)
            decision = store.latest_decision(job) if job is not None else None
    if decision is not None:
        schedule = schedule_for(decision.fraction)
        source = {
            "kind": "registry",
            "decision_id": decision.id,
            "decision_kind": decision.kind,  # "search" or "online"
            "fraction": decision.fraction,
            "label": format_fraction(decision.fraction),
            "schedule": schedule,
            "tolerance_points": decision.tolerance,
            "repeats": decision.repeats,
            "decided_at": decision.created.isoformat() + "Z",
            "fingerprint": job_fp,
            "registry": location.display,
            **_measured_on(config),
        }
    else:
        schedule = DEFAULT_SCHEDULE
        source = {
            "kind": "default",
            "schedule": schedule,
            "fingerprint": job_fp,
            "registry": location.display,
            "hint": f"no stored decision for job {job_fp[:12]}; this run decides online and "
            "stores its share, or run `syncswitch search` with the same options to search for it",
        }
    return schedule, source


def describe_source(source: dict[str, Any]) -> str:
    """One line for the terminal saying where an auto schedule came from."""
    if source["kind"] == "registry":
        simulated = source.get("runtime") == "sim"
        where = f"SIMULATED on cluster {source['cluster']}, " if simulated else ""
        origin = "an online run's" if source.get("decision_kind") == "online" else "a search's"
        return (
            f"schedule {source['schedule']} from stored {'SIMULATED ' if simulated else ''}"
            f"decision #{source['decision_id']} ({origin}; {where}BSP fraction "
            f"{source['label']}, job {source['fingerprint'][:12]}, registry {source['registry']})"
        )
    if source["kind"] == "default":
        return f"schedule {source['schedule']} (default): {source['hint']}"
    return f"schedule as given ({source['kind']})"


def _measured_on(config: TrainConfig) -> dict[str, Any]:
    """Where the decision's trials ran: the same runtime (and cluster) as this job's, since
    the fingerprint holds both."""
    if config.runtime == "sim":
        return {"runtime": "sim", "cluster": config.parsed.sim_cluster().name}
    return {"runtime": "ray"}
