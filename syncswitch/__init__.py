"""Sync-Switch: data-parallel training whose synchronization protocol changes while it runs.

Python API::

    from syncswitch import TrainConfig, train
    result = train(TrainConfig(workers=8, schedule="bsp:0.25,asp"))
    print(result.summary.final_accuracy, result.run_dir)

    from syncswitch import read_summary   # any run directory, read back and checked
    print(read_summary(result.run_dir).samples_per_s)

`train` also accepts `model_factory=` (any picklable callable returning an nn.Module),
`dataset=` (a `syncswitch.workloads.ArrayDataset`) and `loss_fn=`.
"""

from syncswitch.config import TrainConfig, make_config
from syncswitch.errors import ConfigError
from syncswitch.rundir import Summary, read_summary

__all__ = ["ConfigError", "Summary", "TrainConfig", "make_config", "read_summary", "train"]
__version__ = "0.2.0"


def train(config: TrainConfig, **kwargs):
    """Run one training job (see `syncswitch.runtime.train.train`)."""
    from syncswitch.runtime.train import train as _train

    return _train(config, **kwargs)
