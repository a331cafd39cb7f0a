"""The synchronizer: protocols, the barrier, admission, the optimizer and its rules, local
phases."""
