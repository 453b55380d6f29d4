"""Rendering a report: the terminal tables, Markdown, CSV, the `report` command and the run's progress line."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import csv_text, markdown, print_report, results_table, write_report
from orchestrator.report.cells import interval
from orchestrator.report.progress import RunProgress, TimeLeftColumn
from orchestrator.report.render import CSV_COLUMNS
from orchestrator.report.views import device_rows, groups_rows, headline, results_rows, ship_rows, views
from tasks.models import WorkInfo
from tests.report_data import (
    calibrated_report,
    make_report,
    make_result,
    mixed_report,
    replay_report,
    replicated_report,
)

runner = CliRunner()
DATA = Path(__file__).parent / "data"


def text_of(report, **kwargs) -> str:
    console = Console(width=250, record=True)
    print_report(console, report, **kwargs)
    return console.export_text()


def test_table_shows_one_row_per_result():
    console = Console(width=200, record=True)
    console.print(
        results_table([make_result("seed.foo3", 2.5, noise=0.0), make_result("seed.bar", None, status="compile_error")])
    )
    text = console.export_text()
    assert "seed.foo3" in text and "2.50x" in text and "compile_error" in text


def test_terminal_report_puts_interruptions_and_warnings_first():
    report = make_report([make_result("a", 2.0)], complete=False, warnings=["nodes disagree on torch"])
    lines = text_of(report).splitlines()
    assert lines[0].startswith("INCOMPLETE: the run did not finish")
    assert lines[1] == "WARNING: nodes disagree on torch"
    assert lines[-1] == "1 results: 1 ok"


def test_terminal_report_shows_groups_ties_pass_rates_and_what_was_left_out():
    text = text_of(mixed_report())
    for expected in (
        "best configuration per group",
        "A100: configurations",
        "H100: configurations",
        "2/3 (67%)",  # inductor+cold on each model: the bar compile_error
        "left out: seed.bar (inductor:max-autotune: compile_error, inductor+cold: compile_error)",
        "left out: seed.outer (inductor: recompiled; not run under 2 of 3 configurations",
        "recompiled inside the timed window",
        "CUDA out of memory",
        "WARNING: nodes disagree on triton",
    ):
        assert expected in text, expected


def test_a_tie_is_said_in_words():
    report = make_report([make_result("a", 3.0, noise=0.05), make_result("a", 3.02, backend="aot_eager", noise=0.05)])
    assert "tie within noise" in text_of(report)


def test_achieved_throughput_sits_next_to_the_times():
    work = WorkInfo(flops=4 * 10**9, bytes=2 * 10**6)
    rows = results_rows([make_result("mm", 2.0, compiled_ms=1.0, noise=0.0, work=work), make_result("b", 2.0)])
    tflops, gbps = rows.headers.index("TFLOP/s"), rows.headers.index("GB/s")
    assert (rows.rows[0][tflops], rows.rows[0][gbps]) == ("4", "2")  # 4 GFLOP and 2 MB in 1 ms, compiled
    assert rows.rows[1][tflops] == "-"
    assert "TFLOP/s" not in results_rows([make_result("b", 2.0)]).headers
    tiny = results_rows([make_result("mm", 2.0, compiled_ms=1.0, noise=0.0, work=WorkInfo(flops=10**5))])
    assert tiny.rows[0][tiny.headers.index("TFLOP/s")] == "<0.001"


def test_markdown_has_the_summary_tables_and_bold_warnings():
    text = markdown(mixed_report())
    assert text.startswith("# mixed\n")
    assert "> **WARNING: nodes disagree on triton: 3.1.0, 3.2.0**" in text
    assert "**best configuration per group**" in text and "**A100: configurations**" in text
    assert "| config | pass rate | speedup (common) | 95% CI |" in text
    assert "| --- | ---: |" in text or "---:" in text
    tables = [line for line in text.splitlines() if line.startswith("|")]
    assert all(line.endswith("|") for line in tables)


def test_csv_is_one_flat_row_per_result():
    report = mixed_report()
    rows = list(csv.DictReader(io.StringIO(csv_text(report))))
    assert len(rows) == len(report.results)
    assert list(rows[0]) == CSV_COLUMNS
    first = rows[0]
    assert first["target"] == "seed.foo3" and first["params"] == '{"shape": [256, 256]}'
    assert first["device_model"] == "A100" and first["status"] == "ok"
    assert float(first["speedup_ci_low"]) < float(first["speedup"]) < float(first["speedup_ci_high"])
    failed = next(r for r in rows if r["status"] == "oom")
    assert failed["error_message"] == "CUDA out of memory" and failed["compiled_median_ms"] == ""
    outer = next(r for r in rows if r["target"] == "seed.outer")
    assert float(outer["compiled_tflops"]) > 0 and outer["recompiled"] == "True"


def test_report_command_renders_every_format(tmp_path):
    path = tmp_path / "r.json"
    write_report(mixed_report(), path)
    table = runner.invoke(app, ["report", str(path)])
    assert table.exit_code == 0, table.output
    assert "best configuration per group" in table.output
    md = runner.invoke(app, ["report", str(path), "--format", "markdown"])
    assert md.exit_code == 0 and md.output.startswith("# mixed")
    out = runner.invoke(app, ["report", str(path), "-f", "csv"])
    assert out.exit_code == 0 and out.output.splitlines()[0].startswith("experiment_id,target,params")
    assert len(out.output.splitlines()) == 1 + len(mixed_report().results)


def test_report_command_reads_a_journal(tmp_path):
    journal = tmp_path / "nightly.journal.jsonl"
    journal.write_text(make_result("a", 2.0).model_dump_json() + "\n")
    result = runner.invoke(app, ["report", str(journal)])
    assert result.exit_code == 0, result.output
    assert "INCOMPLETE" in result.output and "rebuilt from the journal nightly.journal.jsonl" in result.output


def test_report_command_exits_2_with_one_line_for_unreadable_input(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    result = runner.invoke(app, ["report", str(tmp_path / "bad.json")])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'bad.json'}: malformed JSON at line 1, column 2: ")


def test_progress_line_counts_failures_by_status():
    console = Console(width=200, record=True, force_terminal=False)
    progress = RunProgress(4, console)
    progress.start()
    progress.on_result(make_result("a", 2.0))
    progress.on_result(make_result("b", None, status="compile_error"))
    progress.on_result(make_result("c", None, status="timeout"))
    progress.on_result(make_result("d", None, status="compile_error"))
    progress.stop()
    assert progress.failures_text() == "[red]3 failed: 2 compile_error, 1 timeout[/red]"
    task = progress.progress.tasks[0]
    assert (task.completed, task.total) == (4, 4)


def test_time_left_is_the_average_pace_times_what_remains():
    console = Console(width=200, record=True)
    progress = RunProgress(10, console)
    task = progress.progress.tasks[0]
    column = TimeLeftColumn()
    assert column.render(task).plain == "time left: -"
    progress.progress.start_task(progress.task)
    task.start_time = time.monotonic() - 60  # done 2 in a minute: 8 left take 4 minutes
    progress.progress.update(progress.task, completed=2)
    assert column.render(task).plain in ("~4:00 left", "~4:01 left")


# ------------------------------------------------------------------------- replicates, calibration


def test_replicates_are_shown_only_when_a_report_has_them():
    rows = results_rows(replicated_report().results)
    column = rows.headers.index("replicate")
    assert rows.headers[column - 1] == "config"
    assert [row[column] for row in rows.rows] == ["r0", "r1", "r2", "r0", "r1", "r2", "r0", "r0"]
    assert "replicate" not in results_rows(mixed_report().results).headers
    text = markdown(replicated_report())
    assert "| target | config | replicate | eager ms |" in text
    assert "replicate" not in markdown(mixed_report())


def test_the_groups_table_says_which_interval_it_shows():
    report = replicated_report()
    rows = {
        row[0]: dict(zip(view.headers, row, strict=True)) for view in [groups_rows(report.summary)] for row in view.rows
    }
    foo3 = rows["seed.foo3"]
    best = report.summary.groups[0].best
    assert foo3["CI over"] == "3 runs" and foo3["95% CI"] == interval(best.ci_between)
    assert foo3["within-run CI"] == interval(best.ci_within) != foo3["95% CI"]
    assert foo3["GPU spread"] == f"{best.spread:.3f}x (2 GPUs)"
    assert foo3["verdict"] == "tie within noise"  # 2.1x against 2.0x over three runs each
    assert (rows["seed.bar"]["CI over"], rows["seed.bar"]["GPU spread"]) == ("one run", "-")
    text = text_of(report)
    assert "95% CI over k runs: a Student t-interval on the log speedups" in text
    assert "GPU spread: the fastest GPU's speedup over the slowest's" in text
    plain = groups_rows(mixed_report().summary)
    assert "CI over" not in plain.headers and "GPU spread" not in plain.headers and not plain.notes


def test_the_device_table_says_how_many_groups_are_between_runs():
    report = replicated_report()
    (device,) = report.summary.devices
    rows = device_rows(device)
    inductor = dict(zip(rows.headers, rows.rows[0], strict=True))
    mean = device.configs[0].common
    assert inductor["CI over"] == "runs in 1 of 2 groups" and inductor["95% CI"] == interval(mean.ci)
    assert inductor["within-run CI"] == interval(mean.ci_within) and inductor["GPU spread"] == f"{mean.spread:.3f}x"
    assert inductor["pass rate"] == "4/4 (100%)"  # every replicate counted
    assert any("every replicate counted" in note for note in rows.notes)


def test_unchecked_results_are_shown_apart_from_passes():
    never_checked = make_result("b", 2.0)
    never_checked.correct = None
    report = make_report([make_result("a", 2.0), never_checked])
    rows = device_rows(report.summary.devices[0])
    row = dict(zip(rows.headers, rows.rows[0], strict=True))
    assert (row["pass rate"], row["unchecked"]) == ("1/2 (50%)", "1")
    assert headline(report)[-1] == "2 results: 2 ok (1 unchecked)"
    assert "unchecked" not in device_rows(mixed_report().summary.devices[0]).headers
    assert headline(mixed_report())[-1] == "20 results: 15 ok, 4 compile_error, 1 oom"


def test_a_summary_stored_before_passes_were_counted_shows_its_ok_count():
    report = make_report([make_result("a", 2.0), make_result("b", None, status="crashed")])
    stored = report.summary.devices[0].configs[0].model_copy(update={"passed": None, "unchecked": None})
    report.summary.devices[0].configs[0] = stored
    rows = device_rows(report.summary.devices[0])
    assert rows.rows[0][rows.headers.index("pass rate")] == "1/2 (50%)"


def test_csv_has_a_replicate_column_only_with_replicates():
    rows = list(csv.DictReader(io.StringIO(csv_text(replicated_report()))))
    assert list(rows[0])[:3] == ["experiment_id", "replicate", "target"]
    assert [r["replicate"] for r in rows] == ["0", "1", "2", "0", "1", "2", "0", "0"]
    assert "replicate" not in csv_text(mixed_report()).splitlines()[0].split(",")


def test_calibration_is_a_table_and_a_slow_device_marks_its_results():
    report = calibrated_report()
    text = text_of(report)
    for expected in (
        "calibration",
        "node-1/gpu1",
        "fp32_tflops 51.2, bf16_tflops 740, copy_gbps 2890",
        "fp32_tflops 46.1 is 10.0% below the H100 median 51.2 (of 1 other)",
        "slow device",
    ):
        assert expected in text, expected
    rows = results_rows(report.results, calibration=report.environment.calibration)
    notes = {row[0]: row[rows.headers.index("notes")] for row in rows.rows}
    assert notes == {"seed.foo3": "", "seed.bar": "slow device"}
    md = markdown(report)
    assert "**calibration**" in md and "| node-1/gpu1 | H100 |" in md and "slow device" in md
    table = [v for v in views(report) if v.title == "calibration"]
    assert [row[3] for row in table[0].rows] == ["", "slow"]
    lines = list(csv.DictReader(io.StringIO(csv_text(report))))
    assert [(r["calibration"], r["slow"]) for r in lines] == [("node-1/gpu0", "False"), ("node-1/gpu1", "True")]


def test_no_calibration_no_table_and_no_marker():
    report = mixed_report()
    assert all(v.title != "calibration" for v in views(report))
    assert "slow device" not in text_of(report) and "calibration" not in csv_text(report).splitlines()[0]


def test_report_command_prints_the_between_run_interval(tmp_path):
    path = tmp_path / "r.json"
    write_report(replicated_report(), path)
    result = runner.invoke(app, ["report", str(path)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "CI over" in result.output and "3 runs" in result.output and "within-run CI" in result.output


def test_every_replicated_configuration_shows_its_between_run_interval_ranked_first_or_not():
    from orchestrator.report.views import replicates_rows

    from .report_data import make_report, make_result, replicated_report

    rows = replicates_rows(replicated_report().summary)
    at = {h: i for i, h in enumerate(rows.headers)}
    shown = [(r[at["target"]], r[at["config"]], r[at["runs"]]) for r in rows.rows]
    assert shown == [("seed.foo3", "inductor", "3"), ("seed.foo3", "aot_eager", "3")]
    over, within = at["95% CI over runs"], at["within-run CI"]
    assert all(r[over] != "-" and r[over] != r[within] for r in rows.rows)  # over the runs, beside the within-run
    assert rows.notes
    assert replicates_rows(make_report([make_result("seed.foo", 2.0)]).summary).rows == []  # no replicates: no table


def test_what_to_ship_follows_the_groups_table_one_row_a_group():
    report = mixed_report()
    titles = [view.title for view in views(report)]
    assert titles[:2] == ["best configuration per group", "what to ship"]
    rows = ship_rows(report.summary)
    assert rows.headers == [
        "device", "target", "ship", "lower bound", "break-even calls", "compile s", "reason",
        "every configuration", "Pareto set",
    ]  # fmt: skip
    assert len(rows.rows) == len(report.summary.groups)
    by_target = {(row[0], row[1]): row for row in rows.rows}
    foo3 = by_target["A100", "seed.foo3 shape=[256, 256]"]
    assert foo3[2:4] == ["inductor:max-autotune", "2.08x"]
    assert foo3[4] == "27,383 (warm)" and foo3[5] == "30.00"
    assert foo3[6] == "highest lower 95% bound of speedup, above 1.0"
    assert foo3[7].startswith("inductor >=1.98x, 20,125 calls; inductor:max-autotune >=2.08x, 27,383 calls; ")
    assert foo3[7].endswith("inductor+cold: the cold compile of inductor (charged to it)")
    assert foo3[8] == "inductor, inductor:max-autotune"
    bar = by_target["A100", "seed.bar"]
    assert bar[2:8] == [
        "eager", "-", "-", "-", "no configuration is faster beyond noise",
        "inductor >=0.50x, never pays; inductor:max-autotune: compile_error; inductor+cold: compile_error",
    ]  # fmt: skip
    assert by_target["H100", "seed.foo"][6] == "every configuration failed (oom)"
    both = "seed.foo3 shape=[256, 256], seed.foo3 shape=[4096, 4096]"  # on each device model: said once
    charged = "inductor is charged the compile latency of inductor+cold, the same configuration compiled cold"
    assert f"{both}: {charged}" in rows.notes
    assert sum("peak memory not measured" in note for note in rows.notes) == 1
    alike = ship_rows(replicated_report().summary).notes  # both groups have the note: said once, for every group
    assert "every group: peak memory not measured for any configuration: the Pareto set is compared on the other " \
        "figures" in alike  # fmt: skip
    assert "**what to ship**" in markdown(report) and "what to ship" in text_of(report)


def test_what_to_ship_weighed_over_calls_shows_the_time_for_them_and_the_replay_table_follows():
    report = replay_report()
    rows = ship_rows(report.summary)
    assert "weighed over" in rows.headers and "time for the calls" in rows.headers
    (row,) = rows.rows
    cell = dict(zip(rows.headers, row, strict=True))
    assert cell["ship"] == "inductor+mark_dynamic=0:1" and cell["lower bound"] == "-"
    assert cell["weighed over"] == "1,000 calls" and cell["time for the calls"] == "2.27 s vs eager 3.80 s"
    assert cell["break-even calls"] == "440 (warm: hit, 1 compile in the replay)"
    assert cell["reason"] == "least time for 1,000 calls, compile included"
    titles = [view.title for view in views(report)]
    assert titles[:3] == ["best configuration per group", "what to ship", "shape-traffic replay"]
    replayed = next(view for view in views(report) if view.title == "shape-traffic replay")
    assert any("inductor+mark_dynamic=0:1 serves them fastest" in note for note in replayed.notes)
    assert "shape-traffic replay" not in [view.title for view in views(mixed_report())]


def test_a_configuration_that_pays_at_once_says_one_call():
    (row,) = ship_rows(make_report([make_result("t", 3.0, noise=0.0, compile_s=0.002)]).summary).rows
    assert row[-2] == "inductor >=3.00x, 1 call" and row[3] == "1 (warm)"


def test_a_summary_stored_before_decisions_has_no_what_to_ship_table():
    report = mixed_report()
    for group in report.summary.groups:
        group.decision = None
    assert "what to ship" not in [view.title for view in views(report)]


def test_the_seed_sweeps_table_keeps_its_verdicts_on_one_line_in_a_log():
    """`compilebench report` of a seed sweep run on this project's CPU machine (as `run` prints
    it), its output a pipe: at the 160 columns logs used to get, rich shrank every one of the
    table's 14 columns to about ten and split "cold: miss" over two lines."""
    out = runner.invoke(app, ["report", str(DATA / "seed-cpu.json")])
    assert out.exit_code == 0, out.output
    lines = out.output.split("best configuration per group")[0].splitlines()  # the results table
    for verdict in ("cold: miss", "warm: bypass", "compile_error", "inductor+cold"):
        assert any(verdict in line for line in lines), verdict
