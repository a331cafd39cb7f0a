"""The Ray runtime: parameter-server, worker and evaluator actors and the coordinator."""
