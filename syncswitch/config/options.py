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
    LOCAL_GROUP,
    OUTPUT_GROUP,
    RELIABILITY_GROUP,
    RUNTIME_GROUP,
    SCHEDULE_GROUP,
    Identity,
    Resume,
    Role,
    option,
)
from syncswitch.config.limits import (
    DATASET_CHOICES,
    DEVICES,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_GPUS_PER_ACTOR,
    MAX_JITTER_SIGMA,
    MAX_MNIST1D_SAMPLES,
    MAX_OUTER_LR,
    MAX_SECONDS,
    MAX_SEED,
    MAX_SERVERS,
    MAX_SPEED_FACTOR,
    MAX_STEP_TIME_MS,
    MAX_STRAGGLER_WINDOW,
    MAX_SWITCH_THRESHOLD,
    MAX_WORKER_RESTARTS,
    MAX_WORKERS,
    MIN_EVERY_FRACTION,
    MODEL_CHOICES,
    PLACEMENTS,
    RUNTIMES,
    VALIDATION_SHARE,
)
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.core.sync.hyperparams import LrScheduleKind, MomentumPolicy
from syncswitch.core.sync.local import LocalStepsRule, OuterOptimizerKind, StatePolicy
from syncswitch.core.timing.rules import RULE_NAMES
from syncswitch.loggers import LOGGERS


@dataclass(frozen=True)
class TrainOptions:
    """Every option of a training job, each with its declaration; `TrainConfig` (job.py) is
    this, validated."""

    # The job: what is trained, by how many workers, under which protocols.
    workers: int = option(
        8,
        "number of worker actors (data-parallel replicas)",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(1, MAX_WORKERS),
    )
    servers: int = option(
        1,
        "parameter-server actors; parameters are sharded evenly over them",
        Role(RUNTIME_GROUP, Identity.JOB),
        range=Range(1, MAX_SERVERS),
    )
    schedule: str = option(
        "online",
        "protocol phases PROTOCOL[:END],...: PROTOCOL is bsp, asp, ssp-S or local-H (H local "
        "steps per worker between rounds of model deltas, docs/local-updates.md); END is the "
        "fraction of total training samples where the phase ends; the last phase runs to the end; "
        "END 'online' (bsp:online,asp; 'online' alone says that, and is the default): the run "
        "decides when to leave BSP, by --switch-rule, between --switch-floor and --switch-ceiling; "
        "'auto': this job's stored switch point (from `syncswitch search` or an online run), "
        "else online",
        Role(SCHEDULE_GROUP, Identity.NONE),
    )
    switch_rule: str = option(
        "staleness",
        "for an END 'online': staleness (leave BSP once the error staleness would add under ASP "
        "falls below --switch-threshold times the gradient's sampling noise), noise-scale (once "
        "the gradient noise scale exceeds --switch-threshold times the global batch) or plateau "
        "(once the test loss improves by less than --switch-threshold, relative, per 0.1 of "
        "training)",
        Role(SCHEDULE_GROUP, Identity.NONE),
        choices=list(RULE_NAMES),
        online_only=True,
    )
    switch_threshold: float | None = option(
        None,
        "the switch rule's threshold (default: the rule's own, 0.25 staleness, 2 noise-scale, "
        "0.05 plateau)",
        Role(SCHEDULE_GROUP, Identity.NONE),
        range=Range(0, MAX_SWITCH_THRESHOLD, low_open=True),
        online_only=True,
    )
    switch_floor: float = option(
        1 / 16,
        "an online phase ends no earlier than this fraction of training",
        Role(SCHEDULE_GROUP, Identity.NONE),
        range=Range(0, 1, high_open=True),
        online_only=True,
    )
    switch_ceiling: float = option(
        7 / 8,
        "an online phase ends by this fraction of training at the latest, whatever the signal",
        Role(SCHEDULE_GROUP, Identity.NONE),
        range=Range(0, 1, low_open=True, high_open=True),
        online_only=True,
    )
    # Local-H phases (core/sync/local.py, docs/local-updates.md).
    outer_optimizer: str = option(
        "average",
        "local-H phases: how a round of workers' model deltas is applied: average (local "
        "SGD: the mean of the workers' models) or nesterov (DiLoCo: SGD with Nesterov "
        "momentum over the mean delta, at --outer-lr and --outer-momentum)",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in OuterOptimizerKind],
    )
    outer_lr: float = option(
        1.0,
        "local-H phases: the outer step's learning rate (1 with average is plain model "
        "averaging; DiLoCo uses 0.7 with nesterov)",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        range=Range(0, MAX_OUTER_LR, low_open=True),
    )
    outer_momentum: float = option(
        0.9,
        "local-H phases: the nesterov outer step's momentum",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        range=Range(0, 1, high_open=True),
    )
    local_lr_factor: float = option(
        1.0,
        "local-H phases: a worker's own learning rate is --lr (with its schedule) times this; "
        "1 makes local-1 equal BSP",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        range=Range(0, 1, low_open=True),
    )
    local_steps_rule: str = option(
        "fixed",
        "local-H phases: fixed (H as the schedule says) or qsr (H grows as the learning rate "
        "decays: H x (lr at the phase's start / lr now)^2, at most 8 x H)",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in LocalStepsRule],
    )
    local_inner_state: str = option(
        "keep",
        "local-H phases: a worker's own momentum buffer carries over from round to round "
        "(keep; a new local phase starts it at zero) or starts at zero every round (reset)",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in StatePolicy],
    )
    local_server_momentum: str = option(
        "reset",
        "when a local-H phase ends: the server's momentum buffer (from before the phase) is "
        "zeroed (reset) or carried over (keep)",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in StatePolicy],
    )
    epochs: float = option(
        80.0,
        "total training workload, in passes over the training set",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(0, MAX_EPOCHS, low_open=True),
    )
    batch_size: int = option(
        32,
        "per-worker batch size (a BSP update consumes workers x this)",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(1, MAX_BATCH_SIZE),
    )
    lr: float = option(
        0.2,
        "learning rate of one BSP update; ASP/SSP updates use lr/workers (linear scaling)",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(0, low_open=True),
    )
    momentum: float = option(
        0.9,
        "SGD momentum (used as is in BSP phases)",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(0, 1, high_open=True),
    )
    momentum_at_switch: str = option(
        "scale",
        "momentum in ASP/SSP phases: keep, scale (momentum/workers), zero, or ramp "
        "(momentum/workers at the switch, back to momentum over --momentum-ramp)",
        Role(SCHEDULE_GROUP, Identity.JOB),
        choices=[p.value for p in MomentumPolicy],
    )
    momentum_ramp: float = option(
        0.1,
        "fraction of training over which 'ramp' restores momentum",
        Role(SCHEDULE_GROUP, Identity.JOB),
        range=Range(0, 1),
    )
    weight_decay: float = option(
        0.0, "L2 weight decay", Role(JOB_GROUP, Identity.JOB), range=Range(0)
    )
    lr_schedule: str = option(
        "cosine",
        "learning-rate schedule over training progress (fraction of samples)",
        Role(JOB_GROUP, Identity.JOB),
        choices=[k.value for k in LrScheduleKind],
    )
    warmup: float = option(
        0.0, "linear learning-rate warmup, as a fraction of training", Role(JOB_GROUP, Identity.JOB)
    )
    lr_milestones: list[float] | None = option(
        None,
        "for --lr-schedule step: fractions where lr is multiplied by --lr-gamma",
        Role(JOB_GROUP, Identity.JOB),
    )
    lr_gamma: float = option(
        0.1,
        "for --lr-schedule step: factor applied at each milestone",
        Role(JOB_GROUP, Identity.JOB),
    )
    # Data and model.
    dataset: str = option(
        "mnist1d", "dataset", Role(JOB_GROUP, Identity.JOB), choices=list(DATASET_CHOICES)
    )
    data_dir: str | None = option(
        None, "directory holding CIFAR files (never downloaded)", Role(JOB_GROUP, Identity.NONE)
    )
    model: str | None = option(
        None,
        "model (default: cnn1d for mnist1d, resnet20 for cifar10, resnet32 for cifar100)",
        Role(JOB_GROUP, Identity.JOB),
        choices=list(MODEL_CHOICES),
    )
    mnist1d_samples: int = option(
        10000,
        "MNIST-1D samples to generate (80% train, 20% test)",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(100, MAX_MNIST1D_SAMPLES),
    )
    val_fraction: float = option(
        VALIDATION_SHARE,
        "share of training samples set aside (seeded alike for every run of a job) as the "
        "validation split every decision reads; 0: none (the test set decides, as before 0.2)",
        Role(JOB_GROUP, Identity.WHEN_SET), range=Range(0, 0.5),
    )  # fmt: skip
    seed: int = option(
        0,
        "seed for model init, data order and emulated jitter",
        Role(JOB_GROUP, Identity.NONE),
        range=Range(0, MAX_SEED),
    )
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
    # Online reaction to stragglers (detection runs whenever a policy or stragglers are set).
    online_policy: str = option(
        "none",
        "reaction to detected stragglers: none (log only), greedy (switch to ASP at once) or "
        "elastic (the BSP barrier stops waiting for them until they recover)",
        Role(EMULATION_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in StragglerPolicyKind],
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
