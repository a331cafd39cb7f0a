"""benchmarks/slow_network.py: its table (means over seeds against BSP's, time ratios, rollbacks
and what `online` chose) from rows as runs.jsonl holds them."""

from tests.benchmarks.test_harness import load

slow_network = load("slow_network")


def row(case: str, seed: int, accuracy: float, time_s: float, **extra):
    values = dict(
        table="study", case=case, cluster="wan-1g", workers=32, seed=seed, timing="SIMULATED",
        final_accuracy=accuracy, test_accuracy=accuracy, time_s=time_s, host_time_s=1.0,
        status="complete", rollbacks=0, protocols=["bsp"], switched_at=None, follower=None,
    )  # fmt: skip
    values.update(extra)
    return slow_network.Row(**values)


def test_the_table_compares_each_case_with_bsp_on_its_cluster_and_workers() -> None:
    chosen = {"protocol": "local-3", "ratio": 2.55}
    other = {"protocol": "local-3", "ratio": 2.6}
    rows = [
        row("bsp", 0, 0.96, 50.0), row("bsp", 1, 0.94, 50.0),  # mean 95%
        row("online", 0, 0.95, 20.0, switched_at=0.065, follower=chosen),
        row("online", 1, 0.93, 22.0, switched_at=0.07, follower=other),
        row("bsp:0.25,local-16 no ramp", 0, 0.90, 50.0, rollbacks=1),
        row("bsp", 0, 0.99, 10.0, workers=8),  # another group: not BSP's mean at 32
    ]  # fmt: skip
    text = slow_network.render(rows, "study")
    at_32 = text.split("### wan-1g, 32 workers")[1]
    online = next(line for line in at_32.splitlines() if line.startswith("| online "))
    cells = [c.strip() for c in online.split("|")[1:-1]]
    assert cells[1:4] == ["95.00% / 93.00%", "94.00%", "-1.00"]
    assert cells[4:6] == ["21.0", "0.42x"]
    assert cells[7] == "left at 0.065-0.070, local-3 (ratio 2.55-2.60)"
    no_ramp = next(line for line in at_32.splitlines() if "no ramp" in line)
    assert "| 1 |" in no_ramp and "-5.00" in no_ramp
    assert "### wan-1g, 8 workers" in text and "SIMULATED" in text
