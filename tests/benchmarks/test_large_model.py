"""benchmarks/large_model.py: the models are the sizes its tables name, and samples/s is read
from a run's cumulative sample counts (a local phase's message stands for H steps)."""

import pytest

from tests.benchmarks.test_harness import load

large_model = load("large_model")
wide_models = load("wide_models")


def test_the_models_have_the_parameter_counts_the_tables_name() -> None:
    assert wide_models.parameter_count(wide_models.mlp17m()) == 16_887_818
    assert wide_models.parameter_count(wide_models.mlp100m()) == 100_990_986


def rows(times_and_totals):
    return [{"time_s": str(t), "samples": str(n)} for t, n in times_and_totals]


def test_samples_per_s_counts_each_message_as_the_samples_it_carries() -> None:
    # A local-4 run of 2 workers at batch 32: each message carries 128 samples, one message
    # every 0.5 s, so 256 samples/s; counting rows x batch would give 64.
    local = rows((0.5 * k, 128 * k) for k in range(1, 41))
    assert large_model.steady_samples_per_s(local) == pytest.approx(256, rel=0.03)


def test_samples_per_s_of_bsp_rounds_sharing_a_stamp() -> None:
    # BSP with 4 workers: 4 rows per round share its time stamp and total.
    bsp = rows((0.25 * r, 128 * r) for r in range(1, 41) for _ in range(4))
    assert large_model.steady_samples_per_s(bsp) == pytest.approx(512, rel=0.03)


def test_a_protocol_is_compared_with_the_bsp_on_its_own_data_path() -> None:
    assert large_model.same_path_bsp("local-4") == "bsp"
    assert large_model.same_path_bsp("local-4-socket") == "bsp-socket"
    assert large_model.same_path_bsp("asp") == "bsp"
    assert large_model.same_path_bsp("bsp-socket") is None
    assert large_model.same_path_bsp("bsp-bf16") == "bsp"
    assert large_model.same_path_bsp("bsp-bf16-socket") == "bsp-socket"
    assert large_model.same_path_bsp("ddp") is None


def test_the_ddp_peer_s_emulated_link_moves_what_a_ring_all_reduce_moves() -> None:
    throughput = load("throughput")
    # 4 ranks, 100 MB at 1 Gbit/s: 6 steps of 25 MB (0.2 s each) and 6 latencies.
    assert throughput.ring_link_s(100_000_000, 4, 1.0, 0.5) == pytest.approx(6 * 0.2005)
    assert throughput.ring_link_s(100_000_000, 1, 1.0, 0.5) == 0.0  # nothing to exchange
    # Each rank moves 2 (n-1)/n of the bytes each way: less than a server's push and pull.
    push_pull_s = 2 * 100_000_000 * 8 / 1e9
    assert throughput.ring_link_s(100_000_000, 8, 1.0, 0.0) < push_pull_s
