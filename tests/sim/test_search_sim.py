"""The switch-point search on the simulator, and its decision kept apart from measured ones."""

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.recurring.auto import describe_source, resolve_auto_schedule
from syncswitch.registry import fingerprint

JOB = ["--workers", "4", "--mnist1d-samples", "1000", "--epochs", "2", "--batch-size", "16"]


def test_a_simulated_search_is_stored_and_reused_only_as_simulated(tmp_path, capsys) -> None:
    registry = str(tmp_path / "registry.db")
    argv = ["search", "--runtime", "sim", *JOB, "--repeats", "1", "--registry", registry]
    assert main([*argv, "--max-trials", "4"]) == 0
    captured = capsys.readouterr()
    assert "mean SIMULATED time s" in captured.out
    assert "SIMULATED time" in captured.err and "wall time" not in captured.err
    simulated = TrainConfig(
        runtime="sim", workers=4, mnist1d_samples=1000, epochs=2, batch_size=16, schedule="auto"
    )
    _, source = resolve_auto_schedule(simulated, registry)
    assert source["kind"] == "registry" and source["runtime"] == "sim"
    assert "SIMULATED decision #" in describe_source(source)
    assert "SIMULATED on cluster default" in describe_source(source)
    # The same job on Ray is another job: the simulated decision is never its decision.
    measured = TrainConfig(
        runtime="ray", workers=4, mnist1d_samples=1000, epochs=2, batch_size=16, schedule="auto"
    )
    assert fingerprint(measured) != fingerprint(simulated)
    _, source = resolve_auto_schedule(measured, registry)
    assert source["kind"] == "default"


def test_the_cluster_models_numbers_identify_a_simulated_job(tmp_path) -> None:
    one, other = tmp_path / "one.yaml", tmp_path / "other.yaml"
    one.write_text("network: {latency_ms: 0.1}\n")
    other.write_text("network: {latency_ms: 0.2}\n")
    same_as_one = tmp_path / "renamed.yaml"
    same_as_one.write_text("name: renamed\nnetwork: {latency_ms: 0.1}\n")

    def job(path):
        return fingerprint(TrainConfig(runtime="sim", cluster=str(path)))

    assert job(one) == job(same_as_one) != job(other)
