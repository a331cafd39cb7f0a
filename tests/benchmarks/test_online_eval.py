"""benchmarks/online_eval.py's goals check: the terms on the seed means, against the smallest
fixed share within 0.5 point of BSP, and the plateau's notes (not verdicts)."""

from tests.benchmarks.test_harness import load

online_eval = load("online_eval")


def row(case: str, seed: int, accuracy: float, time_s: float, share: float, workers: int = 16):
    return online_eval.EvalRow(
        table="sim", case=case, workers=workers, seed=seed, schedule=case,
        timing="SIMULATED", final_accuracy=accuracy, time_s=time_s, bsp_share=share,
    )  # fmt: skip


ROWS = [
    row("bsp", 0, 0.970, 36.0, 1.0), row("bsp", 1, 0.970, 36.0, 1.0),
    row("bsp:0.25,asp", 0, 0.960, 28.0, 0.25), row("bsp:0.25,asp", 1, 0.960, 28.0, 0.25),
    row("search", 0, 0.967, 29.0, 0.375), row("search", 1, 0.967, 29.0, 0.375),
    # the plateau: BSP's accuracy, but 1.07x the search share's time
    row("plateau", 0, 0.970, 31.0, 0.55), row("plateau", 1, 0.970, 31.0, 0.55),
]  # fmt: skip


def test_online_faster_but_below_the_plateau_fails_only_that_term_with_its_notes() -> None:
    rows = [*ROWS, row("online", 0, 0.969, 30.0, 0.45), row("online", 1, 0.967, 30.0, 0.45)]
    check = online_eval.goals(rows, 16)
    assert check.passed is False
    text = "\n".join(check.lines)
    assert "PASS: accuracy 96.80 vs BSP 97.00: -0.20 pt" in text
    assert "PASS: time 30.0 s = 1.034x search (share 0.375)'s 29.0 s" in text
    assert "FAIL: vs plateau 97.00 / 31.0 s: -0.20 pt, time 0.968x" in text
    assert "note: the plateau against the same terms: +0.00 pt, 1.069x the time (does not" in text
    assert "note: online minus plateau, seed by seed: -0.10, -0.30 pt" in text
    # On the goal's own terms online does beat it: it meets both, the plateau is too slow.
    assert check.passed_on_terms is True


def test_on_the_goals_terms_a_plateau_that_meets_both_still_has_to_be_outscored() -> None:
    quick = [r for r in ROWS if r.case != "plateau"] + [
        row("plateau", 0, 0.970, 30.0, 0.5), row("plateau", 1, 0.970, 30.0, 0.5),
    ]  # fmt: skip
    rows = [*quick, row("online", 0, 0.969, 29.5, 0.45), row("online", 1, 0.967, 29.5, 0.45)]
    check = online_eval.goals(rows, 16)
    assert check.passed is False and check.passed_on_terms is False
    text = online_eval.goals_text(rows, [16])
    assert "Overall: FAIL (not met at every worker count: 16)" in text
    assert "does not (or online's accuracy is higher): FAIL (not met at: 16)" in text


def test_both_readings_are_printed_under_the_goals() -> None:
    rows = [*ROWS, row("online", 0, 0.969, 30.0, 0.45), row("online", 1, 0.967, 30.0, 0.45)]
    text = online_eval.goals_text(rows, [16])
    assert "Overall: FAIL (not met at every worker count: 16)" in text
    assert text.endswith("or online's accuracy is higher): PASS at every worker count")


def test_online_above_the_plateau_passes() -> None:
    rows = [*ROWS, row("online", 0, 0.971, 30.0, 0.45), row("online", 1, 0.970, 30.0, 0.45)]
    check = online_eval.goals(rows, 16)
    assert check.passed is True
    assert "note: online minus plateau, seed by seed: +0.10, +0.00 pt" in "\n".join(check.lines)


def test_the_paired_table_takes_the_seeds_both_ran() -> None:
    rows = [
        row("online", 0, 0.969, 30.0, 0.45), row("online", 1, 0.967, 30.0, 0.45),
        row("online", 2, 0.960, 30.0, 0.45),  # no plateau run for seed 2: left out
        row("plateau", 0, 0.970, 31.0, 0.55), row("plateau", 1, 0.970, 31.0, 0.55),
    ]  # fmt: skip
    text = online_eval.paired_text(rows, [8, 16])
    assert text.startswith("SIMULATED")
    lines = [line for line in text.splitlines() if line.startswith("| 16")]
    # mean -0.20, standard error stdev(-0.1, -0.3) / sqrt(2) = 0.10
    assert lines == ["| 16 | 2 | -0.10, -0.30 | -0.20 | 0.10 | 0.968x |"]
    assert not [line for line in text.splitlines() if line.startswith("| 8 ")]  # no runs


def test_the_paired_table_against_bsp() -> None:
    rows = [
        row("online", 0, 0.969, 30.0, 0.45), row("online", 1, 0.967, 30.0, 0.45),
        row("bsp", 0, 0.970, 36.0, 1.0), row("bsp", 1, 0.970, 36.0, 1.0),
    ]  # fmt: skip
    text = online_eval.paired_text(rows, [16], against="bsp")
    assert text.startswith("SIMULATED; online minus BSP, final accuracy points, paired by seed")
    assert "| 16 | 2 | -0.10, -0.30 | -0.20 | 0.10 | 0.833x |" in text


def test_without_the_runs_the_goals_are_not_checked() -> None:
    rows = [row("online", 0, 0.969, 30.0, 0.45), row("bsp", 0, 0.970, 36.0, 1.0)]
    text = online_eval.goals_text(rows, [16])
    assert "16 workers: not enough runs to check" in text
    assert text.endswith("Overall: not checked (no worker count has the runs)")


def test_a_search_decision_is_reused_from_another_folder_and_marked(tmp_path) -> None:
    source = online_eval.RunLog(tmp_path / "eval" / "runs.jsonl")
    decision = online_eval.EvalRow(
        table="sim", case="search-decision", workers=16, seed=0, schedule="bsp:0.375,asp",
        timing="SIMULATED", bsp_share=0.375, extra={"trials": 10},
    )  # fmt: skip
    source.append(decision)
    source.append(row("online", 0, 0.969, 30.0, 0.45))  # not a decision: not taken
    log = online_eval.RunLog(tmp_path / "paired" / "runs.jsonl")
    runner = online_eval.Runner("sim", log, tmp_path, dataset=None)
    runner.use_search_decisions(source.path)
    runner.use_search_decisions(source.path)  # once only
    [taken] = [online_eval.row_from(online_eval.EvalRow, r) for r in log.read()]
    assert taken.schedule == "bsp:0.375,asp" and taken.extra["trials"] == 10
    assert taken.extra["reused_from"] == str(source.path)
    found = online_eval.run_search_at(runner, 16, repeats=2, resolution=1 / 64)
    assert found.schedule == "bsp:0.375,asp"  # no search is run
