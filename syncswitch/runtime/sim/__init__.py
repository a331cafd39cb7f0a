"""The simulator runtime: the real core and run controller on a virtual clock, in one process
(docs/simulator.md). Nothing here imports Ray."""
