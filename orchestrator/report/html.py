"""One self-contained HTML page for a report: the summary tables and charts, no network needed.

The page is the views (``views``) as HTML tables (``page.table_html``) and the charts (``charts``)
as plotly divs, with the sections only a page has: the header, the raw samples of one result,
every failure with its whole message, the compile traces. The raw-sample chart redraws, from data
embedded in the page, the result chosen in its selector. The sections drawn from every result's digest
(the speedup, compile latency and eager-vs-compiled charts, the table of every result: most of a big page's
drawing) are made in a forked copy of the process where that is safe (``start_drawing``, ``tasks.forked``),
while the rest is drawn here. Imports the charts, the page's parts and the views below them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from typing import Any
from urllib.parse import quote

from orchestrator.report.cells import Rows
from orchestrator.report.charts import (
    compile_figure,
    pareto_figure,
    rank_figure,
    replay_figures,
    scaling_figure,
    speedup_figures,
    times_figure,
)
from orchestrator.report.digest import Digest
from orchestrator.report.models import Report, result_group
from orchestrator.report.page import PAGE_ROWS, document, escape, figure_html, table_html
from orchestrator.report.views import SHIP_TITLE, as_digests, failures_rows, headline, results_rows, views
from tasks.forked import Beside
from tasks.result import Result
from tasks.text import first_line

MAX_SAMPLE_RESULTS = 1000  # results whose raw samples the page embeds for the distribution chart

SAMPLES_JS = """
(function () {
  const data = JSON.parse(document.getElementById('samples-data').textContent);
  const select = document.getElementById('samples-select');
  function draw() {
    const r = data[select.value];
    const traces = r.sides.map(function (s, i) {
      return {type: 'violin', name: s.name, y: s.samples, box: {visible: true}, meanline: {visible: true},
              spanmode: 'hard', points: 'all', jitter: 0.4, pointpos: -1.6,
              line: {color: ['#4c72b0', '#dd8452'][i]}};
    });
    Plotly.react('chart-samples', traces, {
      title: {text: r.title}, yaxis: {title: {text: 'ms per call (one point a sample)'}, rangemode: 'tozero'},
      margin: {t: 50}, showlegend: false}, {displaylogo: false, responsive: true});
  }
  select.addEventListener('change', draw);
  draw();
})();
"""


DigestSections = tuple[list[str], str, str, str]  # the speedup charts, compile latency, eager vs compiled, every result


def start_drawing(report: Report, digests: Sequence[Digest] | None = None) -> Beside[DigestSections]:
    """The page's sections drawn from every result's digest (``digest_sections``), started beside this process
    (``forked.Beside``): at 100,000 results, the half of the page's drawing that reads every result, made while
    the caller works out and prints the rest. ``digests``: as ``render_html`` takes them."""
    every = as_digests(report.results) if digests is None else digests
    return Beside(partial(digest_sections, report, every))


def digest_sections(report: Report, every: Sequence[Digest]) -> DigestSections:
    """The speedup charts, the compile latency chart, the eager vs compiled chart and the table of every result,
    each as the page's HTML."""
    return (
        [figure_html(fig, f"chart-speedup-{i}") for i, fig in enumerate(speedup_figures(every))],
        figure_html(compile_figure(every), "chart-compile"),
        figure_html(times_figure(every), "chart-times"),
        table_html(results_rows(every, report.name, report.environment.calibration)),
    )


def render_html(
    report: Report,
    shown: Sequence[Rows] | None = None,
    digests: Sequence[Digest] | None = None,
    sampled: Sequence[Result] | None = None,
    drawing: Beside[DigestSections] | None = None,
) -> str:
    """The page as one string: header and warnings, summary tables, charts, failures, every result.
    ``shown``: the report's ``views``, where they were worked out already (the terminal's). A big compressed
    report is drawn from its ``skim.load_page``: an ``Outline`` (the results the page lists one by one), ``digests``
    (what the table of every result and the charts read of each, one a result in its order) and ``sampled`` (the
    first ``MAX_SAMPLE_RESULTS`` results with a side timed: the raw-sample chart's); otherwise both are the
    report's own results. ``drawing``: the sections of every result's digest, where the caller started them
    (``start_drawing``); else they are started here, beside the rest."""
    with drawing or start_drawing(report, digests) as started:
        return _page(report, shown, sampled, started)


def _page(report: Report, shown: Sequence[Rows] | None, sampled: Sequence[Result] | None, drawing: Beside) -> str:
    body = [_header(report)]
    shown = list(views(report)) if shown is None else shown
    ship = next((view for view in shown if view.title == SHIP_TITLE), None)
    if ship is not None:
        body.append("<h2>What to ship</h2>")
        body.append(table_html(ship))
        body.append(
            '<p class="meta">Each configuration of each group: the lower 95% bound of its speedup against the '
            "compile latency its break-even is charged; stars mark the Pareto set, crosses the configurations that "
            "may not be shipped (failed, wrong, unchecked, recompiled, or a cold twin).</p>"
        )
        body.append(figure_html(pareto_figure(report), "chart-pareto"))
    body.append("<h2>Summary</h2>")
    body += [table_html(view) for view in shown if view.title not in ("failures", SHIP_TITLE)]
    replays = replay_figures(report)
    scaled, ranked = scaling_figure(report), rank_figure(report)
    samples, failures, traces = (
        _samples_section(report.results if sampled is None else sampled),
        _failures(report),
        _traces(report),
    )
    speedups, compiled, times, every_result = drawing.result()
    body.append("<h2>Speedup per target and configuration</h2>")
    body.append(
        '<p class="meta">Ratio of medians (eager / compiled), with its 95% bootstrap interval; the line is 1.0x '
        "(no change). Results that failed or recompiled while timed are left out.</p>"
    )
    body += speedups
    if replays:
        body.append("<h2>Shape-traffic replay</h2>")
        body.append(
            '<p class="meta">Per size, the warm median time of a call, eager and under each policy; then the time '
            "the whole sequence took so far, call after call, compiles included: where a policy's curve crosses "
            "below eager's, compiling has paid for itself.</p>"
        )
        body += [figure_html(fig, div) for div, fig in replays]
    if scaled is not None or ranked is not None:
        body.append("<h2>Distributed experiments</h2>")
        body.append(
            '<p class="meta">Compile speedup at each world size (the hover: compiled samples per second against one '
            "rank's), then each rank's median step time: the gang's step is its slowest rank's.</p>"
        )
        body += [figure_html(f, div) for div, f in (("chart-scaling", scaled), ("chart-ranks", ranked)) if f]
    body.append("<h2>Compile latency per configuration</h2>")
    body.append(compiled)
    body.append("<h2>Eager vs compiled time per device model</h2>")
    body.append(times)
    body.append("<h2>Raw samples of one result</h2>")
    body.append(samples)
    body.append("<h2>Failures</h2>")
    body.append(failures)
    if traces:
        body.append("<h2>Compile traces</h2>")
        body.append(traces)
    body.append("<h2>Every result</h2>")
    body.append(every_result)
    return document(f"{report.name}: compilebench report", body)


def samples_data(results: Sequence[Result]) -> list[dict[str, Any]]:
    """The raw samples of each timed result (the first ``MAX_SAMPLE_RESULTS``), for the selector."""
    out = []
    for r in results:
        sides = [
            {"name": name, "samples": s.samples_ms} for name, s in (("eager", r.eager), ("compiled", r.compiled)) if s
        ]
        if not sides:
            continue
        title = f"{result_group(r)} [{r.config_label}]: {r.status}" + (f", {r.speedup:.2f}x" if r.speedup else "")
        out.append({"label": f"{result_group(r)} [{r.config_label}]", "title": title, "sides": sides})
        if len(out) == MAX_SAMPLE_RESULTS:
            break
    return out


# ------------------------------------------------------------------------------ what only a page has


def _header(report: Report) -> str:
    env = report.environment
    lines = headline(report)
    parts = [f"<h1>{escape(report.name)}</h1>"]
    parts.append(
        f'<p class="meta">created {escape(report.created_at)} · torch {escape(env.torch)} · '
        f"Python {escape(env.python)} · Ray {escape(env.ray)} · {escape(env.platform)} · {len(env.nodes)} node(s)</p>"
    )
    for line in lines[:-1]:
        kind = "incomplete" if line.startswith("INCOMPLETE") else "warning"
        parts.append(f'<div class="banner {kind}">{escape(line)}</div>')
    parts.append(f"<p><b>{escape(lines[-1])}</b></p>")
    return "\n".join(parts)


def _samples_section(results: Sequence[Result]) -> str:
    data = samples_data(results)
    if not data:
        return "<p>No result has raw samples.</p>"
    options = "".join(f'<option value="{i}">{escape(d["label"])}</option>' for i, d in enumerate(data))
    payload = json.dumps(data).replace("</", "<\\/")
    return (
        f'<p><label for="samples-select">result: </label><select id="samples-select">{options}</select></p>'
        f'<div id="chart-samples" class="chart"></div>'
        f'<script type="application/json" id="samples-data">{payload}</script>'
        f"<script>{SAMPLES_JS}</script>"
    )


def _failures(report: Report) -> str:
    """Every result that is not ok with its whole message; past ``PAGE_ROWS`` of them, their first lines in a
    paged table (``failures_rows``: the whole messages are in the report)."""
    failed = [r for r in report.results if r.status != "ok"]
    if not failed:
        return "<p>None: every experiment is ok.</p>"
    if len(failed) > PAGE_ROWS:
        return table_html(failures_rows(failed))
    rows = []
    for r in failed:
        error = r.error
        message = error.message if error else (r.check_note or "")
        kind = error.type if error else "-"
        rows.append(
            f"<tr><td>{escape(result_group(r))}</td><td>{escape(r.config_label)}</td>"
            f"<td class='bad'>{escape(r.status)}</td><td>{escape(kind)}</td>"
            f"<td><details><summary>{escape(first_line(message, limit=120))}</summary>"
            f"<pre>{escape(message)}</pre></details></td></tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in ("target", "config", "status", "error", "message"))
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"


def _traces(report: Report) -> str:
    """A row per traced result linking its trace's folder, its logs and tlparse's page (paths relative to
    the report's folder, so the links work from a page written beside the report); '' when none was traced."""
    traced = [(r, r.trace) for r in report.results if r.trace is not None]
    if not traced:
        return ""
    rows = []
    for r, trace in traced:
        folder = _link(trace.dir, trace.dir.rsplit("/", 1)[-1] + "/") if trace.dir else "-"
        logs = "<br>".join(_link(log, log.rsplit("/", 1)[-1]) for log in trace.log_files) or "-"
        page = _link(trace.html, "tlparse") if trace.html else "-"
        note = f"<span class='bad'>{escape(trace.error)}</span>" if trace.error else ""
        rows.append(
            f"<tr><td>{escape(result_group(r))}</td><td>{escape(r.config_label)}</td>"
            f"<td class='num'>{r.replicate}</td>"
            f"<td>{folder}</td><td>{logs}</td><td class='num'>{trace.bytes / 1024:.0f} KiB</td><td>{page}</td>"
            f"<td>{note}</td></tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in ("target", "config", "run", "trace", "logs", "size", "HTML", "note"))
    return (
        '<p class="meta">The structured trace of each traced compile (<code>trace: true</code>), as '
        "<code>TORCH_TRACE</code> writes it, and tlparse's page where tlparse was installed; the links are "
        "relative to the report's folder.</p>"
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _link(path: str, text: str) -> str:
    return f'<a href="{escape(quote(path))}">{escape(text)}</a>'
