"""Each component's config is built in one place (config/components.py, or control/plan.py
for what needs the run too); `TrainConfig` holds options and validation, no builders."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from syncswitch.config import TrainConfig, components
from syncswitch.control.plan import ReliabilityConfig, RunPlan

JOB = Path(components.__file__).with_name("job.py")
SLOW = [{"workers": 0, "start": 0.1, "duration": 0.1, "delay_ms": 5}]


def _train_config_methods() -> list[str]:
    tree = ast.parse(JOB.read_text())
    (cls,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "TrainConfig"]
    return [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]


def test_train_config_builds_no_component_config() -> None:
    methods = _train_config_methods()
    builders = {name for name, _ in inspect.getmembers(components, inspect.isfunction)}
    # chooses_follower is a view of the schedule option both sides read, not a builder.
    assert set(methods) & builders <= {"chooses_follower"}
    assert len(methods) <= 12, methods


def test_the_plan_composes_what_the_components_build() -> None:
    config = TrainConfig(
        runtime="sim", schedule="bsp:0.5,asp", stragglers=SLOW, online_policy="elastic"
    )
    plan = RunPlan.resolve(config, train_samples=1000)
    assert plan.stragglers == components.straggler_monitor_config(config)
    assert plan.straggler_policy_name == "elastic"
    assert plan.reliability == ReliabilityConfig.of(config)
    assert plan.sync.local == components.local_config(config)
    assert plan.sync.optimizer == components.optimizer_config(config)
    assert plan.sync.staleness == components.staleness_config(config)
    assert plan.sync.lr_schedule == components.lr_schedule(config)
    # The simulator's emulation takes its step times from the cluster's compute model.
    cluster = config.parsed.sim_cluster()
    assert plan.cluster is cluster
    assert plan.emulation.step_time_ms == cluster.compute.step_time_ms
    assert plan.emulation.stragglers is config.parsed.scenario


def test_without_stragglers_or_a_policy_the_plan_has_no_straggler_monitor() -> None:
    plan = RunPlan.resolve(TrainConfig(), train_samples=1000)
    assert plan.stragglers is None and plan.straggler_policy_name is None
    greedy = TrainConfig(stragglers=SLOW, online_policy="greedy", greedy_return=True)
    assert RunPlan.resolve(greedy, train_samples=1000).straggler_policy_name == "greedy+return"
