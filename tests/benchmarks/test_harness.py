"""benchmarks/harness.py: the runs.jsonl log (append as you go, torn last line, --keep),
table rendering, timing labels, the shared arguments; and every script's --help."""

import argparse
import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
# Modules the scripts import (not scripts themselves).
LIBRARIES = {"harness", "steady", "wide_models"}
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem not in LIBRARIES)


def load(name: str):
    # The scripts import the harness as `harness`, from the benchmarks folder.
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


harness = load("harness")


@dataclasses.dataclass
class Row:
    case: str
    seed: int
    final: float | None = None


# -- runs.jsonl ----------------------------------------------------------------------------------


def test_rows_are_on_disk_as_each_is_appended(tmp_path):
    log = harness.RunLog(tmp_path / "out" / "runs.jsonl")
    assert log.read() == []  # no file yet
    log.append({"case": "bsp", "seed": 0})
    assert log.read() == [{"case": "bsp", "seed": 0}]  # readable before the script ends
    log.append(Row("asp", 1, 0.5))
    assert harness.RunLog(log.path).read()[-1] == {"case": "asp", "seed": 1, "final": 0.5}


def test_a_line_torn_by_a_crash_is_ignored_then_cut_off(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"case": "bsp", "seed": 0}\n{"case": "asp", "se')  # killed mid-write
    log = harness.RunLog(path)
    assert log.read() == [{"case": "bsp", "seed": 0}]
    log.append({"case": "asp", "seed": 0})
    assert path.read_text() == '{"case": "bsp", "seed": 0}\n{"case": "asp", "seed": 0}\n'


def test_a_whole_last_row_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"seed": 0}\n{"seed": 1}')  # edited by hand: no newline at the end
    log = harness.RunLog(path)
    assert log.read() == [{"seed": 0}, {"seed": 1}]
    log.append({"seed": 2})
    assert [r["seed"] for r in log.read()] == [0, 1, 2]


def test_a_bad_complete_line_is_a_one_line_error_naming_it(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"case": "bsp"}\nnot json\n')
    with pytest.raises(ValueError, match=r"runs.jsonl:2: not a JSON line"):
        harness.RunLog(path).read()


def test_keep_skips_the_runs_already_recorded(tmp_path):
    log = harness.RunLog(tmp_path / "runs.jsonl")
    for case, seed in (("bsp", 0), ("bsp", 1), ("asp", 0)):
        log.append(Row(case, seed))
    done = log.keys(lambda r: (r["case"], r["seed"]))
    todo = [(c, s) for c in ("bsp", "asp") for s in (0, 1) if (c, s) not in done]
    assert todo == [("asp", 1)]


def test_rows_read_back_as_dataclasses_ignore_keys_they_do_not_have(tmp_path):
    row = harness.row_from(Row, {"case": "bsp", "seed": 2, "final": 0.9, "older": "x"})
    assert row == Row("bsp", 2, 0.9)


def test_clear_starts_the_log_afresh(tmp_path):
    log = harness.RunLog(tmp_path / "runs.jsonl")
    log.append({"a": 1})
    log.clear()
    assert log.read() == []


def test_results_files_are_replaced_whole(tmp_path):
    harness.save_json(tmp_path / "r" / "runs.json", {"rows": [Row("bsp", 0)], "p": Path("/x")})
    assert (tmp_path / "r" / "runs.json").read_text() == (
        '{\n "rows": [\n  {\n   "case": "bsp",\n   "seed": 0,\n   "final": null\n  }\n ],\n'
        ' "p": "/x"\n}\n'
    )
    assert not list((tmp_path / "r").glob("*.tmp"))


# -- tables --------------------------------------------------------------------------------------


def test_a_markdown_table_is_header_separator_and_rows():
    lines = harness.markdown_table(("a", "b"), [(1, "x"), ("2.50", "-")])
    assert lines == ["| a | b |", "|---|---|", "| 1 | x |", "| 2.50 | - |"]
    assert harness.markdown_table(("a",), []) == ["| a |", "|---|"]


def test_cells_and_medians_skip_missing_figures():
    assert harness.cell(None, ".2f") == "-"
    assert harness.cell(1234.5, ",.0f") == "1,234"
    rows = [{"a": 1.0, "b": None}, {"a": 3.0, "b": 4.0}, {"a": 2.0, "b": None}]
    assert harness.medians(rows) == {"a": 2.0, "b": 4.0}
    assert harness.ratio(3.0, 0.0) is None


def test_a_title_must_say_how_its_times_were_taken():
    title = "8 workers, EMULATED 20 ms steps"
    assert harness.check_timing(title, harness.Timing.EMULATED) == title
    harness.check_timing("SIMULATED seconds", harness.Timing.SIMULATED)
    harness.check_timing("No emulation, Real compute", harness.Timing.REAL)
    both = (harness.Timing.EMULATED, harness.Timing.SIMULATED)
    harness.check_timing("Ray: EMULATED; simulator: SIMULATED", *both)
    with pytest.raises(ValueError, match="EMULATED"):
        harness.check_timing("8 workers, emulated 20 ms steps", harness.Timing.EMULATED)
    with pytest.raises(ValueError, match="real"):
        harness.check_timing("surreal figures", harness.Timing.REAL)
    with pytest.raises(ValueError, match="SIMULATED"):
        harness.check_timing("EMULATED on Ray", harness.Timing.EMULATED, harness.Timing.SIMULATED)


# -- arguments -----------------------------------------------------------------------------------


def test_the_shared_options_parse_as_every_script_expects():
    cli = harness.parser("First line.\n\nMore text.")
    harness.add_out(cli, "benchmarks/results/x")
    harness.add_seeds(cli, 2)
    harness.add_keep(cli)
    harness.add_repeats(cli, 3)
    harness.add_quick(cli, "small")
    harness.add_table(cli)
    args = cli.parse_args(["--seeds", "1", "--keep"])
    assert args.out == Path("benchmarks/results/x") and args.seeds == 1 and args.keep
    assert args.repeats == 3 and not args.quick and not args.table
    assert cli.description == "First line."
    assert harness.args_record(args)["out"] == "benchmarks/results/x"
    assert harness.comma_list("8,16,", int) == [8, 16]


def test_a_parser_with_an_epilog_keeps_the_docstring_as_written():
    cli = harness.parser("First.\n\nUsage:\n    python x.py\n", epilog=True)
    assert cli.description == "First." and "    python x.py" in cli.epilog
    assert isinstance(cli.formatter_class(prog="x"), argparse.RawDescriptionHelpFormatter)


# -- the scripts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_answers_help(name, monkeypatch, capsys):
    script = load(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as done:
        script.main()
    assert done.value.code == 0
    assert "--" in capsys.readouterr().out


def test_benchmarks_read_run_directories_only_through_the_rundir_module():
    spelt = re.compile(r'"(final_accuracy|config\.json|summary\.json)"')
    found = [
        f"{path.name}:{n}"
        for path in BENCHMARKS.glob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if spelt.search(line)
    ]
    assert found == []


# -- rows from a real run directory (a small simulated run) --------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from syncswitch.config import TrainConfig
    from syncswitch.runtime.train import train

    out = tmp_path_factory.mktemp("run") / "run"
    config = TrainConfig(
        runtime="sim",
        workers=2,
        schedule="bsp:0.5,asp",
        epochs=1.0,
        mnist1d_samples=1000,
        eval_every=0.5,
        checkpoint_every=0.0,
        progress=False,
        out=str(out),
    )
    train(config)
    return out


def test_the_scripts_rows_are_built_from_a_typed_summary(run_dir):
    summary = harness.read_summary(run_dir)
    assert harness.read_config(run_dir)["workers"] == 2

    reference = load("reference")
    args = argparse.Namespace(workers=2, step_time_ms=20.0)
    row = reference.measure(reference.Case("bsp:0.5,asp", "scale"), 0, summary, run_dir, args)
    assert row.final_accuracy == summary.final_value and len(row.switch_overhead_s) == 1
    assert row.switch_gap_s is not None and row.asp_efficiency is not None
    stopped = reference.stopped_row(reference.CASES[0], 0, run_dir, "stalled; detail")
    assert stopped.stopped == "stalled" and stopped.samples == summary.samples

    faults = load("faults")
    assert faults.progress(run_dir, summary.samples) == 1.0
    assert faults.progress(run_dir / "absent", 10) == 0.0
    fault = faults.scenario_row("clean", summary, [], faults.describe_failures(summary))
    assert fault.sent == fault.applied + sum(fault.dropped.values()) and fault.recovery == "-"

    validation = load("sim_validation")
    assert validation._earlier(run_dir) == summary
    assert validation._earlier(run_dir / "absent") is None
