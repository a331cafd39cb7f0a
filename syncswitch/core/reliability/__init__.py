"""Faults and recovery: injected faults, checkpoints, the divergence guard."""
