"""`syncswitch calibrate` (syncswitch.calibration): a cluster model fitted to a run's records."""

import json
from pathlib import Path

import pytest
import yaml

from syncswitch.calibration import calibrate, cluster_yaml
from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.core.cluster.model import parse_cluster
from syncswitch.errors import ConfigError
from syncswitch.runtime.train import train

JOB = dict(
    runtime="sim", workers=2, epochs=20.0, mnist1d_samples=400, batch_size=16,
    schedule="bsp:0.5,asp", eval_every=0.5, progress=False,
)  # fmt: skip


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("calibration") / "run"
    train(TrainConfig(**JOB, out=str(out)))
    return out


def test_a_simulated_run_is_refused_in_one_line(sim_run: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(ConfigError, match="is a simulated run; calibrate from a run on Ray"):
        calibrate(sim_run)
    assert main(["calibrate", str(sim_run), "-o", str(tmp_path / "c.yaml")]) == 2
    assert "is a simulated run" in capsys.readouterr().err


def as_if_ray(sim_run: Path, tmp_path: Path) -> Path:
    """The simulated run's records standing in for a Ray run's: relabelled, they fit alike."""
    run = tmp_path / "as-if-ray"
    run.mkdir(parents=True)
    for path in sim_run.iterdir():
        if path.is_file():
            (run / path.name).write_bytes(path.read_bytes())
    for name in ("config.json", "summary.json"):
        data = json.loads((run / name).read_text())
        data["runtime"] = "ray"
        (run / name).write_text(json.dumps(data))
    return run


def test_a_fitted_model_is_a_cluster_file_the_simulator_reads(sim_run: Path, tmp_path) -> None:
    run = as_if_ray(sim_run, tmp_path)
    model, report = calibrate(run, refine=True)
    assert "fitted by replaying the runs" in model.notes["fitted"]
    assert set(report["measured_s_per_step"]) == {"bsp", "asp"}
    assert len(report["refine_rounds"]) > 0 and model.compute.step_time_ms > 0
    assert parse_cluster(yaml.safe_load(cluster_yaml(model))) == model


def test_no_refine_does_not_claim_a_refinement(sim_run: Path, tmp_path: Path) -> None:
    model, report = calibrate(as_if_ray(sim_run, tmp_path), refine=False)
    assert report["refine_rounds"] == []
    assert "fitted by replaying" not in model.notes["fitted"]
    assert "not refined" in model.notes["fitted"]


def doctored(run: Path, wall_factor: float) -> Path:
    """The run as if its wall time had been `wall_factor` times what it was."""
    data = json.loads((run / "summary.json").read_text())
    data["wall_time_s"] *= wall_factor
    (run / "summary.json").write_text(json.dumps(data))
    return run


def test_several_runs_are_fitted_together_and_each_replay_is_reported(
    sim_run: Path, tmp_path: Path, capsys
) -> None:
    first = as_if_ray(sim_run, tmp_path / "a")
    second = as_if_ray(sim_run, tmp_path / "b")
    output = tmp_path / "c.yaml"
    code = main(["calibrate", str(first), str(second), "-o", str(output), "--cores", "2"])
    out = capsys.readouterr().out
    for run in (first, second):
        for figure in ("wall", "bsp", "asp"):
            assert f"{run.name} (2 workers) {figure}: measured" in out
    model = parse_cluster(yaml.safe_load(output.read_text())) if code == 0 else None
    assert code == 0, out
    assert model is not None and model.nodes.cores == 2 and model.nodes.servers_with_workers
    assert "replay_error" in model.notes


def test_a_model_that_misses_its_own_run_is_refused_unless_forced(
    sim_run: Path, tmp_path: Path, capsys
) -> None:
    run = doctored(as_if_ray(sim_run, tmp_path), 2.0)  # twice as long as anything explains
    output = tmp_path / "c.yaml"
    argv = ["calibrate", str(run), "-o", str(output), "--no-refine", "--cores", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("syncswitch: fitting")  # the progress line
    assert "the model's replay misses as-if-ray wall by -" in err[1]
    assert "limit 5%" in err[1] and "not written (--force writes it)" in err[1]
    assert not output.exists()
    assert main([*argv, "--force"]) == 0
    assert parse_cluster(yaml.safe_load(output.read_text())).nodes.cores == 2


def test_a_bad_core_count_is_one_line(sim_run: Path, tmp_path: Path, capsys) -> None:
    argv = ["calibrate", str(sim_run), "-o", str(tmp_path / "c.yaml"), "--cores", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == "syncswitch: error: --cores 0 is not allowed; it must be in 1..65536"


def test_many_runs_with_long_names_fit_under_a_name_the_model_may_have(
    sim_run: Path, tmp_path: Path
) -> None:
    # Five ~45-character names: the name listing them all was longer than a cluster file's
    # name may be, so the replay refused the cluster.yaml calibrate had just written.
    runs = []
    for index in range(5):
        run = as_if_ray(sim_run, tmp_path / str(index))
        runs.append(run.rename(run.parent / f"{index}-{'long-run-directory-name-' * 2}x"))
    model, report = calibrate(runs, refine=False)
    assert len(report["replays"]) == 5
    assert model.name.startswith(f"calibrated from {runs[0].name}") and "more" in model.name
    assert parse_cluster(yaml.safe_load(cluster_yaml(model))).name == model.name


def test_a_time_in_updates_csv_that_is_not_a_number_is_one_line(
    sim_run: Path, tmp_path: Path, capsys
) -> None:
    run = as_if_ray(sim_run, tmp_path)
    lines = (run / "updates.csv").read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[5].split(",")
    cells[header.index("time_s")] = "soon"
    lines[5] = ",".join(cells)
    (run / "updates.csv").write_text("\n".join(lines) + "\n")
    assert main(["calibrate", str(run), "-o", str(tmp_path / "c.yaml"), "--cores", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in err[-1] and "'soon' is not a finite number" in err[-1], err
    assert not (tmp_path / "c.yaml").exists()


def test_a_resumed_run_is_refused_in_one_line(sim_run: Path, tmp_path: Path, capsys) -> None:
    # Its times span the restart: the gap used to be fitted as jitter (sigma 26.6 vs 1.04).
    run = as_if_ray(sim_run, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    summary["reliability"]["failures"].append({"kind": "resumed", "checkpoint": {}})
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["calibrate", str(run), "-o", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "was resumed after a stop, and its times span the restart" in err


def test_a_failed_replay_never_names_a_temporary_file(
    sim_run: Path, tmp_path: Path, monkeypatch
) -> None:
    import tempfile

    from syncswitch.calibration import replay as replay_module

    def fails(config, **_parts):
        raise ConfigError(f"cannot write {config.out}/metrics.csv (read {config.cluster})")

    monkeypatch.setattr(replay_module, "train", fails)
    with pytest.raises(ConfigError) as error:
        calibrate(as_if_ray(sim_run, tmp_path), refine=False)
    message = str(error.value)
    assert "replaying" in message and "the replay/metrics.csv" in message
    assert "the fitted cluster model" in message and tempfile.gettempdir() + "/tmp" not in message


@pytest.mark.parametrize(
    ("actors", "shared"),
    [
        ({"data_plane_shared_memory": {"connections": 4, "declined": {}}}, True),
        ({"data_plane_shared_memory": {"connections": 0, "declined": {}}}, False),
        ({"data_plane_shared_memory": {"connections": "4"}}, False),  # not a count
        ({}, False),  # a run from before shared memory
        (None, False),  # no actors.json
        ("[1, 2", False),  # not JSON: read as no shared memory, never a traceback
    ],
)
def test_the_fitted_nodes_pass_values_through_shared_memory_as_the_runs_did(
    sim_run: Path, tmp_path: Path, actors, shared: bool
) -> None:
    run = as_if_ray(sim_run, tmp_path)
    if actors is not None:
        text = actors if isinstance(actors, str) else json.dumps(actors)
        (run / "actors.json").write_text(text)
    model, _ = calibrate(run, refine=False)
    assert model.nodes.shared_memory is shared


def test_runs_over_an_emulated_link_fit_that_link_and_replay_under_it(
    sim_run: Path, tmp_path: Path
) -> None:
    run = as_if_ray(sim_run, tmp_path)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "link_gbps": 0.5, "link_latency_ms": 1}))
    (run / "actors.json").write_text(json.dumps({"data_plane_shared_memory": {"connections": 2}}))
    # The replays run the job under the model, whose network is the link (not the flags too).
    model, report = calibrate(run, refine=False)
    assert model.network.worker_bandwidth_gbps == 0.5
    assert model.network.latency_ms > 1.0  # the link's, and the local transport's start
    assert model.nodes.shared_memory is False  # the values crossed the link
    assert model.network.server_bandwidth_gbps == 10_000.0  # no servers' link emulated
    assert report["replays"] and "emulated links" in model.notes["network"]


def test_real_gradients_on_the_cpu_take_their_compute_cpu_as_the_step() -> None:
    """A CPU "device": the step is the recorded compute CPU, the cores' queue adding the rest;
    an emulated step or a GPU keeps the step time the run measured."""
    from types import SimpleNamespace

    from syncswitch.calibration.runs import computed_on_cpu

    def run(config: dict, device: str | None):
        resources = {"worker": {"device": device}} if device else {}
        summary = SimpleNamespace(placement={"resources": resources})
        return SimpleNamespace(run=SimpleNamespace(config=config, summary=summary))

    assert computed_on_cpu([run({}, "cpu"), run({"step_time_ms": 0.0}, "cpu")])
    assert not computed_on_cpu([run({}, "cpu"), run({"step_time_ms": 20.0}, "cpu")])
    assert not computed_on_cpu([run({}, "cuda")])
    assert not computed_on_cpu([run({}, None)])  # a summary that does not say


def test_runs_over_an_emulated_link_calibrate_to_that_link_and_hostile_values_to_none() -> None:
    from types import SimpleNamespace

    from syncswitch.calibration.runs import emulated_link

    def run(config: dict):
        return SimpleNamespace(run=SimpleNamespace(config=config))

    linked = {"link_gbps": 1.0, "link_latency_ms": 2}
    assert emulated_link([run(linked), run(dict(linked))]) == (1.0, 2.0, 0.0)
    assert emulated_link([run({}), run({"link_gbps": 0.0})]) is None
    for hostile in ("1", float("nan"), float("inf"), -3.0, True, None, [1]):
        assert emulated_link([run({"link_gbps": hostile})]) is None
        assert emulated_link([run({"server_link_gbps": hostile})]) is None
    assert emulated_link([run({"link_gbps": 1, "link_latency_ms": "x"})]) == (1.0, 0.0, 0.0)
    # The servers' links alone: the workers' side unlimited (0), and no latency without it.
    servers = {"server_link_gbps": 2.0, "link_latency_ms": 5}
    assert emulated_link([run(servers)]) == (0.0, 0.0, 2.0)
    with pytest.raises(ConfigError, match=r"servers' 2 Gbit/s"):
        emulated_link([run(servers), run({**linked, "server_link_gbps": 1.0})])
    with pytest.raises(ConfigError, match=r"different emulated links \(no link, 1 Gbit/s"):
        emulated_link([run(linked), run({})])
