"""The options of a training job: one field each, and each declares all that is said of it.

Every field is also a `syncswitch train` flag (underscores become dashes) and a key of a
`--config` YAML/TOML file, so the three ways of setting a value cannot drift apart. Through
`option(...)` (declare.py) a field declares its help, its `--help` group, whether and how it
is part of the job's identity (the fingerprint), whether `--resume` may override it, and its
own checks (`choices=`, `range=`; checks.py). What relates fields to each other is checked
in validation.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from syncswitch.config.checks import Range
from syncswitch.config.declare import (
    EMULATION_GROUP,
    JOB_GROUP,
    OUTPUT_GROUP,
    RELIABILITY_GROUP,
    RUNTIME_GROUP,
    Identity,
    Resume,
    Role,
    option,
)
from syncswitch.config.job_options import JobOptions
from syncswitch.config.limits import (
    DEVICES,
    MAX_BANDWIDTH_GBPS,
    MAX_GPUS_PER_ACTOR,
    MAX_JITTER_SIGMA,
    MAX_SECONDS,
    MAX_SPEED_FACTOR,
    MAX_STEP_TIME_MS,
    MAX_STRAGGLER_WINDOW,
    MAX_WORKER_RESTARTS,
    MIN_EVERY_FRACTION,
    PLACEMENTS,
    RUNTIMES,
)
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.loggers import LOGGERS


@dataclass(frozen=True)
class TrainOptions(JobOptions):
    """Every option of a training job, each with its declaration; `TrainConfig` (job.py) is
    this, validated."""

    # Measurement and output.
    eval_every: float = option(
        0.05,
        "evaluate on the validation split every this fraction of training",
        Role(JOB_GROUP, Identity.NONE),
        range=Range(MIN_EVERY_FRACTION, 1),
    )
    out: str | None = option(
        None,
        "run directory for results (default: runs/<time>-<schedule>)",
        Role(OUTPUT_GROUP, Identity.NONE),
    )
    progress: bool = option(
        True, "show a live progress display", Role(OUTPUT_GROUP, Identity.NONE, Resume.OVERRIDE)
    )
    logger: list[str] | None = option(
        None,
        "also log to tensorboard (RUN_DIR/tensorboard) and/or mlflow; repeatable or "
        "comma-separated; csv (the run directory's files) is always written",
        Role(OUTPUT_GROUP, Identity.NONE, Resume.FLAGS_ONLY),
        choices=list(LOGGERS),
        repeatable=True,
    )
    tracking_uri: str | None = option(
        None,
        "MLflow tracking URI for --logger mlflow (default: sqlite:///RUN_DIR/mlflow.db); it is "
        "saved in config.json, so give credentials through MLflow's environment variables",
        Role(OUTPUT_GROUP, Identity.NONE, Resume.FLAGS_ONLY),
    )
    # Where it runs.
    runtime: str = option(
        "ray",
        "ray: real processes (a local Ray, or a cluster); sim: one process plays every worker "
        "on a simulated clock, with real gradients, times from --cluster (docs/simulator.md)",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        choices=list(RUNTIMES),
    )
    cluster: str | None = option(
        None,
        "for --runtime sim: the cluster model, a preset (default, paper-k80, wan-1g) or a "
        "YAML/TOML FILE of compute, network and server costs; default: --step-time-ms etc. for "
        "compute (20 ms if not given) and a 10 GbE network",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
    )
    ray_address: str | None = option(
        None,
        "Ray cluster to join: HOST:PORT, ray://HOST:PORT, or auto (the one `ray start "
        "--head` started on this machine); or set RAY_ADDRESS; default starts a local Ray "
        "instance",
        Role(RUNTIME_GROUP, Identity.NONE, Resume.FLAGS_ONLY),
    )
    device: str = option(
        "auto",
        "device the workers compute on: cuda, cpu, or auto (cuda when Ray reports GPUs)",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        choices=list(DEVICES),
    )
    evaluator_device: str = option(
        "auto",
        "device of the evaluator (auto: as for --device)",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        choices=list(DEVICES),
    )
    server_device: str = option(
        "cpu",
        "device the parameter servers apply updates on (auto: as for --device); cpu by "
        "default, so the GPUs are left to the workers",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        choices=list(DEVICES),
    )
    gpus_per_worker: float = option(
        0.0,
        "GPUs each worker asks Ray for (and the evaluator and servers when on cuda); a "
        "fraction shares one GPU, e.g. 0.125 puts 8 workers on a GPU; 0 = share the "
        "cluster's GPUs evenly when on cuda",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        range=Range(0, MAX_GPUS_PER_ACTOR),
    )
    placement: str = option(
        "pack",
        "where Ray puts the actors, through a placement group of one bundle per worker, "
        "server and the evaluator: pack (as few nodes as possible), spread (over the nodes, "
        "best effort) or strict-spread (each on its own node)",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        choices=list(PLACEMENTS),
    )
    # Cluster emulation (sleep-padded device time); recorded in every result file.
    step_time_ms: float = option(
        0.0,
        "emulated device time per worker step in ms; 0 = off",
        Role(EMULATION_GROUP, Identity.JOB),
        range=Range(0, MAX_STEP_TIME_MS),
    )
    speed_factors: list[float] | None = option(
        None,
        "per-worker multipliers of the emulated step time, e.g. 1,1,1,2",
        Role(EMULATION_GROUP, Identity.JOB),
        range=Range(0, MAX_SPEED_FACTOR, low_open=True),
    )
    jitter_sigma: float = option(
        0.0,
        "sigma of mean-one lognormal jitter on emulated step time",
        Role(EMULATION_GROUP, Identity.JOB),
        range=Range(0, MAX_JITTER_SIGMA),
    )
    link_gbps: float = option(
        0.0,
        "emulated network: each worker's link to the servers in Gbit/s, each direction (a "
        "message also takes its bytes' time on it, beside the local transport's); on the "
        "simulator, the network's worker bandwidth; 0 = off",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
        range=Range(0, MAX_BANDWIDTH_GBPS),
    )
    link_latency_ms: float = option(
        0.0,
        "emulated network: one-way latency per message on each worker's link, in ms (with "
        "--link-gbps)",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
        range=Range(0, MAX_STEP_TIME_MS),
    )
    server_link_gbps: float = option(
        0.0,
        "emulated network: each server's link in Gbit/s, each direction, which its workers' "
        "messages cross in turn (what --servers spreads); on the simulator, the network's "
        "server bandwidth; 0 = off",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
        range=Range(0, MAX_BANDWIDTH_GBPS),
    )
    stragglers: list | None = option(
        None,
        "emulated transient stragglers: a YAML/TOML FILE holding a list of episodes {workers, "
        "start|start_s, duration|duration_s, delay_ms|factor} and generators {random: {count, "
        "stragglers, duration, delay_ms|factor, window, seed}} or {paper: {stragglers, "
        "delay_ms, occurrences, seed}} (placed in the first BSP phase); in a --config file, "
        "the list itself",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
        from_file=True,
    )
    # The reaction to stragglers (detection runs whenever a policy or stragglers are set).
    # Its flag is --straggler-policy; the field keeps its first name, online_policy, which is
    # its key in config files, config.json and the fingerprint (old run directories and
    # stored jobs read as before), and --online-policy stays an alias.
    online_policy: str = option(
        "none",
        "reaction to detected stragglers: none (log only), greedy (switch to ASP at once) or "
        "elastic (the BSP barrier stops waiting for them until they recover)",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in StragglerPolicyKind],
        flags=("--straggler-policy", "--online-policy"),
    )
    greedy_return: bool = option(
        False,
        "greedy only: back to BSP after recovery until the planned BSP samples are done",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
    )
    straggler_threshold: float = option(
        1.5,
        "a worker is a straggler when its median step > this x the others' median",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
    )
    straggler_recover_threshold: float = option(
        1.2,
        "a straggler has recovered when its ratio drops below this (hysteresis)",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
    )
    straggler_window: int = option(
        9,
        "recent steps per worker the straggler detector considers",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
        range=Range(1, MAX_STRAGGLER_WINDOW),
    )
    # Reliability: checkpoints, failures, divergence.
    checkpoint_every: float = option(
        0.05,
        "checkpoint every this fraction of training (0 = off; a final one is always made)",
        Role(RELIABILITY_GROUP, Identity.NONE),
        range=Range(MIN_EVERY_FRACTION, 1, high_open=True, off=True),
    )
    checkpoint_every_s: float = option(
        0.0,
        "also checkpoint every this many seconds (0 = off)",
        Role(RELIABILITY_GROUP, Identity.NONE),
        range=Range(0, MAX_SECONDS, unit=" seconds"),
    )
    divergence_guard: bool = option(
        True,
        "watch the training loss; on divergence roll back to the last good checkpoint and "
        "continue under BSP at a lower learning rate",
        Role(RELIABILITY_GROUP, Identity.WHEN_SET),  # a rollback changes the training after it
    )
    rollback_lr_factor: float = option(
        0.5,
        "learning rate multiplier applied at each divergence rollback",
        Role(RELIABILITY_GROUP, Identity.WHEN_SET),
        range=Range(0, 1, low_open=True),
    )
    worker_timeout_s: float = option(
        60.0,
        "a worker silent this long (and not waiting on the server) is declared hung, "
        "killed and restarted",
        Role(RELIABILITY_GROUP, Identity.NONE),
        range=Range(0, MAX_SECONDS, low_open=True, unit=" seconds"),
    )
    max_worker_restarts: int = option(
        100,
        "restarts allowed per worker before the run fails",
        Role(RELIABILITY_GROUP, Identity.NONE),
        range=Range(0, MAX_WORKER_RESTARTS),
    )
    faults: list | None = option(
        None,
        "INJECTED faults for testing reliability: a YAML/TOML FILE holding a list of {kind: "
        "nan_gradient|wrong_shape|crash|hang, worker, at (fraction)}; recorded in every result",
        Role(RELIABILITY_GROUP, Identity.WHEN_SET, Resume.FLAGS_ONLY),  # a test, not the job
        from_file=True,
    )
