"""The cluster a run is emulated or simulated on: the simulator's model, emulated device time."""
