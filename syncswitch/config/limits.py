"""What a job may ask for: the choices of its named options and the bounds of its sizes.

The bounds are checked before anything is allocated or started. They are far above any job
this project runs (the paper's largest has 16 workers); past them a value is a typo or a
hostile file, and would exhaust memory, processes or time.
"""

from __future__ import annotations

# The built-in datasets (each with its default model) and models, by name: the copy of what
# syncswitch/workloads/catalog.py registers that config/ reads for --help's choices and
# validation without importing workloads/ (its loaders and models: torch.utils.data, the
# models' modules). tests/workloads/test_catalog.py pins the two equal, in order.
DEFAULT_MODEL = {
    "mnist1d": "cnn1d",
    "cifar10": "resnet20",
    "cifar100": "resnet32",
    "pysource": "char-transformer",
}
DATASETS = tuple(DEFAULT_MODEL)
MODELS = ("cnn1d", "resnet20", "resnet32", "char-transformer")
RUNTIMES = ("ray", "sim")
# Among an option's `choices=`: it also takes an import path to the user's own code
# (`mypkg.data:make_datasets`, syncswitch/import_path.py); --resume never takes one from a run
# directory: the command line names it again.
IMPORT_PATH = "MODULE:NAME"
DATASET_CHOICES = (*DATASETS, IMPORT_PATH)
MODEL_CHOICES = (*MODELS, IMPORT_PATH)
DEVICES = ("auto", "cpu", "cuda")
PLACEMENTS = ("pack", "spread", "strict-spread")
# `schedule: auto` names the job's stored timing decision; it is resolved from the registry
# (syncswitch.recurring.auto) before training, so a run never sees it.
AUTO_SCHEDULE = "auto"

MAX_WORKERS = 1024
MAX_SERVERS = 64
MAX_BATCH_SIZE = 65536
MAX_EPOCHS = 100_000.0
MAX_TOTAL_SAMPLES = 10**10  # epochs x training samples: ~12 days at 10k samples/s
MAX_MNIST1D_SAMPLES = 1_000_000
# --pysource-bytes: the default (about 1.5 MB) trains one epoch at 8 simulated workers in about
# two minutes on two shared cores (docs/language-model.md); the file list holds about 2.4 MB,
# and a larger value takes all of it.
PYSOURCE_BYTES = 1_500_000
MIN_PYSOURCE_BYTES = 10_000
MAX_PYSOURCE_BYTES = 1 << 30
CIFAR_TRAIN_SAMPLES = 50_000
# The share of training samples set aside as the validation split by default (--val-fraction):
# MNIST-1D's default 8,000 training samples give 7,200 and 800; CIFAR's 50,000, 45,000 and 5,000.
VALIDATION_SHARE = 0.1
MIN_EVERY_FRACTION = 1e-4  # eval_every, checkpoint_every: at most 10,000 of each per run
MAX_STEP_TIME_MS = 60_000.0
MAX_JITTER_SIGMA = 3.0
MAX_SPEED_FACTOR = 1000.0
MAX_BANDWIDTH_GBPS = 10_000.0  # an emulated link, as the cluster model bounds its links
MAX_SECONDS = 7 * 24 * 3600.0  # checkpoint_every_s, worker_timeout_s
MAX_WORKER_RESTARTS = 10_000
MAX_STRAGGLER_WINDOW = 10_000
MAX_SEED = 2**31 - 1  # seed + repeats must still fit numpy's and torch's seed types
MAX_LIST_ITEMS = 10_000  # lr_milestones, speed_factors, stragglers and faults entries
MAX_TEXT_CHARS = 4096  # any text option: schedule, paths, addresses
MAX_GPUS_PER_ACTOR = 64.0  # more GPUs than any one machine holds
# Config and list files are a few hundred bytes; a cap keeps a hostile one from filling memory.
MAX_CONFIG_FILE_BYTES = 1 << 20
MAX_SWITCH_THRESHOLD = 1e6
MAX_OUTER_LR = 100.0  # a local phase's outer step: DiLoCo uses 0.7, plain averaging 1
# Delay compensation's copies of the weights handed to each worker, on one server shard
# (workers x the shard's parameters x 4 bytes at worst): beyond this, more --servers spread
# them (a shard is one process, on one device). The default job needs 0.17 MB.
MAX_HANDED_OUT_BYTES_PER_SHARD = 4 << 30
