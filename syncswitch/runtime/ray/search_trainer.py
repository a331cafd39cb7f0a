"""The switch-point search's trainer: each trial a `train()` call, on one Ray instance (or
on the simulator, one after another, for `--runtime sim`).

`syncswitch.recurring.search_runner.run_search` takes any `Trainer`; the CLI passes a
`RayTrainer`, and tests of the search's bookkeeping pass scripted ones instead.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from syncswitch.config import TrainConfig
from syncswitch.recurring.search_runner import AUTO


class RayTrainer:
    """Trials as `train()` calls in threads of this driver, on one Ray instance.

    The dataset is loaded once and shared by all trials. Ray is started here (and stopped at
    the end) unless it is already running, so that trials do not each start and stop it.
    """

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self._dataset: Any = None
        self._started_ray = False
        self._token = uuid.uuid4().hex

    def per_trial_cpus(self, config: TrainConfig) -> int:
        from syncswitch.runtime.ray.resources import ResourcePlan

        # What one trial's actors ask Ray for: workers, servers and the evaluator.
        return int(ResourcePlan().cpus(config.workers, config.servers))

    def capacity(self, requested: int | str, config: TrainConfig) -> tuple[int, str]:
        if config.runtime == "sim":
            # Simulated trials need no Ray, and share torch's global RNG in this process:
            # one at a time.
            return 1, "simulated trials run one at a time in this process"
        import ray

        from syncswitch.runtime.ray.connect import connect

        need = self.per_trial_cpus(config)
        wanted = requested if isinstance(requested, int) else 1
        self._started_ray = connect(config.ray_address, min_cpus=need * wanted)
        if requested == 1:
            return 1, "trials run one at a time (--parallel 1)"
        free = ray.available_resources().get("CPU", 0.0)
        fit = max(1, int(free // need))
        slots = fit if requested == AUTO else min(int(requested), fit)
        note = (
            f"up to {slots} trials at once ({free:g} free Ray CPUs, {need} per trial); their "
            "wall times share this machine's cores, so they are not comparable with trials "
            "that ran alone"
        )
        if isinstance(requested, int) and slots < requested:
            note = f"only {slots} of the {requested} requested trials fit at once: " + note
        return slots, note

    def run(self, config: TrainConfig, source: dict[str, Any], started: threading.Event) -> Any:
        from syncswitch.runtime.job_parts import BuiltinModel, shape_only
        from syncswitch.runtime.train import train
        from syncswitch.workloads import load_dataset

        with _DATASET_LOCK:
            if self._dataset is None:
                self._dataset = load_dataset(
                    config.dataset, config.data_dir, mnist1d_samples=config.mnist1d_samples
                )
        token = f"{self._token}-{source.get('fraction')}-{source.get('seed')}"
        factory = _SignallingFactory(
            BuiltinModel(config.model_name, shape_only(self._dataset)), token
        )
        _BUILT[token] = started
        try:
            result = train(
                config,
                model_factory=factory,
                dataset=self._dataset,
                schedule_source=source,
                print_summary=False,  # a trial's summary: the search prints its own table
            )
        finally:
            _BUILT.pop(token, None)
        return result.summary

    def close(self) -> None:
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False


_DATASET_LOCK = threading.Lock()
# This process's searches waiting for a trial's first model build (see _SignallingFactory).
_BUILT: dict[str, threading.Event] = {}


@dataclass(frozen=True)
class _SignallingFactory:
    """The built-in model factory, telling the search when the driver has built the model.

    The Ray supervisor seeds torch's global generator and then builds the initial model; in
    actor processes `_BUILT` is empty and this is just the inner factory.
    """

    inner: Callable[[], Any]
    token: str

    def __call__(self) -> Any:
        from syncswitch.workloads.checks import is_checking

        model = self.inner()
        # The checks before a trial build a model too; only the run's own build counts.
        event = None if is_checking() else _BUILT.get(self.token)
        if event is not None:
            event.set()
        return model
