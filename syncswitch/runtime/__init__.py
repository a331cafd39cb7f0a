"""Runtimes drive the run controller; `train` (runtime/train.py) is the entry point."""
