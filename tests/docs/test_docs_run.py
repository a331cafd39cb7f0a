"""Every `syncswitch ...` command the README and docs/ show RUNS, with short settings: train
commands train for real on the simulator (config building, validation, a short run), report,
jobs, calibrate and search read what those runs wrote. Placeholder files the pages name
(job.yaml, slow.yaml, my-cluster.yaml, runs/...) are real small fixtures here; what this
machine cannot have (a cluster, CUDA, CIFAR files) must be refused in one line."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from syncswitch.cli.main import main
from syncswitch.registry.store import Registry
from tests.docs.test_docs import ENV_TOOLS, PAGES, ROOT, SHOWN, shown_programs

pytestmark = pytest.mark.own_registry  # the workspace fixture's, shared by the pages' commands

# Appended to every train/search command: flags given later win, so the command's own job
# is kept and only its size shrinks (and a Ray run becomes a simulated one).
SHORT = [
    "--runtime", "sim", "--epochs", "0.2", "--mnist1d-samples", "2000",
    "--pysource-bytes", "40000", "--no-progress",
]  # fmt: skip

# Commands this machine cannot run as shown, each with the one-line refusal it must give
# (exit 2). A new doc command is either run below or listed here on purpose.
REFUSED = {
    # a Ray cluster address: no cluster here, and the test never touches the network
    # (its name lookup is made to fail here, as it does where "head" is not a host)
    ".venv/bin/syncswitch train --ray-address ray://head:10001": "cannot reach the Ray cluster",
    # CIFAR files are never downloaded and ~/data holds none here
    ".venv/bin/syncswitch train --dataset cifar10 --data-dir ~/data": "CIFAR-10 not found",
    # no CUDA here (a GPU machine runs tests/runtime/test_gpu.py instead)
    ".venv/bin/syncswitch train --device cuda": "no CUDA GPU",
    ".venv/bin/syncswitch train --device cuda --gpus-per-worker 0.125 --server-device cuda": (
        "no CUDA GPU"
    ),
    # a cluster's head by its address: none here either
    ".venv/bin/syncswitch train --ray-address 10.0.0.5:6379 --placement spread": (
        "cannot reach the Ray cluster"
    ),
    ".venv/bin/syncswitch train --ray-address 10.0.0.5:6379 --placement strict-spread"
    " --workers 4": ("cannot reach the Ray cluster"),
}

SLOW_YAML = "- {workers: [2, 5], start: 0.05, duration: 0.3, delay_ms: 30}\n"
CLUSTER_YAML = """\
name: my-cluster
compute: {step_time_ms: 20, jitter_sigma: 0.1}
network: {worker_bandwidth_gbps: 10, server_bandwidth_gbps: 10, latency_ms: 0.05}
server: {message_ms: 0.02, ns_per_parameter: 1.0}
"""
RESUMED = "runs/20261203-101500-bsp0.25-asp"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh cwd holding the pages' placeholder files, with its own job registry."""
    home = tmp_path_factory.mktemp("docs-run")
    shutil.copytree(ROOT / "examples", home / "examples")
    (home / "job.yaml").write_text((ROOT / "examples" / "job.yaml").read_text())
    (home / "slow.yaml").write_text(SLOW_YAML)
    (home / "my-cluster.yaml").write_text(CLUSTER_YAML)
    (home / "cluster.yaml").write_text(CLUSTER_YAML)
    # The README's set-up made .venv in the repository root; this cwd stands for that root.
    (home / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(home)
        patch.setenv("HOME", str(home))  # ~/data is this test's, and empty
        patch.setenv("SYNCSWITCH_REGISTRY", str(home / "registry.db"))
        patch.delenv("RAY_ADDRESS", raising=False)
        yield home


def words(command: str) -> list[str]:
    return shlex.split(command)[1:]


def run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # --version and --help exit through argparse
        return int(stop.code or 0)


def kind(command: str) -> str:
    return words(command)[0] if words(command) else ""


TRAIN = [(p, c) for p, c in SHOWN if kind(c) == "train" and c not in REFUSED]
OTHER = [(p, c) for p, c in SHOWN if kind(c) not in ("train", "")]

TINY_SEARCH = ["--repeats", "1", "--max-trials", "2", "--search-dir", "searches"]
PLACEHOLDER_RUN = "runs/my-ray-run"  # calibrate's example: a finished Ray run
PLACEHOLDER_FINGERPRINT = "3fa9c2"  # jobs --show's example prefix


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No command reaches the network: every connection attempt fails as an unknown host."""

    def unknown_host(*_: object, **__: object) -> socket.socket:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unknown_host)


def unique(commands: list[tuple[str, str]]) -> list[Any]:
    """Each distinct command once (README and guide share some), named by its pages."""
    pages: dict[str, list[str]] = {}
    for page, command in commands:
        pages.setdefault(command, []).append(page)
    return [pytest.param(c, id=f"{'+'.join(p)}: {c}") for c, p in pages.items()]


def run_dir_name(command: str) -> str:
    """A readable run directory per command; the digest keeps long look-alikes apart."""
    digest = hashlib.sha256(command.encode()).hexdigest()[:8]
    return f"runs/{re.sub(r'[^A-Za-z0-9.-]+', '_', ' '.join(words(command)))[:60]}-{digest}"


def killed_run(run_dir: str) -> None:
    """A short run that stopped before its end: its final checkpoint and summary are gone,
    as when the driver is killed, so `--resume` has work left to do."""
    job = ["--schedule", "bsp:0.25,asp", "--checkpoint-every", "0.1", "--out", run_dir]
    assert run(["train", *SHORT, *job]) == 0
    (Path(run_dir) / "summary.json").unlink()
    checkpoints = sorted((Path(run_dir) / "checkpoints").glob("checkpoint-*.json"))
    for meta in checkpoints[len(checkpoints) // 2 :]:
        meta.unlink()
        meta.with_suffix(".pt").unlink()


@pytest.mark.parametrize("command", unique(TRAIN))
def test_every_shown_train_command_runs(workspace: Path, command: str, capsys) -> None:
    argv = words(command)
    if "--resume" in argv:  # the run it names is made first; it resumes with its own job
        killed_run(argv[argv.index("--resume") + 1])
        argv = [*argv, "--no-progress"]
    else:
        argv = [*argv, *SHORT, "--out", run_dir_name(command)]
    assert run(argv) == 0, capsys.readouterr().err
    out = argv[argv.index("--resume" if "--resume" in argv else "--out") + 1]
    summary = json.loads((Path(out) / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["runtime"] == "sim"


@pytest.mark.parametrize("command", sorted(REFUSED))
def test_what_cannot_run_here_is_refused_in_one_line(workspace: Path, command: str, capsys) -> None:
    assert command in {c for _, c in SHOWN}, "listed as refused but no page shows it"
    argv = [os.path.expanduser(w) for w in words(command)]  # as the shell would expand ~
    before = set(workspace.glob("runs/*"))
    assert run([*argv, "--epochs", "0.2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and REFUSED[command] in err[0], err
    assert set(workspace.glob("runs/*")) == before, "a refused run left a run directory"


@pytest.fixture(scope="module")
def finished_runs(workspace: Path) -> list[str]:
    """Two finished runs (BSP and BSP-then-ASP), whatever else the train tests left."""
    runs = ["runs/bsp", "runs/bsp025-asp"]
    for out, schedule in zip(runs, ["bsp", "bsp:0.25,asp"], strict=True):
        if not Path(out, "summary.json").exists():
            assert run(["train", *SHORT, "--schedule", schedule, "--out", out]) == 0
    return runs


@pytest.fixture(scope="module")
def ray_run(workspace: Path) -> str:
    """A short run relabelled as a Ray run: calibrate reads only its records, and a
    simulated run's records fit alike (tests/calibration does the same). Two small workers
    give it the 20 BSP and ASP rounds a fit needs."""
    job = ["--workers", "2", "--batch-size", "16", "--epochs", "1.5", "--schedule", "bsp:0.5,asp"]
    assert run(["train", *SHORT, *job, "--out", PLACEHOLDER_RUN]) == 0
    for name in ("config.json", "summary.json"):
        path = Path(PLACEHOLDER_RUN) / name
        path.write_text(json.dumps({**json.loads(path.read_text()), "runtime": "ray"}))
    return PLACEHOLDER_RUN


@pytest.fixture(scope="module")
def searched(workspace: Path) -> str:
    """The registry holds a searched job; returns its fingerprint."""
    assert run(["search", "--workers", "8", "--step-time-ms", "20", *SHORT, *TINY_SEARCH]) == 0
    with Registry() as registry:  # the pages' online train runs store jobs of their own
        [job] = [j for j in registry.overview() if j.trials]
    return job.job.fingerprint


def concrete(argv: list[str], fingerprint: str) -> list[str]:
    """The doc's placeholders replaced by what exists here."""
    argv = [fingerprint[:6] if w == PLACEHOLDER_FINGERPRINT else w for w in argv]
    expanded: list[str] = []
    for word in argv:
        expanded += sorted(glob.glob(word)) if "*" in word else [word]
    return expanded


@pytest.mark.parametrize("command", unique(OTHER))
def test_every_other_shown_command_runs(
    workspace: Path, finished_runs: list[str], ray_run: str, searched: str, command: str, capsys
) -> None:
    """report reads the runs above (runs/* as the shell expands it), calibrate the run the
    page names, jobs the registry the search filled."""
    argv = concrete(words(command), searched)
    if argv[0] == "search":  # tiny, on the simulator: a baseline and one fraction
        argv = [*argv, *SHORT, *TINY_SEARCH]
    code = run(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    if argv[0] == "report":
        assert all(Path(w).stat().st_size > 0 for w in argv if w.startswith("report."))
    if argv[0] == "calibrate":
        assert Path(argv[argv.index("-o") + 1]).read_text().strip()
    if argv[0] == "jobs" and "--show" in argv:
        assert searched[:6] in captured.out


def test_every_shown_command_is_run_or_listed_as_refused() -> None:
    shown = {c for _, c in SHOWN}
    covered = {c for _, c in TRAIN} | {c for _, c in OTHER} | set(REFUSED)
    assert shown == covered


def new_shell_env() -> dict[str, str]:
    """A new shell's environment after the README's set-up: the environment is not activated,
    so nothing of it is on PATH (whatever PATH this test process was started with)."""
    env_bin = os.path.realpath(os.path.join(sys.prefix, "bin"))
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    kept = [p for p in path if os.path.realpath(p) != env_bin] or ["/usr/bin", "/bin"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "PATH": os.pathsep.join(kept)}


PROGRAMS = sorted(
    {w for page in PAGES for w in shown_programs(page) if w.rsplit("/bin/", 1)[-1] in ENV_TOOLS}
)


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_shown_program_runs_in_a_new_shell(workspace: Path, program: str) -> None:
    """Each program the pages' commands start with is found, in a shell with the environment
    off PATH, as the environment's own (a bare `python` would find one without torch)."""
    found = subprocess.run(
        ["sh", "-c", 'command -v "$0"', program],
        cwd=workspace, env=new_shell_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert found.returncode == 0, f"{program}: not found in a new shell"
    # The directory it is in, resolved (the file may link to the base interpreter).
    where = Path(workspace, found.stdout.strip()).parent.resolve()
    assert where == Path(sys.prefix, "bin").resolve(), f"{program} runs from {where}"


def test_the_readme_command_runs_in_a_new_shell(workspace: Path) -> None:
    """The README's first command after the set-up, as a user types it in a new shell."""
    done = subprocess.run(
        ["sh", "-c", ".venv/bin/syncswitch --version"],
        cwd=workspace, env=new_shell_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("syncswitch "), done.stderr
