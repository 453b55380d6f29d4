"""History: series across reports in time order, change points with p-values, the CLI and the HTML page."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import Report, write_report
from orchestrator.report.changepoints import (
    ALPHA,
    MIN_SEGMENT,
    PERMUTATIONS,
    change_points,
    permutation_p,
    shortest_testable,
    split_gains,
)
from orchestrator.report.history import History, build_history, history_of, markdown
from orchestrator.report.history_html import render_history_html
from tasks.models import Result
from tests.report_data import make_report, make_result
from tests.test_html import CHROMIUM, _chromium, needs_chromium
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


def test_the_closed_form_gain_is_ruptures_l2_cost():
    import ruptures as rpt

    segment = np.log(np.random.default_rng(1).lognormal(0, 0.1, 25))
    segment[12:] += 0.1
    k, gain = rpt.Binseg(model="l2", min_size=MIN_SEGMENT, jump=1).fit(segment).single_bkp(0, len(segment))
    gains = split_gains(segment[None, :], MIN_SEGMENT)[0]
    assert gains.max() == pytest.approx(float(np.squeeze(gain)))
    assert int(np.argmax(gains)) + MIN_SEGMENT == k


def test_the_permutation_p_value_counts_the_observed_order():
    constant = np.zeros(12)
    assert permutation_p(constant, 6, MIN_SEGMENT, PERMUTATIONS) == 1.0  # every order gains as much: nothing
    step = np.r_[np.zeros(15), np.ones(15)] + np.linspace(0, 0.01, 30)
    assert permutation_p(step, 15, MIN_SEGMENT, 99) == 0.01  # no random order beats it: 1 / (1 + 99)


def test_the_p_value_of_a_flat_series_with_outliers_is_uniform():
    """The cleaning is inside the null: random orders are cleaned as the series is, so outliers do not make
    a flat series look changed more often than p says."""
    rng = np.random.default_rng(3)
    ps = []
    for _ in range(200):
        x = 0.02 * rng.standard_normal(30)
        x[rng.random(30) < 0.05] += 0.3  # outliers on 5% of points
        ps.append(permutation_p(x, 15, MIN_SEGMENT, 199))
    assert np.mean(np.array(ps) <= 0.1) <= 0.12
    assert np.mean(np.array(ps) <= 0.5) <= 0.55


def test_a_change_needs_enough_points_for_any_order_to_be_rare():
    assert shortest_testable() == 12  # 2 / C(12, 6) + 1 / 2000 = 0.0027 <= 0.003; 11 points: 0.0048
    eleven = [2.0] * 6 + [1.6] * 5
    twelve = [2.0] * 6 + [1.6] * 6
    assert change_points(eleven) == []  # a 20% drop, and still no order test can tell from 11 points
    assert [s.index for s in change_points(twelve)] == [6]


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
    for series in data["series"]:
        assert list(series) == keys
        assert all(list(p) == ["report", "created_at", "value"] for p in series["points"])
        assert all(list(c) == ["index", "report", "before", "after", "change", "p"] for c in series["changes"])
    speedup = next(s for s in data["series"] if s["metric"] == "speedup")
    assert speedup["changes"][0]["index"] == STEP_AT
    assert [s["metric"] for s in data["series"]] == ["speedup", "eager_ms", "compiled_ms", "compile_s_warm"]


def test_table_and_markdown_show_each_change_and_summarise_the_rest(steps, monkeypatch):
    monkeypatch.chdir(steps[0].parent)  # reports named as found in ".": night-06.json
    table = runner.invoke(app, ["history", "."])
    assert table.exit_code == 0, table.output
    assert "series that changed" in table.stdout
    assert "night-06.json (2026-01-07): 2.00x -> 1.80x (-10.2%, p=0.002)" in table.stdout
    assert "2 series without a change (eager_ms 1, compile_s_warm 1)" in table.stdout
    assert table.stdout.endswith("12 report(s), 4 series: 2 change(s) in 2 series\n")
    md = runner.invoke(app, ["history", ".", "--format", "markdown"]).stdout
    assert md.startswith("# History: 12 report(s), 4 series: 2 change(s) in 2 series\n")
    assert "| series | metric | latest | points | changes |" in md
    assert (
        "| seed.foo3 [inductor] on CPU (Xeon) | speedup | 1.78x | 12 "
        "| night-06.json (2026-01-07): 2.00x -> 1.80x (-10.2%, p=0.002) |"
    ) in md
    assert "- 2 series without a change (eager_ms 1, compile_s_warm 1)" in md


def test_one_report_is_enough_and_has_no_change(steps):
    out = runner.invoke(app, ["history", str(steps[0]), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert all(len(s["points"]) == 1 and s["changes"] == [] for s in json.loads(out.stdout)["series"])
    note = "4 of them have fewer than 12 points: too few for any change to reach p <= 0.003"
    assert note in markdown(*history_of([str(steps[0])]))


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
    dom = _chromium(page, tmp_path, "--dump-dom").stdout
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

    shot = tmp_path / "page.png"
    _chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,1600")
    with Image.open(shot) as image:
        rgb = np.asarray(image.convert("RGB"))
    assert (rgb != 255).any(axis=2).mean() > 0.03, "the screenshot is (nearly) blank"
    red = (rgb[..., 0] > 170) & (rgb[..., 1] < 90) & (rgb[..., 2] < 80)
    assert red.sum() > 100  # the change lines and markers are drawn
