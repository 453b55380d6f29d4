"""History: series across reports in time order, change points with p-values, the CLI and the HTML page."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ruptures as rpt
from PIL import Image
from typer.testing import CliRunner

import orchestrator.report.history as history_module
from orchestrator.cli import app
from orchestrator.report import Report, write_report
from orchestrator.report.changepoints import (
    ALPHA,
    MIN_SEGMENT,
    binary_segmentation,
    change_points,
    detectable,
    pull_in,
    relative_noise,
    relative_noises,
    search_p,
)
from orchestrator.report.history import (
    MIN_CHANGE,
    History,
    build_history,
    history_of,
    markdown,
    min_changes,
    value_text,
)
from orchestrator.report.history_html import render_history_html
from tasks.models import Result
from tests.report_data import make_report, make_result
from tests.test_html import CHROMIUM, _dom_and_screenshot, needs_chromium
from tests.test_report_layering import cli_without_ray_or_torch

runner = CliRunner()

STEP_AT = 6  # the first report after the step in the step history
BEFORE, AFTER = 2.0, 1.8  # speedups either side of it: -10%
NOISE = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01, 0.99, 0.995, 1.005, 1.0, 0.99]  # relative, one a report


# ------------------------------------------------------------------------------------------- helpers


def result(speedup: float | None = 2.0, replicate: int = 0, **kwargs: Any) -> Result:
    """A result without sample noise (its speedup is exact), as ``replicate`` of its experiment."""
    phase = kwargs.pop("phase", "inference")
    r = make_result(kwargs.pop("target", "seed.foo3"), speedup, noise=0.0, **kwargs)
    return r.model_copy(update={"replicate": replicate, "phase": phase})


def report(results: list[Result], day: int, name: str = "nightly") -> Report:
    """A report created on 2026-01-``day`` (UTC)."""
    return make_report(results, name=name).model_copy(update={"created_at": f"2026-01-{day:02d}T03:00:00+00:00"})


def write(folder: Path, name: str, rep: Report) -> Path:
    path = folder / name
    write_report(rep, path)
    return path


def step_history(folder: Path) -> list[Path]:
    """Twelve nightly reports of one experiment whose compiled side is 10% slower from the seventh on."""
    paths = []
    for i, noise in enumerate(NOISE):
        speedup = (BEFORE if i < STEP_AT else AFTER) * noise
        rs = [result(speedup, compiled_ms=4.0 / speedup)]  # eager stays at 4 ms, the compiled side moves
        paths.append(write(folder, f"night-{i:02d}.json", report(rs, day=i + 1)))
    return paths


def only(history: History, metric: str = "speedup", **key: Any) -> Any:
    found = [s for s in history.series if s.metric == metric and all(getattr(s, k) == v for k, v in key.items())]
    assert len(found) == 1, [(s.config, s.device_model, s.phase, s.metric) for s in history.series]
    return found[0]


@pytest.fixture
def steps(tmp_path: Path) -> list[Path]:
    return step_history(tmp_path)


# -------------------------------------------------------------------------------------------- series


def test_replicates_collapse_to_their_median_and_configs_devices_phases_stay_apart():
    day1 = [
        result(2.0, replicate=0, gpu="A100"),
        result(2.6, replicate=1, gpu="A100"),
        result(2.2, replicate=2, gpu="A100"),
        result(3.0, gpu="H100"),
        result(1.5, gpu="A100", mode="max-autotune"),
        result(1.2, gpu="A100", phase="training"),
        result(None, gpu="A100", status="compile_error", backend="aot_eager"),
        result(9.0, gpu="A100", backend="eager", recompiled=True),
    ]
    history = build_history([("r1.json", report(day1, 1))])
    a100 = only(history, config="inductor", device_model="A100", phase="inference")
    assert [p.value for p in a100.points] == [2.2]  # the median of 2.0, 2.6, 2.2
    assert a100.points[0].report == "r1.json" and a100.points[0].created_at.startswith("2026-01-01")
    assert [p.value for p in only(history, config="inductor", device_model="H100").points] == [3.0]
    assert [p.value for p in only(history, config="inductor:max-autotune").points] == [1.5]
    assert [p.value for p in only(history, config="inductor", phase="training").points] == [1.2]
    assert (a100.target, a100.params, a100.precision) == ("seed.foo3", {}, "fp32")
    configs = {s.config for s in history.series if s.metric == "speedup"}
    assert configs == {"inductor", "inductor:max-autotune"}  # neither a compile error nor a recompile gives one


def test_each_speed_metric_and_compile_latency_by_cache_state():
    rs = [result(2.0, compiled_ms=3.0, compile_s=8.0), result(2.0, cache="cold", compile_s=20.0)]
    history = build_history([("r.json", report(rs, 1))])
    warm = {s.metric: s.points[0].value for s in history.series if s.config == "inductor"}
    assert warm == {"speedup": 2.0, "eager_ms": 6.0, "compiled_ms": 3.0, "compile_s_warm": 8.0}
    cold = {s.metric: s.points[0].value for s in history.series if s.config == "inductor+cold"}
    assert cold == {"speedup": 2.0, "eager_ms": 2.0, "compiled_ms": 1.0, "compile_s_cold": 20.0}


def test_shared_compile_latency_is_a_series_of_loaded_compiles_only():
    from tasks.models import CompileCache

    def shared(compile_s: float, loaded: bool) -> Result:
        r = result(2.0, cache="shared", compile_s=compile_s)
        return r.model_copy(update={"compile_cache": CompileCache(state="shared", loaded=loaded)})

    history = build_history([("a.json", report([shared(9.0, False)], 1)), ("b.json", report([shared(1.5, True)], 2))])
    series = [s for s in history.series if s.metric == "compile_s_shared"]
    assert len(series) == 1 and [p.value for p in series[0].points] == [1.5]  # the empty cache's compile is no point


def test_what_a_result_says_of_each_metric_and_which_values_are_kept():
    """``points.said`` and what ``metric_value`` and ``metric_values`` make of it: the speed metrics for an
    ok result timed without a recompile, the compile latency under its cache state's metric (a shared one
    only where it loaded artifacts), nothing for a failure; a value that is not finite or not above zero is
    said but not kept."""
    from orchestrator.report.points import metric_value, metric_values, said
    from tasks.models import CompileCache

    def shared(loaded: bool) -> Result:
        r = result(2.0, cache="shared", compile_s=3.0)
        return r.model_copy(update={"compile_cache": CompileCache(state="shared", loaded=loaded)})

    speed = [("speedup", 2.0), ("eager_ms", 2.0), ("compiled_ms", 1.0)]
    assert metric_values(result(2.0, cache="warm", compile_s=1.5)) == [*speed, ("compile_s_warm", 1.5)]
    assert metric_values(result(2.0, cache="cold", compile_s=20.0)) == [*speed, ("compile_s_cold", 20.0)]
    assert metric_values(shared(True)) == [*speed, ("compile_s_shared", 3.0)]
    assert metric_values(shared(False)) == speed  # an empty shared cache's compile is a cold one: no point
    assert metric_values(result(2.0, recompiled=True, compile_s=1.5)) == [("compile_s_warm", 1.5)]
    assert said(result(None, status="compile_error")) == []
    for bad in (math.nan, math.inf, 0.0, -1.0):
        warm = result(2.0, cache="warm", compile_s=bad)
        assert ("compile_s_warm", bad) in said(warm) or math.isnan(bad)
        assert metric_values(warm) == speed
        faster = result(2.0).model_copy(update={"speedup": bad})
        assert all(metric != "speedup" for metric, _ in metric_values(faster))
    assert (
        metric_value(shared(True), "compile_s_shared") == 3.0 and metric_value(shared(True), "compile_s_warm") is None
    )


def test_a_report_without_a_valid_result_has_no_point_not_a_zero():
    reports = [
        ("a.json", report([result(2.0)], 1)),
        ("b.json", report([result(None, status="compile_error")], 2)),
        ("c.json", report([result(2.0, recompiled=True)], 3)),
        ("d.json", report([result(2.1)], 4)),
    ]
    series = only(build_history(reports))
    assert [(p.report, p.value) for p in series.points] == [("a.json", 2.0), ("d.json", 2.1)]


# ---------------------------------------------------------------------------------- change detection


def test_a_step_is_found_at_the_first_report_after_it_with_levels_and_p(steps):
    history, count = history_of([str(p) for p in steps])
    assert count == 12
    series = only(history)
    assert len(series.points) == 12
    (change,) = series.changes
    assert change.index == STEP_AT
    assert change.report == str(steps[STEP_AT])
    assert change.before == pytest.approx(BEFORE, rel=0.01)
    assert change.after == pytest.approx(AFTER, rel=0.01)
    assert change.change == pytest.approx(AFTER / BEFORE - 1, abs=0.01)
    assert 0 < change.p <= ALPHA
    assert only(history, "eager_ms").changes == []  # eager did not move: the compiled side did
    assert [c.index for c in only(history, "compiled_ms").changes] == [STEP_AT]


def test_a_flat_noisy_series_has_no_change():
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert change_points(np.exp(0.02 * rng.standard_normal(30))) == []


def test_two_steps_and_an_outlier():
    values = [1.0] * 10 + [1.1] * 10 + [1.0] * 10
    values = [v * n for v, n in zip(values, NOISE * 3, strict=False)]
    values[4] = 1.5  # one bad night is not a change
    assert [s.index for s in change_points(values)] == [10, 20]


def test_too_short_constant_and_invalid_series():
    assert change_points([1.0] * (2 * MIN_SEGMENT - 1) + [2.0]) == []  # too few points to test
    assert change_points([1.0] * 30) == []
    with pytest.raises(ValueError, match="positive"):
        change_points([1.0, 0.0, 1.0])


def test_the_noise_of_many_series_at_once_is_each_ones_to_the_last_bit():
    """``relative_noises`` works out the short series together (an array per length) and gives the very
    figures ``relative_noise`` gives one by one, at every length; a bad value is the same error."""
    rng = np.random.default_rng(3)
    lengths = [0, 1, 2, 3, 3, 4, 4, 5, 7, 12, 40] * 30
    series = [list(np.exp(rng.normal(0, 0.05, n)) * rng.choice([1e-3, 1.0, 2.5, 300.0])) for n in lengths]
    together = relative_noises(series)
    assert together == [relative_noise(values) for values in series]
    assert together.count(None) == 90 and all(v is not None and v > 0 for v in together[3::11])
    for bad in ([1.0, 0.0, 1.0], [1.0, math.nan], [math.inf]):
        with pytest.raises(ValueError, match="positive"):
            relative_noises([[1.0, 1.1, 1.2], bad])


def test_the_quiet_table_on_a_terminal_is_its_first_rows_and_counts_every_series(tmp_path, monkeypatch):
    """Past a screenful, the terminal shows the first 40 quiet series and says how many there are: the rows
    of the others are never made (a big sweep's few reports are hundreds of thousands of series)."""
    for night in range(2):
        rs = [
            result(2.0 + night / 100, params={"copy": i}).model_copy(update={"experiment_id": f"e{i}"})
            for i in range(45)
        ]
        write(tmp_path, f"night-{night}.json", report(rs, day=night + 1))
    made = []  # each row's latest value, as its cell is made
    monkeypatch.setattr(history_module, "value_text", lambda *a: made.append(a) or value_text(*a))
    table = runner.invoke(app, ["history", str(tmp_path)])
    assert table.exit_code == 0, table.output
    assert len(made) == 40
    monkeypatch.undo()
    quiet = sum(not s.changes for s in history_of([str(tmp_path)])[0].series)
    assert quiet > 40 and f"first 40 of {quiet:,} rows; every row with --format markdown or json" in table.stdout
    md = runner.invoke(app, ["history", str(tmp_path), "--format", "markdown"]).stdout
    assert md.count("| seed.foo3 copy=") == quiet  # every row
    shown, every = (set(re.findall(r"copy=(\d+)", text)) for text in (table.stdout, md))
    assert every == {str(i) for i in range(45)} and shown < every and "0" in shown


def test_the_p_value_is_students_t_times_the_places_searched():
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(1)
    before, after = 0.01 * rng.standard_normal(9), 0.01 * rng.standard_normal(6) - 0.02
    p = float(ttest_ind(before, after).pvalue)
    assert search_p(before, after) == pytest.approx(p)
    assert search_p(before, after, places=10) == pytest.approx(min(1.0, 10 * p))
    assert search_p(np.zeros(3), np.ones(3)) == 0.0 and search_p(np.zeros(3), np.zeros(3)) == 1.0


def test_an_outlier_is_pulled_in_towards_its_sides_median_but_the_noise_is_left_alone():
    before, after = np.array([0.0, 0.01, -0.01, 0.3, 0.0]), np.array([0.1, 0.11, 0.09])
    pulled, same = pull_in(before, after, floor=0.01)
    assert pulled[3] < 0.1 and np.array_equal(pulled[[0, 1, 2, 4]], before[[0, 1, 2, 4]])
    assert np.array_equal(same, after)


def test_the_same_values_give_the_same_changes():
    values = np.exp(0.01 * np.random.default_rng(4).standard_normal(40))
    values[20:] *= 1.06
    assert change_points(values) == change_points(values) and [s.index for s in change_points(values)] == [20]


def test_a_step_with_three_reports_after_it_is_found_on_six_and_eight_points():
    assert [s.index for s in change_points([1.03, 1.04, 1.02, 1.03, 1.02, 0.92, 0.90, 0.91])] == [5]
    assert [s.index for s in change_points([1.0, 1.01, 0.99, 1.12, 1.11, 1.13])] == [3]  # one split to test
    assert change_points([1.0, 1.01, 0.99, 1.0, 1.01, 0.99, 1.0, 1.01]) == []


def test_a_significant_change_below_the_smallest_change_is_not_reported():
    values = [1.0, 1.001, 0.999, 1.0, 1.001, 0.999] * 2 + [1.015, 1.016, 1.014] * 2  # +1.5%, at 0.1% noise
    (split,) = change_points(values)
    assert split.index == 12 and split.magnitude == pytest.approx(0.015, abs=0.001)
    assert change_points(values, min_change=0.02) == []


def test_detectable_grows_with_the_noise_and_shrinks_with_the_length():
    rng = np.random.default_rng(2)
    noise = rng.standard_normal(60)
    quiet, loud = (detectable(np.exp(cv * noise[:12])) for cv in (0.01, 0.03))
    assert quiet is not None and loud is not None and 0 < quiet < loud
    longer = detectable(np.exp(0.01 * noise[:60]))
    assert longer is not None and longer < quiet
    assert detectable([1.0] * 5) is None  # too short for any split with 3 points either side
    assert detectable([1.0] * 8, min_change=0.02) == 0.02  # no noise: only the smallest change bounds it


def test_the_detectable_step_is_flagged_about_as_often_as_its_power_says():
    """90% power for a step at the detectable size, 3 points before the end, on 20 points of 1% noise."""
    rng = np.random.default_rng(5)
    flat = np.exp(0.01 * rng.standard_normal((400, 20)))
    step = float(np.median([detectable(v) for v in flat]))
    caught = 0
    for values in flat:
        values = values.copy()
        values[17:] *= 1 + step
        caught += [s.index for s in change_points(values)] == [17]
    assert 0.8 <= caught / len(flat) <= 0.98


# ------------------------------------------------------------------------------- a week of nightlies

TARGETS = ("seed.foo", "seed.bar", "seed.foo3")
MODES = (None, "max-autotune")
SLOWER_FROM = 5  # the sixth report: seed.foo3 under max-autotune is 12% slower on its compiled side from here on


def nightlies(folder: Path, step: float = 0.12, seed: int = 8) -> list[Path]:
    """Eight nightly reports of three targets in two configurations each, every median scattering by 1% from
    night to night; one configuration's compiled side ``step`` slower from the sixth report on."""
    rng = np.random.default_rng(seed)
    paths = []
    for night in range(8):
        rs = []
        for target, mode in itertools.product(TARGETS, MODES):
            eager, compiled, compile_s = np.exp(0.01 * rng.standard_normal(3)) * (2.0, 1.0, 8.0)
            if (target, mode, night >= SLOWER_FROM) == ("seed.foo3", "max-autotune", True):
                compiled *= 1 + step
            rs.append(result(eager / compiled, target=target, mode=mode, compiled_ms=compiled, compile_s=compile_s))
        paths.append(write(folder, f"nightly-{night + 1:02d}.json", report(rs, day=night + 1)))
    return paths


def test_a_week_of_nightlies_flags_the_slower_configuration_at_the_sixth_report_and_nothing_else(tmp_path):
    nightlies(tmp_path)
    out = runner.invoke(app, ["history", str(tmp_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    series = json.loads(out.stdout)["series"]
    assert len(series) == 24  # 3 targets x 2 configurations x (speedup, eager_ms, compiled_ms, compile_s_warm)
    changed = {(s["target"], s["config"], s["metric"]): s["changes"] for s in series if s["changes"]}
    assert set(changed) == {
        ("seed.foo3", "inductor:max-autotune", "speedup"),
        ("seed.foo3", "inductor:max-autotune", "compiled_ms"),
    }
    for (_, _, metric), (change,) in changed.items():
        assert change["index"] == SLOWER_FROM and change["report"].endswith("nightly-06.json")
        assert change["change"] == pytest.approx(-0.107 if metric == "speedup" else 0.12, abs=0.02)
    assert all(s["detectable"] is not None and s["detectable"] < 0.2 for s in series)  # 8 points of 1-1.4% noise

    table = runner.invoke(app, ["history", str(tmp_path)])
    assert "22 series without a change (speedup 5, eager_ms 6, compiled_ms 5, compile_s_warm 6)" in table.stdout
    assert table.stdout.endswith("8 report(s), 24 series: 2 change(s) in 2 series\n")


def test_the_flat_week_has_no_change_and_says_what_it_could_have_seen(tmp_path):
    nightlies(tmp_path, step=0.0)
    out = runner.invoke(app, ["history", str(tmp_path), "--format", "markdown"])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("# History: 8 report(s), 24 series: 0 change(s) in 0 series\n")
    rows = re.findall(r"^\| seed\.\S+ .* \| (\w+) \| \S+ \| 8 \| (\d+\.\d)% \| (\d+\.\d)% \|$", out.stdout, re.M)
    assert len(rows) == 24, out.stdout
    assert all(float(d) >= 100 * MIN_CHANGE[m] for m, _, d in rows)  # never below the metric's smallest change


def test_min_change_is_set_per_metric_from_the_command_line(tmp_path):
    nightlies(tmp_path)
    quiet = runner.invoke(app, ["history", str(tmp_path), "--min-change", "speedup=15%", "--format", "json"])
    assert quiet.exit_code == 0, quiet.output
    changed = [(s["metric"], s["config"]) for s in json.loads(quiet.stdout)["series"] if s["changes"]]
    assert changed == [("compiled_ms", "inductor:max-autotune")]  # the 11% speedup change is below 15%
    everywhere = runner.invoke(app, ["history", str(tmp_path), "--min-change", "0.2", "--format", "json"])
    assert all(not s["changes"] for s in json.loads(everywhere.stdout)["series"])
    assert min_changes(["3%", "compile_s_cold=0.1", "speedup=1%"]) == {
        **dict.fromkeys(MIN_CHANGE, 0.03),
        "compile_s_cold": 0.1,
        "speedup": 0.01,
    }


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("speed=3%", "--min-change 'speed=3%': unknown metric 'speed'; the metrics are speedup, eager_ms,"),
        ("speedup=abc", "--min-change 'speedup=abc': the size must be a percentage such as 3% or a fraction"),
        ("speedup=150%", "at least 0 and below 100%"),
        ("speedup=-1%", "at least 0 and below 100%"),
        ("speedup=", "the size must be a percentage"),
    ],
)
def test_a_bad_min_change_exits_2_with_one_line(steps, option, expected):
    assert expected in _one_error_line(runner.invoke(app, ["history", str(steps[0]), "--min-change", option]))


# ----------------------------------------------------------------------------------- reading reports


def test_reports_are_ordered_by_created_at_whatever_the_argument_order(tmp_path):
    paths = {
        day: write(tmp_path, name, report([result(speedup)], day))
        for day, name, speedup in ((3, "a.json", 3.0), (1, "c.json", 1.0), (2, "b.json", 2.0))
    }
    history, _ = history_of([str(paths[2]), str(paths[3]), str(paths[1])])
    series = only(history)
    assert [p.value for p in series.points] == [1.0, 2.0, 3.0]
    assert [p.report for p in series.points] == [str(paths[1]), str(paths[2]), str(paths[3])]


def test_directories_and_globs_find_every_json_report_once_and_no_journal(tmp_path, steps):
    (tmp_path / "run.journal.jsonl").write_text(make_result("seed.foo").model_dump_json() + "\n")
    history, count = history_of([str(tmp_path)])
    assert count == 12 and len(only(history).points) == 12
    history, count = history_of([str(tmp_path / "night-0*.json"), str(tmp_path), str(steps[0])])
    assert count == 12  # the glob, the folder and the file overlap: each report once
    history, count = history_of([str(tmp_path / "night-1*.json")])
    assert count == 2


# --------------------------------------------------------------------------------------------- CLI


def test_json_has_exactly_the_documented_shape(steps):
    result_ = runner.invoke(app, ["history", str(steps[0].parent), "--format", "json"])
    assert result_.exit_code == 0, result_.output
    data = json.loads(result_.stdout)
    assert list(data) == ["series"]
    keys = ["target", "params", "config", "device_model", "phase", "precision", "metric", "points", "changes"]
    keys += ["noise", "detectable"]
    for series in data["series"]:
        assert list(series) == keys
        assert all(list(p) == ["report", "created_at", "value"] for p in series["points"])
        assert all(list(c) == ["index", "report", "before", "after", "change", "p"] for c in series["changes"])
    speedup = next(s for s in data["series"] if s["metric"] == "speedup")
    assert speedup["changes"][0]["index"] == STEP_AT
    assert 0 < speedup["noise"] < 0.02 and speedup["noise"] < speedup["detectable"] < 0.1
    assert [s["metric"] for s in data["series"]] == ["speedup", "eager_ms", "compiled_ms", "compile_s_warm"]


def test_table_and_markdown_show_each_change_and_summarise_the_rest(steps, monkeypatch):
    monkeypatch.chdir(steps[0].parent)  # reports named as found in ".": night-06.json
    table = runner.invoke(app, ["history", "."])
    assert table.exit_code == 0, table.output
    assert "series that changed" in table.stdout
    assert "night-06.json (2026-01-07): 2.00x -> 1.80x (-10.2%, p=2.3e-09)" in table.stdout
    assert "2 series without a change (eager_ms 1, compile_s_warm 1)" in table.stdout
    assert "series without a change" in table.stdout and "detectable: the smallest step" in table.stdout
    assert table.stdout.endswith("12 report(s), 4 series: 2 change(s) in 2 series\n")
    md = runner.invoke(app, ["history", ".", "--format", "markdown"]).stdout
    assert md.startswith("# History: 12 report(s), 4 series: 2 change(s) in 2 series\n")
    assert "| series | metric | latest | points | noise | detectable | changes |" in md
    assert (
        "| seed.foo3 [inductor] on CPU (Xeon) | speedup | 1.78x | 12 | 1.6% | 7.6% "
        "| night-06.json (2026-01-07): 2.00x -> 1.80x (-10.2%, p=2.3e-09) |"
    ) in md
    assert "- 2 series without a change (eager_ms 1, compile_s_warm 1)" in md
    assert "| seed.foo3 [inductor] on CPU (Xeon) | compile_s_warm | 1.00 | 12 | 0.0% | 5.0% |" in md  # its floor


def test_one_report_is_enough_and_has_no_change(steps):
    out = runner.invoke(app, ["history", str(steps[0]), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert all(len(s["points"]) == 1 and s["changes"] == [] for s in json.loads(out.stdout)["series"])
    md = markdown(*history_of([str(steps[0])]))
    assert "4 of them have fewer than 6 points: a change is tested with at least 3 reports either side of it" in md
    assert "| seed.foo3 [inductor] on CPU (Xeon) | speedup | 2.00x | 1 | - | none before 6 points |" in md


def _one_error_line(result_) -> str:
    assert result_.exit_code == 2, result_.output
    lines = result_.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result_.output, result_.output
    return lines[0]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("other.json", '{"a": 1}', "not a compilebench report (no 'results')"),
        ("broken.json", '{"results": [', "malformed JSON at line 1"),
        ("notes.txt", "hello", "malformed JSON"),
    ],
)
def test_a_file_that_is_not_a_report_exits_2_with_one_line(tmp_path, steps, name, content, expected):
    (tmp_path / name).write_text(content)
    line = _one_error_line(runner.invoke(app, ["history", str(steps[0]), str(tmp_path / name)]))
    assert expected in line and name in line
    if name.endswith(".json"):  # a folder reads every *.json in it
        assert expected in _one_error_line(runner.invoke(app, ["history", str(tmp_path)]))


def test_no_report_matched_exits_2_naming_the_pattern(tmp_path):
    pattern = str(tmp_path / "nightly-*.json")
    assert _one_error_line(runner.invoke(app, ["history", pattern])).endswith(f"no report matches {pattern}")
    (tmp_path / "empty").mkdir()
    line = _one_error_line(runner.invoke(app, ["history", str(tmp_path / "empty")]))
    assert line.endswith(f"no *.json report in {tmp_path / 'empty'}")
    assert "No such file" in _one_error_line(runner.invoke(app, ["history", str(tmp_path / "gone.json")]))


def test_a_created_at_that_is_not_a_time_exits_2(tmp_path):
    bad = write(tmp_path, "bad.json", report([result()], 1).model_copy(update={"created_at": "yesterday"}))
    assert "created_at 'yesterday' is not an ISO 8601 time" in _one_error_line(
        runner.invoke(app, ["history", str(bad)])
    )


def test_history_needs_neither_ray_nor_torch(steps):
    proc = cli_without_ray_or_torch("history", ".", "--format", "json", "--html", "page.html", cwd=steps[0].parent)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["series"][0]["changes"][0]["index"] == STEP_AT
    assert (steps[0].parent / "page.html").read_text().startswith("<!DOCTYPE html>")


# -------------------------------------------------------------------------------------------- HTML


@pytest.fixture
def page(tmp_path, steps) -> Path:
    path = tmp_path / "history.html"
    result_ = runner.invoke(app, ["history", str(tmp_path / "night-*.json"), "--html", str(path)])
    assert result_.exit_code == 0, result_.output
    return path


def test_the_page_is_self_contained_with_a_chart_per_series(page):
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)  # nothing fetched
    assert len(re.findall(r"plotly\.js v\d", text)) == 1
    assert text.count("Plotly.newPlot(") == 4  # speedup, eager_ms, compiled_ms, compile_s_warm
    assert "2.00x -&gt; 1.80x (-10.2%, p=" in text  # the change, in the table and in the marker's hover


def test_a_history_without_series_renders():
    text = render_history_html(History(series=[]), 0)
    assert "No series: no report holds a valid result." in text


@needs_chromium
def test_the_charts_and_change_markers_render_in_headless_chromium(page, tmp_path):
    assert CHROMIUM, "Chromium is needed in CI: .ci/run installs Debian's chromium"
    dom, shot = _dom_and_screenshot(page, tmp_path, "1280,1600")
    starts = [dom.find(f'id="chart-series-{i}"') for i in range(4)]
    assert all(s >= 0 for s in starts), starts
    bounds = [*sorted(starts), len(dom)]
    charts = [dom[a:b] for a, b in itertools.pairwise(bounds)]
    assert all('class="main-svg"' in chart for chart in charts)  # plotly drew every chart
    changed = charts[:2]  # series that changed come first: speedup and compiled_ms
    for chart in changed:
        assert "change point" in chart  # the marker trace's legend entry
        assert "shapelayer" in chart and "stroke: rgb(192, 57, 43)" in chart  # the red dashed line
    assert "change point" not in charts[2] + charts[3]

    with Image.open(shot) as image:
        rgb = np.asarray(image.convert("RGB"))
    assert (rgb != 255).any(axis=2).mean() > 0.03, "the screenshot is (nearly) blank"
    red = (rgb[..., 0] > 170) & (rgb[..., 1] < 90) & (rgb[..., 2] < 80)
    assert red.sum() > 100  # the change lines and markers are drawn


def test_binary_segmentation_splits_as_ruptures_binseg_does():
    """The candidates in prefix sums are ruptures' ``Binseg`` (l2, jump 1) split for split, on noisy series with
    steps, outliers, rounded (tied) values and every length from the shortest."""
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(6, 120))
        x = np.log(2 + 0.02 * rng.standard_normal(n))
        if trial % 3 == 0:
            x[int(rng.integers(3, n - 2)) :] += rng.choice([0.05, -0.1, 0.3])
        if trial % 5 == 0:
            x = np.round(x, 2)
        if trial % 7 == 0:
            x[int(rng.integers(0, n))] += 1
        pen = 2 * math.log(n)
        expected = rpt.Binseg(model="l2", min_size=3, jump=1).fit(x / 0.01).predict(pen=pen)[:-1]
        assert binary_segmentation(x / 0.01, 3, pen) == expected, (trial, n)
