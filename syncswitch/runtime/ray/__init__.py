"""The Ray runtime: parameter-server, worker and evaluator actors, and the supervisor that
drives the run controller with them. Only this package imports Ray."""
