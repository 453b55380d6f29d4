"""The HTML page: self-contained, escaped, and its charts really render in headless Chromium."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import write_report
from orchestrator.report.html import render_html
from tests.report_data import (
    calibrated_report,
    make_report,
    make_result,
    mixed_report,
    replay_report,
    replicated_report,
)

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM = next((path for path in map(shutil.which, BROWSERS) if path), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="no Chromium on PATH (Debian: apt-get install -y chromium); .ci/run installs it, so CI always runs this",
)
CHARTS = ["chart-pareto", "chart-speedup-0", "chart-speedup-1", "chart-compile", "chart-times", "chart-samples"]
REPLAY_CHARTS = ["chart-pareto", "chart-replay-sizes-0", "chart-replay-cumulative-0"]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render_html(mixed_report()))
    return path


def test_the_page_is_self_contained(page):
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)  # nothing fetched: every script is inline
    assert text.count("Plotly.newPlot(") == len(CHARTS) - 1  # the samples chart is drawn by its selector
    assert len(re.findall(r"plotly\.js v\d", text)) == 1  # the library, inlined once


def test_the_page_holds_the_summary_failures_and_warnings(page):
    text = page.read_text()
    for expected in (
        "best configuration per group",
        "A100: configurations",
        "Failures",
        "CUDA out of memory",
        "nodes disagree on triton: 3.1.0, 3.2.0",
        '<option value="0">seed.foo3 shape=[256, 256] [inductor]</option>',
    ):
        assert expected in text, expected


def test_an_incomplete_run_has_a_banner_and_messages_are_escaped():
    failed = make_result("a", None, status="runtime_error", message="<script>alert(1)</script> & more")
    text = render_html(make_report([make_result("b"), failed], complete=False))
    assert '<div class="banner incomplete">INCOMPLETE: the run did not finish' in text
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in text


def test_a_report_without_timings_still_renders():
    text = render_html(make_report([make_result("a", None, status="crashed")]))
    assert "no valid timings to chart" in text and "no compile latencies" in text


def test_report_and_run_write_the_page_through_the_cli(tmp_path):
    write_report(mixed_report(), tmp_path / "r.json")
    result = CliRunner().invoke(app, ["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


@needs_chromium
def test_the_charts_render_in_headless_chromium(page, tmp_path):
    assert CHROMIUM, "Chromium is needed in CI: .ci/run installs Debian's chromium"
    dom, shot = _dom_and_screenshot(page, tmp_path, "1280,2400")
    _assert_drawn(dom, CHARTS)
    samples = dom[dom.find('id="chart-samples"') :]
    assert "violins" in samples[:200_000]  # the selector drew the first result's distributions

    with Image.open(shot) as image:
        assert image.size == (1280, 2400)
        rgb = np.asarray(image.convert("RGB"))
    ink = (rgb != 255).any(axis=2).mean()
    assert ink > 0.05, "the screenshot is (nearly) blank"
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 50  # bars, lines, text in several colours, not one fill


def _assert_drawn(dom: str, charts: list[str]) -> None:
    """Every chart's div is in the DOM after scripts ran, and plotly drew an SVG in each."""
    positions = [dom.find(f'id="{chart}"') for chart in charts]
    assert all(p >= 0 for p in positions), dict(zip(charts, positions, strict=True))
    bounds = [*sorted(positions), len(dom)]
    for start, end in itertools.pairwise(bounds):
        assert 'class="main-svg"' in dom[start:end], dom[start : start + 200]  # plotly drew an SVG in it


def _dom_and_screenshot(page: Path, tmp_path: Path, window: str) -> tuple[str, Path]:
    """The page's DOM after its scripts ran, and a screenshot of a ``window`` ("width,height") window: both from one
    start of Chromium, which loads and draws the page (plotly.js inlined) once."""
    shot = tmp_path / "page.png"
    dom = _chromium(page, tmp_path, "--dump-dom", f"--screenshot={shot}", f"--window-size={window}").stdout
    return dom, shot


def _chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=10000",
        *args,
        page.as_uri(),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_run_writes_the_page_at_the_end(ray_cluster, write_spec, tmp_path):
    spec = write_spec(
        """
        name: small
        defaults: {device: cpu, compile: {backend: eager}, timing: {warmup: 1, repeats: 3}}
        experiments:
          - target: seed.foo
            params: {shape: [8]}
        """
    )
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    result = CliRunner().invoke(app, ["run", str(spec), "--out", str(out), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert "<h1>small</h1>" in page.read_text()


def test_the_page_shows_replicates_their_interval_and_calibration_only_when_present(page):
    report = replicated_report()
    report.environment.calibration = calibrated_report().environment.calibration
    report.results[0].worker.calibration = report.environment.calibration[1]  # r0 of seed.foo3 ran on the slow GPU
    text = render_html(report)
    for expected in (
        "<th>CI over</th>",
        "<th>within-run CI</th>",
        "<th>GPU spread</th>",
        "<td>3 runs</td>",
        "95% CI over k runs: a Student t-interval",
        "<h3>calibration</h3>",
        '<td class="bad">slow</td>',
        "fp32_tflops 46.1 is 10.0% below the H100 median 51.2 (of 1 other)",
        "<th>replicate</th>",
        "<td>r2</td>",
        "slow device",
        '"seed.foo3 r1"',  # each replicate has its bar in the speedup chart
    ):
        assert expected in text, expected
    plain = page.read_text()
    for absent in ("<th>CI over</th>", "<h3>calibration</h3>", "<th>replicate</th>", "slow device"):
        assert absent not in plain, absent


def test_what_to_ship_comes_first_with_its_pareto_chart(page):
    text = page.read_text()
    ship, summary = text.find("<h2>What to ship</h2>"), text.find("<h2>Summary</h2>")
    assert 0 < ship < text.find('id="chart-pareto"') < summary
    assert text.count("<h3>what to ship</h3>") == 1  # not again among the summary tables
    assert "<td>inductor:max-autotune</td>" in text and "<td>no configuration is faster beyond noise</td>" in text
    pareto = text[text.find('id="chart-pareto"') :]
    assert '"symbol":"star"' in pareto[:100_000] and '"symbol":"x"' in pareto[:100_000]  # the set, the excluded


def test_a_report_without_decisions_or_replays_has_neither_section():
    report = mixed_report()
    for group in report.summary.groups:
        group.decision = None
    text = render_html(report)
    assert "What to ship" not in text and "chart-pareto" not in text and "Shape-traffic replay" not in text


@pytest.fixture(scope="module")
def replay_page(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("html") / "replay.html"
    path.write_text(render_html(replay_report()))
    return path


def test_replays_have_per_size_bars_and_the_cumulative_time_curves(replay_page):
    text = replay_page.read_text()
    assert "<h2>Shape-traffic replay</h2>" in text and "<h3>shape-traffic replay</h3>" in text
    sizes = text[text.find('id="chart-replay-sizes-0"') :][:100_000]
    assert '"x":["seq=16","seq=32","seq=64"]' in sizes and '"name":"eager"' in sizes
    for policy in ("inductor+static", "inductor+dynamic", "inductor+mark_dynamic=0:1"):
        assert f'"name":"{policy}"' in sizes, policy
    curves = text[text.find('id="chart-replay-cumulative-0"') :][:100_000]
    assert "time for the first n of 1,000 calls, compiles included" in curves
    assert '"name":"inductor+mark_dynamic=0:1"' in curves
    assert "inductor+mark_dynamic=0:1 serves them fastest" in text  # the verdict, as a note


@needs_chromium
def test_the_replay_and_pareto_charts_render_in_headless_chromium(replay_page, tmp_path):
    dom = _chromium(replay_page, tmp_path, "--dump-dom").stdout
    _assert_drawn(dom, REPLAY_CHARTS)
    pareto = dom[dom.find('id="chart-pareto"') : dom.find('id="chart-replay-sizes-0"')]
    assert pareto.count('class="point"') >= 4  # a point per policy
    assert "inductor+mark_dynamic=0:1" in pareto  # the Pareto set is named beside its stars


def test_a_long_tables_data_reads_back_as_its_rows_with_its_marks_and_no_closing_tag():
    """The rows of a paged table go into the page as JSON: a cell holding ``</script>`` cannot close the
    script, text that is not ASCII is kept as it is, and the marked cells are keyed by row, then column."""
    import json as stdlib_json

    from orchestrator.report.cells import Rows
    from orchestrator.report.page import paged_table_html

    rows = [[f"seed.foo copy={i}", "ok", "-"] for i in range(12)]
    rows[3] = ["</script><b>x</b>", "compile_error", "1.5 ≥ é"]
    table = Rows("every result", ["target", "status", "note"], rows, right={"note"})
    page = paged_table_html(table, page=5)
    (payload,) = re.findall(r'<script type="application/json">(.*?)</script>', page)
    assert "</" not in payload
    data = stdlib_json.loads(payload)
    assert data["rows"] == rows and data["page"] == 5 and data["num"] == [2]
    assert data["marks"] == {"3": {"1": "bad"}}


def test_a_results_notes_name_each_noisy_side():
    from orchestrator.report.digest import digest
    from orchestrator.report.views import notes
    from tests.report_data import make_report, make_result

    d = digest(make_report([make_result("seed.foo", 2.0)]).results[0])
    said = {}
    for eager, compiled in itertools.product((False, True, None), repeat=2):
        d.eager_noisy, d.compiled_noisy = eager, compiled
        said[(eager, compiled)] = [n for n in notes(d) if n.startswith("noisy")]
    assert said[(True, True)] == ["noisy both"] and said[(True, False)] == ["noisy eager"]
    assert said[(None, True)] == ["noisy compiled"] and said[(False, None)] == said[(None, None)] == []
