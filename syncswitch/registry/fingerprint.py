"""Job identity: which runs are "the same job", so a stored timing decision may be reused.

The fingerprint is the SHA-256 of the canonical JSON (sorted keys, no spaces) of
`{"v": FINGERPRINT_VERSION, "job": describe_job(config)}`: the fields below, normalised so
that two spellings of one job hash alike (the default model named or not, 80 vs 80.0 epochs,
settings that the chosen options make irrelevant left out). A model or dataset of the user's
own, named by import path (`mypkg.models:Net`), is identified by that path as written, not by
its code: changing the code behind a path does not make another job.

What is *not* part of it: `schedule` (what the search decides), `seed` (a recurring job is
retrained with new seeds), `out`, `progress`, `ray_address`, `logger`, `tracking_uri`
(where and how a run is watched, not what it computes), `data_dir` (where a dataset is
stored, not which one), `eval_every` (evaluation copies the weights off the critical path;
the final accuracy is measured at the end whatever the cadence), and the checkpoint and
worker-restart settings (how a run is kept safe).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, Field, asdict, fields, is_dataclass
from enum import Enum
from typing import Any

from syncswitch.config import TrainConfig
from syncswitch.config.components import momentum_policy
from syncswitch.config.declare import Identity, role_of, with_identity
from syncswitch.workloads.identity import Workload
from syncswitch.workloads.pysource import PYSOURCE, corpus_sha256

FINGERPRINT_VERSION = 1

# Each TrainConfig field declares its part in the job's identity (config/declare.py,
# `Identity`); these lists are derived from the declarations, in the fields' order.
# JOB_FIELDS: the job: what is trained on what, by how many workers, with which optimizer
# settings and how much work, on which (emulated) cluster. Emulation is part of the job: the
# speed of the workers shapes the staleness ASP sees, and so the accuracy after the switch.
# A description lists them in version 1's order (`syncswitch jobs --show` prints it so); a
# field can join them only with a new FINGERPRINT_VERSION, so that order never grows.
_V1_ORDER = (
    "model", "dataset", "mnist1d_samples", "workers", "servers", "batch_size", "epochs", "lr",
    "momentum", "momentum_at_switch", "momentum_ramp", "weight_decay", "lr_schedule", "warmup",
    "lr_milestones", "lr_gamma", "step_time_ms", "speed_factors", "jitter_sigma",
)  # fmt: skip
JOB_FIELDS: tuple[str, ...] = tuple(
    sorted(
        with_identity(fields(TrainConfig), Identity.JOB),
        key=lambda name: _V1_ORDER.index(name) if name in _V1_ORDER else len(_V1_ORDER),
    )
)
# Fields added to TrainConfig after fingerprint version 1 (the emulated stragglers, the online
# straggler policies, ...). They are part of the job only when set to something other than
# their default, so that jobs stored before a field existed keep their fingerprint. A field
# that declares nothing (a subclass's own) is treated the same way: a field nobody classified
# is assumed to change the job, so a decision is never reused for a job it was not made for.
LATER_JOB_FIELDS: tuple[str, ...] = with_identity(fields(TrainConfig), Identity.WHEN_SET)
# What the search decides, how a run is watched and where its figures go, how it is kept safe.
NOT_JOB_FIELDS: tuple[str, ...] = with_identity(fields(TrainConfig), Identity.NONE)


def describe_job(config: TrainConfig, workload: Workload | None = None) -> dict[str, Any]:
    """The normalised job fields that the fingerprint hashes (also stored with the job).

    `workload` names the dataset and model a Python-API run was given (its own objects);
    without it they are the config's built-in ones.
    """
    by_name = {f.name: f for f in fields(config)}
    job: dict[str, Any] = {}
    for name in JOB_FIELDS:
        if name in by_name:
            job[name] = _normalise(getattr(config, name), str(by_name[name].type))
    for name, f in by_name.items():
        value = getattr(config, name)
        if role_of(f).identity is Identity.WHEN_SET and value != _default_of(f):
            job[name] = _normalise(value, str(f.type))
    # The model the run actually builds, whether or not it was named.
    job["model"] = config.model_name
    if workload is not None:
        job["dataset"], job["model"] = workload.dataset, workload.model
    # Settings the other options make irrelevant would split one job into several.
    if job["dataset"] != "mnist1d":
        job["mnist1d_samples"] = None
    _describe_corpus(job, config, workload)
    if config.lr_schedule == "step":
        job["lr_milestones"] = [float(m) for m in config.parsed.lr_schedule.milestones]
    else:
        job["lr_milestones"] = job["lr_gamma"] = None
    # The policy in force, whether named or the optimizer's default (a job stored before the
    # default depended on the optimizer named "scale").
    job["momentum_at_switch"] = momentum_policy(config).value
    if job["momentum_at_switch"] != "ramp":
        job["momentum_ramp"] = None
    if not job.get("speed_factors"):
        job["speed_factors"] = None
    if config.runtime == "sim":
        # A simulated job is its own job, identified by its cluster model's numbers (not by
        # a file name or a preset name, which may come to mean other numbers): a decision
        # found on the simulator is never taken for one measured on real workers.
        cluster = config.parsed.sim_cluster().describe()
        cluster.pop("name")
        cluster.pop("notes")
        job["runtime"] = "sim"
        job["cluster"] = cluster
    return job


def _describe_corpus(job: dict[str, Any], config: TrainConfig, workload: Workload | None) -> None:
    """A pysource job is also its text: the corpus's checksum (this interpreter's standard
    library; another Python ships other text). Only pysource jobs get the key, so no other
    job's fingerprint changes; its size option counts only for pysource."""
    if job["dataset"] != PYSOURCE:
        job.pop("pysource_bytes", None)
        return
    recorded = workload.corpus_sha256 if workload is not None else None
    if recorded is None and config.dataset == PYSOURCE:
        recorded = corpus_sha256(config.pysource_bytes)
    if recorded is not None:
        job["corpus_sha256"] = recorded


def fingerprint(config: TrainConfig, workload: Workload | None = None) -> str:
    return fingerprint_of(describe_job(config, workload))


def fingerprint_of(job: dict[str, Any]) -> str:
    canonical = json.dumps(
        {"v": FINGERPRINT_VERSION, "job": job},
        sort_keys=True,
        separators=(",", ":"),
        default=_jsonable,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _default_of(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _normalise(value: Any, type_name: str) -> Any:
    if value is None:
        return None
    base = type_name.replace("| None", "").strip()
    if base == "float":
        return float(value)
    if base == "list[float]":
        return [float(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return str(value)
