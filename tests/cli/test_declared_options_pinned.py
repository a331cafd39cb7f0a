"""Today's `--help` groups and `--resume` overrides, pinned: they are derived from each
option's declaration, and must stay what they were when they were lists of their own."""

from __future__ import annotations

from dataclasses import dataclass, fields

from syncswitch.cli import train as train_cli
from syncswitch.cli.train import FLAG_GROUPS
from syncswitch.config import TrainConfig, config_fields
from syncswitch.config.declare import JOB_GROUP, Identity, Resume, Role, flag_groups, role_of

PINNED_GROUPS = {
    "job": {
        "workers", "epochs", "batch_size", "lr", "momentum", "weight_decay", "lr_schedule",
        "warmup", "lr_milestones", "lr_gamma", "dataset", "data_dir", "model",
        "mnist1d_samples", "pysource_bytes", "val_fraction", "seed", "eval_every", "optimizer",
        "betas", "eps", "grad_clip", "early_stop_patience", "early_stop_min_delta",
    },
    "schedule & switch": {
        "schedule", "momentum_at_switch", "momentum_ramp", "switch_rule", "switch_threshold",
        "switch_floor", "switch_ceiling", "staleness_lr", "staleness_lr_floor",
        "delay_compensation", "async_lr",
    },
    "local phases": {
        "outer_optimizer", "outer_lr", "outer_momentum", "local_lr_factor", "local_steps_rule",
        "local_inner_state", "local_server_momentum", "local_switch_warmup",
        "local_switch_lr_start",
    },
    "emulation & stragglers": {
        "step_time_ms", "speed_factors", "jitter_sigma", "link_gbps", "link_latency_ms",
        "server_link_gbps", "stragglers", "online_policy",
        "greedy_return", "straggler_threshold", "straggler_recover_threshold",
        "straggler_window",
    },
    "reliability": {
        "checkpoint_every", "checkpoint_every_s", "divergence_guard", "rollback_lr_factor",
        "worker_timeout_s", "max_worker_restarts", "faults",
    },
    "runtime & cluster": {
        "runtime", "cluster", "ray_address", "servers", "device", "evaluator_device",
        "server_device", "gpus_per_worker", "placement", "wire_dtype", "precision",
    },
    "output & loggers": {"out", "progress", "logger", "tracking_uri"},
}  # fmt: skip


def test_the_help_groups_are_todays() -> None:
    assert list(FLAG_GROUPS) == list(PINNED_GROUPS)  # the groups' order in --help
    assert {title: set(names) for title, names in FLAG_GROUPS.items()} == PINNED_GROUPS


def test_the_resume_overrides_are_todays() -> None:
    overrides = train_cli._RESUME_OVERRIDES
    from_flags_only = train_cli._FROM_FLAGS_ONLY
    assert set(overrides) == {"progress", "ray_address", "faults", "logger", "tracking_uri"}
    assert set(from_flags_only) == {"ray_address", "faults", "tracking_uri", "logger"}


def test_every_option_declares_its_role() -> None:
    # A new option must be placed on purpose: group, identity and resume, in its field.
    for f in config_fields():
        assert isinstance(f.metadata.get("role"), Role), f"{f.name} declares no Role"


def test_the_resume_refusal_names_the_declared_overrides() -> None:
    flags = {
        "--" + name.replace("_", "-") for name in train_cli._RESUME_OVERRIDES if name != "progress"
    }
    named = {flag.strip() for flag in train_cli._RESUME_ALLOWED.split(",")}
    assert named == flags | {"--progress/--no-progress"}


def test_a_field_that_declares_nothing_falls_back_as_before() -> None:
    @dataclass(frozen=True)
    class NewerConfig(TrainConfig):
        future_knob: float = 1.0

    f = next(f for f in fields(NewerConfig) if f.name == "future_knob")
    assert role_of(f) == Role(JOB_GROUP, Identity.WHEN_SET, Resume.FIXED)
    assert flag_groups(fields(NewerConfig))[JOB_GROUP][-1] == "future_knob"
