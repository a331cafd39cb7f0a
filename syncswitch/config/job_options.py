"""The options that define the job itself: what is trained, by how many workers, under which
protocols, with which optimizer and data. `TrainOptions` (options.py) adds how it runs and
what it records; see there for what an option declares.
"""

from __future__ import annotations

from dataclasses import dataclass

from syncswitch.config.checks import Range
from syncswitch.config.declare import (
    JOB_GROUP,
    LOCAL_GROUP,
    RUNTIME_GROUP,
    SCHEDULE_GROUP,
    Identity,
    Role,
    option,
)
from syncswitch.config.limits import (
    DATASET_CHOICES,
    DEFAULT_MODEL,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_MNIST1D_SAMPLES,
    MAX_OUTER_LR,
    MAX_PYSOURCE_BYTES,
    MAX_SEED,
    MAX_SERVERS,
    MAX_SWITCH_THRESHOLD,
    MAX_WORKERS,
    MIN_PYSOURCE_BYTES,
    MODEL_CHOICES,
    PYSOURCE_BYTES,
    VALIDATION_SHARE,
)
from syncswitch.core.sync.hyperparams import AsyncLrPolicy, LrScheduleKind, MomentumPolicy
from syncswitch.core.sync.local import (
    SWITCH_WARMUP,
    LocalStepsRule,
    OuterOptimizerKind,
    StatePolicy,
)
from syncswitch.core.sync.precision import Precision
from syncswitch.core.sync.server_optimizer import OptimizerKind
from syncswitch.core.sync.staleness import DEFAULT_LR_FLOOR, StalenessLr
from syncswitch.core.sync.wire_dtype import WireDtype
from syncswitch.core.timing.rules import RULE_NAMES


@dataclass(frozen=True)
class JobOptions:
    """The job's options, first in `--help`'s groups; the fields of `TrainOptions` follow."""

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
        "(once the validation loss improves by less than --switch-threshold, relative, per 0.1 of "
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
    local_switch_warmup: float = option(
        SWITCH_WARMUP,
        "local-H phases entered from BSP/ASP/SSP: a worker's own learning rate ramps up "
        "linearly from --local-switch-lr-start / sqrt(workers) of it to all of it, over this "
        "fraction of training or 1.2x the share trained before the switch if that is longer; "
        "without it (0) the rounds after a switch from BSP can diverge "
        "(docs/slow-networks.md)",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        range=Range(0, 1, high_open=True),
    )
    local_switch_lr_start: float = option(
        1.0,
        "where --local-switch-warmup's ramp starts, times 1/sqrt(workers)",
        Role(LOCAL_GROUP, Identity.WHEN_SET),
        range=Range(0, 1, low_open=True),
    )
    local_steps_rule: str | None = option(
        None,
        "local-H phases: fixed (H as the schedule says) or qsr (H grows as the learning rate "
        "decays: H x (lr at the phase's start / lr now)^2, at most 8 x H); default: qsr for "
        "the local phase an online run chooses on a slow network, else fixed",
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
    # None: the optimizer's own default (DEFAULT_LR), resolved when the config is built, so
    # config.json and the job's fingerprint hold the number the run used.
    lr: float = option(
        None,
        "learning rate of one BSP update; ASP/SSP updates use lr/workers (see --async-lr); "
        "default 0.2 for sgd, 1e-3 for adam and adamw (docs/optimizers.md)",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(0, low_open=True),
    )
    optimizer: str = option(
        "sgd",
        "the parameter server's optimizer: sgd (momentum SGD, L2 decay), adam (L2 decay) or "
        "adamw (decoupled decay); every shard, every protocol (docs/optimizers.md)",
        Role(JOB_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in OptimizerKind],
    )
    momentum: float = option(
        0.9,
        "SGD momentum (used as is in BSP phases); Adam's beta1 is --betas' first",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(0, 1, high_open=True),
    )
    momentum_at_switch: str | None = option(
        None,
        "momentum (Adam: beta1) in ASP/SSP phases: keep, scale (/workers), zero, ramp "
        "(/workers at the switch, back over --momentum-ramp), or reset (kept, its buffer or "
        "first moment started afresh at the switch); default scale for sgd, keep for adam and "
        "adamw (docs/optimizers.md)",
        Role(SCHEDULE_GROUP, Identity.JOB),
        choices=[p.value for p in MomentumPolicy],
    )
    momentum_ramp: float = option(
        0.1,
        "fraction of training over which 'ramp' restores momentum",
        Role(SCHEDULE_GROUP, Identity.JOB),
        range=Range(0, 1),
    )
    # Staleness-aware ASP/SSP updates (core/sync/staleness.py, docs/protocols.md); count in
    # the job only when set, and a schedule without an ASP/SSP phase refuses them.
    staleness_lr: str = option(
        "none",
        "ASP/SSP phases: inverse applies a gradient of staleness tau at lr/tau (not below "
        "--staleness-lr-floor x lr); none: lr as is",
        Role(SCHEDULE_GROUP, Identity.WHEN_SET),
        choices=[k.value for k in StalenessLr],
    )
    staleness_lr_floor: float = option(
        DEFAULT_LR_FLOOR,
        "for --staleness-lr inverse: the smallest learning-rate factor a stale gradient gets",
        Role(SCHEDULE_GROUP, Identity.WHEN_SET),
        range=Range(0, 1, low_open=True),
    )
    delay_compensation: float = option(
        0.0,
        "ASP/SSP phases: DC-ASGD's lambda (g + lambda*g*g*(w - w_stale)), at most 10 (the "
        "paper's are 0.04 to 2); the server keeps up to workers x parameters x 4 bytes of "
        "weights; 0: off",
        Role(SCHEDULE_GROUP, Identity.WHEN_SET),
        range=Range(0, 10),
    )
    async_lr: str | None = option(
        None,
        "learning rate of an ASP/SSP update: linear (lr x 1/workers, one worker's share of a "
        "BSP update) or none (lr itself); default linear for sgd, none for adam and adamw "
        "(docs/optimizers.md)",
        Role(SCHEDULE_GROUP, Identity.WHEN_SET),
        choices=[p.value for p in AsyncLrPolicy],
    )
    weight_decay: float = option(
        0.0,
        "weight decay: L2 (added to the gradient) for sgd and adam, decoupled for adamw",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(0),
    )
    betas: list[float] | None = option(
        None,
        "--optimizer adam/adamw: B1,B2, the moments' decay (default 0.9,0.999); B1 is what "
        "--momentum-at-switch acts on",
        Role(JOB_GROUP, Identity.WHEN_SET),
    )
    eps: float = option(
        1e-8,
        "--optimizer adam/adamw: added to the second moment's square root; at least 1e-30 "
        "(the server's float32 would round a smaller one to 0 or lose it)",
        Role(JOB_GROUP, Identity.WHEN_SET),
        range=Range(1e-30, 1),
    )
    grad_clip: float | None = option(
        None,
        "clip the gradient of every update to this global L2 norm, as torch's "
        "clip_grad_norm_: a BSP round's mean (one norm across all server shards), each "
        "ASP/SSP gradient, each local step (default: off)",
        Role(JOB_GROUP, Identity.WHEN_SET),
        range=Range(0, low_open=True),
    )
    early_stop_patience: int = option(
        0,
        "end the run once this many evaluations in a row have not improved the primary "
        "metric on validation by more than --early-stop-min-delta (0 = off)",
        Role(JOB_GROUP, Identity.WHEN_SET),
        range=Range(0, 10_000),
    )
    early_stop_min_delta: float = option(
        0.0,
        "with --early-stop-patience: the improvement that counts (in the metric's units)",
        Role(JOB_GROUP, Identity.WHEN_SET),
        range=Range(0),
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
        "model (default: "
        + ", ".join(f"{model} for {dataset}" for dataset, model in DEFAULT_MODEL.items())
        + ")",
        Role(JOB_GROUP, Identity.JOB),
        choices=list(MODEL_CHOICES),
    )
    mnist1d_samples: int = option(
        10000,
        "MNIST-1D samples to generate (80% train, 20% test)",
        Role(JOB_GROUP, Identity.JOB),
        range=Range(100, MAX_MNIST1D_SAMPLES),
    )
    # The pysource corpus (workloads/pysource.py): its size. Part of the job when set; the
    # corpus's checksum is in a pysource job's fingerprint whatever the size.
    pysource_bytes: int = option(
        PYSOURCE_BYTES,
        "pysource: bytes of standard-library text to take, in the fixed file order "
        "(docs/language-model.md); more is slower; above ~2.4 MB takes every file",
        Role(JOB_GROUP, Identity.WHEN_SET),
        range=Range(MIN_PYSOURCE_BYTES, MAX_PYSOURCE_BYTES),
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
    # The data plane (issue 34): what messages' values travel as; it changes results, so it
    # counts in the job's identity when set (core/sync/wire_dtype.py).
    wire_dtype: str = option(
        "float32",
        "gradients, local deltas and weights replies travel as float32, bfloat16 or float16 "
        "(half the bytes; the server keeps float32 weights; a float16 overflow drops the message "
        "as non_finite)",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        choices=[d.value for d in WireDtype],
    )
    # How the workers compute (core/sync/precision.py): it changes results, so it counts in
    # the job's identity when set, and a resumed run keeps the one it began with.
    precision: str = option(
        Precision.FLOAT32.value,
        "what the workers compute the forward pass and loss in: 32 (float32) or bf16-mixed "
        "(bfloat16 autocast; parameters, gradients, the servers' weights and optimizer state "
        "stay float32; evaluation stays float32); --wire-dtype is separate",
        Role(RUNTIME_GROUP, Identity.WHEN_SET),
        choices=[p.value for p in Precision],
    )
