"""Calibration, a workflow over runs beside `timing/` and `reports/`: a cluster model for the
simulator fitted to a finished Ray run's own records (`syncswitch calibrate`), then refined by
replaying that run's job on the simulator. It reads run directories and calls `train()`; it is
not part of the simulator itself, which only runs a cluster model it is given.
"""

from syncswitch.calibration.fit import MAX_REPLAY_ERROR, Replay, calibrate, cluster_yaml

__all__ = ["MAX_REPLAY_ERROR", "Replay", "calibrate", "cluster_yaml"]
