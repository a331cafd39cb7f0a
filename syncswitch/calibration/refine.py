"""Fitting what the runs do not show directly, by replaying them: a worker's framework CPU
per step, the server's CPU per reply, the network latency and the driver's CPU per gradient,
corrected together until the replayed seconds per step match the measured ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from syncswitch.calibration.replay import replay
from syncswitch.calibration.runs import CalibrationRun
from syncswitch.core.cluster.model import ClusterModel

_REFINE_ROUNDS = 8
# The unknowns the replays fit, where the fit starts, and their finite-difference steps: a
# worker's framework CPU per step, the server's CPU per reply, the one-way latency, and the
# driver's CPU per gradient (ms).
_UNKNOWNS = ("worker_ms", "reply_ms", "latency_ms", "driver_ms")
START = (0.3, 0.5, 0.1, 0.3)
_STEP = (0.25, 0.25, 0.1, 0.25)


def refine_unknowns(
    model: ClusterModel, runs: list[CalibrationRun]
) -> tuple[ClusterModel, list[dict[str, Any]]]:
    """Fit the unknowns (a worker's framework CPU, the server's CPU per reply, latency) so
    that shortened replays of every run match its measured seconds per step in each
    protocol: Gauss-Newton on the relative errors, with the Jacobian taken by finite
    differences once and then updated (Broyden)."""
    keys = [(i, p) for i, r in enumerate(runs) for p in sorted(r.measured)]

    def residuals(theta: np.ndarray) -> tuple[np.ndarray, list[dict[str, float]]]:
        candidate = _with_unknowns(model, theta)
        simulated = [replay(candidate, r, probe=True) for r in runs]
        errors = [simulated[i].get(p, 0.0) / runs[i].measured[p] - 1 for i, p in keys]
        return np.array(errors), simulated

    host = model.host_cpu
    theta = np.array(
        [host.worker_ms, model.server.reply_ms, model.network.latency_ms, host.driver_ms]
    )
    r0, simulated = residuals(theta)
    rounds = [_round(0, theta, simulated)]
    jacobian = np.zeros((len(keys), len(_UNKNOWNS)))
    for column, step in enumerate(_STEP):
        moved = theta.copy()
        moved[column] += step
        jacobian[:, column] = (residuals(moved)[0] - r0) / step
    # Levenberg-Marquardt within a trust region: the pace is a max() of paths (the step, a
    # core queue, the server's thread), so the errors bend where a bottleneck changes and a
    # full Gauss-Newton step can overshoot far; a step that does not help is not taken.
    damping, radius = 1e-3, 1.0
    for index in range(1, _REFINE_ROUNDS + 1):
        scale = np.sqrt(np.diag(jacobian.T @ jacobian)) + 1e-9
        lhs = np.vstack([jacobian, np.diag(np.sqrt(damping) * scale)])
        rhs = np.concatenate([-r0, np.zeros(len(_UNKNOWNS))])
        delta = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
        delta *= min(1.0, radius / max(float(np.abs(delta).max()), 1e-12))
        moved = np.maximum(theta + delta, 0.0)
        r1, simulated = residuals(moved)
        rounds.append(_round(index, moved, simulated))
        step = moved - theta
        if float(step @ step) > 0:
            jacobian += np.outer(r1 - r0 - jacobian @ step, step) / float(step @ step)
        if float(r1 @ r1) < float(r0 @ r0):
            theta, r0 = moved, r1
            damping, radius = damping / 3, radius * 1.5
        else:
            damping, radius = damping * 4, radius / 2
    return _with_unknowns(model, theta), rounds


def _round(index: int, theta: np.ndarray, simulated: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "round": index,
        **{name: round(float(value), 4) for name, value in zip(_UNKNOWNS, theta, strict=True)},
        "simulated_s_per_step": simulated[0],
        "simulated_s_per_step_by_run": simulated,
    }


def _with_unknowns(model: ClusterModel, theta: np.ndarray) -> ClusterModel:
    worker_ms, reply_ms, latency_ms, driver_ms = (round(max(0.0, float(v)), 4) for v in theta)
    return replace(
        model,
        host_cpu=replace(model.host_cpu, worker_ms=worker_ms, driver_ms=driver_ms),
        server=replace(model.server, reply_ms=reply_ms),
        network=replace(model.network, latency_ms=latency_ms),
    )
