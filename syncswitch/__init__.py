"""Sync-Switch: data-parallel training whose synchronization protocol changes while it runs.

Python API::

    from syncswitch import TrainConfig, train
    result = train(TrainConfig(workers=8, schedule="bsp:0.25,asp"))
    print(result.summary.final_value, result.summary.test, result.run_dir)

    from syncswitch import read_summary   # any run directory, read back and checked
    print(read_summary(result.run_dir).samples_per_s)

`train` also takes a job of the user's own: `model_factory=`, torch Datasets as
`train_data=`, `val_data=`, `test_data=` (or factories of them), `collate_fn=`, `loss_fn=`,
`metrics=` and `primary_metric=` (see `syncswitch.runtime.train.train`, docs/your-job.md);
`per_sample_mean(fn)` declares a metric function a mean over samples.

`train(config, callbacks=[...])` calls objects of the user's own as the run goes
(`Callback`: `on_start`, `on_evaluation`, `on_switch`, `on_checkpoint`, `on_end`); a hook
may end the run early by returning `StopRun(reason)`. `EarlyStopping(patience, min_delta)`
is one (the config's early-stop options install it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from syncswitch.config import TrainConfig, make_config
from syncswitch.errors import CallbackError, ConfigError
from syncswitch.rundir import Summary, read_summary

if TYPE_CHECKING:
    from syncswitch.control.callbacks import (
        Callback,
        CheckpointEvent,
        EvaluationEvent,
        StartEvent,
        StopRun,
    )
    from syncswitch.control.early_stopping import EarlyStopping
    from syncswitch.runtime.train import train
    from syncswitch.workloads.metrics import per_sample_mean

__all__ = [
    "Callback",
    "CallbackError",
    "CheckpointEvent",
    "ConfigError",
    "EarlyStopping",
    "EvaluationEvent",
    "StartEvent",
    "StopRun",
    "Summary",
    "TrainConfig",
    "make_config",
    "per_sample_mean",
    "read_summary",
    "train",
]
__version__ = "0.2.0"


# The callback protocol lives in control/ (Ray-free), whose package loads the run controller:
# imported on first use, as `train` is.
_CALLBACKS = ("Callback", "CheckpointEvent", "EvaluationEvent", "StartEvent", "StopRun")


def __getattr__(name: str) -> Any:
    # `train` is the runtime's own function (its typed signature, its docstring), imported
    # on first use: importing syncswitch stays free of torch and Ray.
    if name == "train":
        from syncswitch.runtime.train import train

        return train
    if name in _CALLBACKS:
        from syncswitch.control import callbacks

        return getattr(callbacks, name)
    if name == "EarlyStopping":
        from syncswitch.control.early_stopping import EarlyStopping

        return EarlyStopping
    if name == "per_sample_mean":
        from syncswitch.workloads.metrics import per_sample_mean

        return per_sample_mean
    raise AttributeError(f"module 'syncswitch' has no attribute {name!r}")
