"""One self-contained HTML page for a report: the summary tables and charts, no network needed.

plotly.js is inlined once in the page's head; each chart is a plotly figure. The raw-sample
chart redraws, from data embedded in the page, the result chosen in its selector.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from orchestrator.report.models import Report, group_label
from orchestrator.report.render import (
    TIE_TEXT,
    Rows,
    bad,
    cache_text,
    first_line,
    has_replicates,
    headline,
    results_rows,
    ship_rows,
    views,
)
from orchestrator.report.replay import traffic_groups
from orchestrator.report.summary import device_model, valid_timing
from tasks.models import Result

if TYPE_CHECKING:
    import plotly.graph_objects as go

MAX_SAMPLE_RESULTS = 1000  # results whose raw samples the page embeds for the distribution chart
COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974"]
PLOT_CONFIG = {"displaylogo": False, "responsive": True}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1400px;
       padding: 0 16px; color: #1d1d1f; }
h1 { margin: 0 0 4px; } h2 { margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #555; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 8px 0; font-weight: 600; }
.incomplete { background: #fde2e1; border: 1px solid #e5534b; color: #8c1d18; }
.warning { background: #fff4d6; border: 1px solid #e0b400; color: #6b5200; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f4f5f7; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
.bad { color: #c0392b; font-weight: 600; } .tie { color: #8a6d00; }
.notes { color: #555; font-size: 13px; margin: 0 0 8px 0; padding-left: 18px; }
.chart { width: 100%; min-height: 420px; }
details pre { white-space: pre-wrap; font-size: 12px; background: #f6f8fa; padding: 8px; max-height: 300px;
              overflow: auto; }
select { font-size: 14px; padding: 2px 4px; max-width: 100%; }
.scroll { overflow-x: auto; }
"""

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


def render_html(report: Report) -> str:
    """The page as one string: header and warnings, summary tables, charts, failures, every result."""
    from plotly.offline import get_plotlyjs

    body = [_header(report)]
    ship = ship_rows(report.summary)
    if ship.rows:
        body.append("<h2>What to ship</h2>")
        body.append(_table(ship))
        body.append(
            '<p class="meta">Each configuration of each group: the lower 95% bound of its speedup against the '
            "compile latency its break-even is charged; stars mark the Pareto set, crosses the configurations that "
            "may not be shipped (failed, wrong, unchecked, recompiled, or a cold twin).</p>"
        )
        body.append(_figure_html(pareto_figure(report), "chart-pareto"))
    body.append("<h2>Summary</h2>")
    body += [_table(view) for view in views(report) if view.title not in ("failures", ship.title)]
    body.append("<h2>Speedup per target and configuration</h2>")
    body.append(
        '<p class="meta">Ratio of medians (eager / compiled), with its 95% bootstrap interval; the line is 1.0x '
        "(no change). Results that failed or recompiled while timed are left out.</p>"
    )
    body += [_figure_html(fig, f"chart-speedup-{i}") for i, fig in enumerate(speedup_figures(report))]
    replays = replay_figures(report)
    if replays:
        body.append("<h2>Shape-traffic replay</h2>")
        body.append(
            '<p class="meta">Per size, the warm median time of a call, eager and under each policy; then the time '
            "the whole sequence took so far, call after call, compiles included: where a policy's curve crosses "
            "below eager's, compiling has paid for itself.</p>"
        )
        body += [_figure_html(fig, div) for div, fig in replays]
    body.append("<h2>Compile latency per configuration</h2>")
    body.append(_figure_html(compile_figure(report), "chart-compile"))
    body.append("<h2>Eager vs compiled time per device model</h2>")
    body.append(_figure_html(times_figure(report), "chart-times"))
    body.append("<h2>Raw samples of one result</h2>")
    body.append(_samples_section(report))
    body.append("<h2>Failures</h2>")
    body.append(_failures(report))
    traces = _traces(report)
    if traces:
        body.append("<h2>Compile traces</h2>")
        body.append(traces)
    body.append("<h2>Every result</h2>")
    body.append(_table(results_rows(report.results, report.name, report.environment.calibration)))
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(report.name)}: compilebench report</title>"
        f"<style>{CSS}</style><script>{get_plotlyjs()}</script></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


# ---------------------------------------------------------------------------------------- charts


def speedup_figures(report: Report) -> list[go.Figure]:
    """One grouped bar chart per device model: a bar per configuration, 95% whiskers, a line at 1.0x.
    Where experiments ran more than once, each replicate has its bar (``seed.foo r1``)."""
    import plotly.graph_objects as go

    replicated = has_replicates(report.results)

    by_model: dict[str, list[Result]] = defaultdict(list)
    for r in report.results:
        if valid_timing(r):
            by_model[device_model(r) or "unknown device"].append(r)
    figures = []
    speedups_all = [v for r in report.results if valid_timing(r) for v in (r.speedup_ci or (r.speedup or 1.0,) * 2)]
    for model, rs in sorted(by_model.items()):
        configs = list(dict.fromkeys(r.config_label for r in rs))
        fig = go.Figure()
        for i, config in enumerate(configs):
            mine = [r for r in rs if r.config_label == config]
            speedups = [r.speedup or 0.0 for r in mine]
            fig.add_trace(
                go.Bar(
                    name=config,
                    x=[_group_of(r) + (f" r{r.replicate}" if replicated else "") for r in mine],
                    y=speedups,
                    marker_color=COLORS[i % len(COLORS)],
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": [
                            (r.speedup_ci[1] - s) if r.speedup_ci else 0 for r, s in zip(mine, speedups, strict=True)
                        ],
                        "arrayminus": [
                            (s - r.speedup_ci[0]) if r.speedup_ci else 0 for r, s in zip(mine, speedups, strict=True)
                        ],
                        "thickness": 1.5,
                        "color": "#333",
                    },
                    hovertemplate="%{x}<br>" + _e(config) + ": %{y:.2f}x<extra></extra>",
                )
            )
        fig.add_hline(y=1.0, line={"color": "#c0392b", "dash": "dash", "width": 1.5})
        fig.add_annotation(  # on a log axis an annotation's y is log10 of the value: 0 is 1.0x
            text="1.0x: no change",
            x=0,
            xref="paper",
            y=0,
            yref="y",
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"color": "#c0392b"},
            bgcolor="rgba(255, 255, 255, 0.8)",
        )
        fig.update_layout(
            title={"text": f"speedup on {model}"},
            barmode="group",
            yaxis={"title": {"text": "speedup (log scale)"}, "type": "log", **_log_ticks(speedups_all, "x")},
            legend={"orientation": "h", "y": -0.25},
            margin={"t": 50, "b": 40},
            height=460,
        )
        figures.append(fig)
    return figures or [_empty_figure("no valid timings to chart")]


def pareto_figure(report: Report) -> go.Figure:
    """Speedup lower bound against compile latency (both log), one point per configuration per group, a
    colour per group: stars (joined by a line, named) for the Pareto set, circles for the other candidates,
    crosses for the configurations that may not be shipped. A configuration without an interval (a
    replay) is placed at its point speedup; without a compile latency it has no point."""
    import plotly.graph_objects as go

    fig = go.Figure()
    values: list[float] = []
    xs_all: list[float] = []
    decided = [g for g in report.summary.groups if g.decision is not None]
    for i, group in enumerate(decided):
        assert group.decision is not None  # decided: for mypy
        name = f"{group.label} ({group.device_model})" if len(report.summary.devices) > 1 else group.label
        points = [c for c in group.decision.configs if c.compile_s and (c.lower or c.speedup)]
        kinds = (
            ("Pareto set", [c for c in points if c.pareto], "star", "lines+markers+text"),
            ("other candidates", [c for c in points if c.candidate and not c.pareto], "circle", "markers"),
            ("not shipped", [c for c in points if not c.candidate], "x", "markers"),
        )
        shown = False
        for kind, configs, symbol, mode in kinds:
            if not configs:
                continue
            configs = sorted(configs, key=lambda c: c.compile_s or 0.0)
            ys = [c.lower or c.speedup or 0.0 for c in configs]
            xs = [c.compile_s or 0.0 for c in configs]
            values += ys
            xs_all += xs
            fig.add_trace(
                go.Scatter(
                    name=name,
                    legendgroup=name,
                    showlegend=not shown,
                    x=xs,
                    y=ys,
                    mode=mode,
                    line={"color": COLORS[i % len(COLORS)], "dash": "dot", "width": 1},
                    marker={
                        "symbol": symbol,
                        "size": 15 if symbol == "star" else 10,
                        "color": COLORS[i % len(COLORS)],
                        "opacity": 0.5 if symbol == "x" else 1.0,
                        "line": {"width": 1, "color": "#fff"},
                    },
                    text=[c.config for c in configs],  # shown beside the Pareto set's stars
                    textposition="top center",
                    cliponaxis=False,  # a name near the edge is drawn whole
                    customdata=[
                        _pareto_hover(group.label, c.config, kind, c.excluded, c.compile_label) for c in configs
                    ],
                    hovertemplate="%{customdata}<br>%{y:.2f}x at %{x:.3g} s<extra></extra>",
                )
            )
            shown = True
    if not fig.data:
        return _empty_figure("no configuration has a speedup and a compile latency to chart")
    fig.add_hline(y=1.0, line={"color": "#c0392b", "dash": "dash", "width": 1.5})
    fig.update_layout(
        xaxis={"title": {"text": "compile latency charged, s (log scale)"}, "type": "log", **_log_ticks(xs_all)},
        yaxis={
            "title": {"text": "speedup: lower 95% bound, or the point without one (log)"},
            "type": "log",
            **_log_ticks([*values, 1.0], "x"),
        },
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 30, "b": 40},
        height=460,
    )
    return fig


def _pareto_hover(group: str, config: str, kind: str, excluded: str | None, label: str | None) -> str:
    why = f" ({excluded})" if excluded else ""
    return f"{_e(group)} [{_e(config)}]: {kind}{_e(why)}<br>compile: {_e(label or '-')}"


def replay_figures(report: Report) -> list[tuple[str, go.Figure]]:
    """Per replayed traffic (``replay.traffic_groups``), two charts with their div ids: the warm median of a
    call per size, eager beside each policy; and the cumulative time over the call sequence, eager's and
    each policy's, compiles included (``ReplayResult.cumulative_ms``)."""
    import plotly.graph_objects as go

    out = []
    for i, group in enumerate(traffic_groups(report.results)):
        first, traffic = group[0]
        label = group_label(first.target, first.params, first.phase, first.precision)
        sizes = [f"{traffic.param}={s.value}" for s in traffic.per_shape]
        bars = go.Figure()
        eager = [statistics.median(rp.per_shape[k].eager_ms for _, rp in group) for k in range(len(sizes))]
        bars.add_trace(go.Bar(name="eager", x=sizes, y=eager, marker_color="#8c8c8c"))
        curves = go.Figure()
        curves.add_trace(
            go.Scatter(
                name="eager",
                x=traffic.cumulative_at,
                y=[ms / 1e3 for ms in traffic.cumulative_ms.get("eager", [])],
                mode="lines",
                line={"color": "#555", "dash": "dash", "width": 2},
            )
        )
        for j, (r, rp) in enumerate(group):
            color = COLORS[j % len(COLORS)]
            bars.add_trace(
                go.Bar(name=r.config_label, x=sizes, y=[s.compiled_ms for s in rp.per_shape], marker_color=color)
            )
            curves.add_trace(
                go.Scatter(
                    name=r.config_label,
                    x=rp.cumulative_at,
                    y=[ms / 1e3 for ms in rp.cumulative_ms.get("compiled", [])],
                    mode="lines",
                    line={"color": color, "width": 2},
                )
            )
        bars.update_layout(
            title={"text": f"{label}: ms per call by size, warm"},
            barmode="group",
            yaxis={"title": {"text": "median ms per call"}, "rangemode": "tozero"},
            legend={"orientation": "h", "y": -0.25},
            margin={"t": 50, "b": 40},
            height=420,
        )
        curves.update_layout(
            title={"text": f"{label}: time for the first n of {traffic.calls:,} calls, compiles included"},
            xaxis={"title": {"text": "calls served"}},
            yaxis={"title": {"text": "cumulative time, s"}, "rangemode": "tozero"},
            legend={"orientation": "h", "y": -0.25},
            margin={"t": 50, "b": 40},
            height=420,
        )
        out += [(f"chart-replay-sizes-{i}", bars), (f"chart-replay-cumulative-{i}", curves)]
    return out


def compile_figure(report: Report) -> go.Figure:
    """Compile latency (first compiled call) per configuration, cold and warm caches as separate boxes;
    each point says how the caches served it (``warm: hit``, ``cold: miss``)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    latencies = [r.compile_latency_s for r in report.results if r.compile_latency_s]
    for i, cache in enumerate(("warm", "cold")):
        rs = [r for r in report.results if r.compile_latency_s and r.compile.cache == cache]
        if not rs:
            continue
        fig.add_trace(
            go.Box(
                name=f"{cache} cache",
                x=[r.config_label.removesuffix("+cold") for r in rs],
                y=[r.compile_latency_s for r in rs],
                text=[f"{_group_of(r)} ({cache_text(r)})" for r in rs],
                boxpoints="all",
                jitter=0.3,
                pointpos=0,
                marker_color=COLORS[i],
                hovertemplate="%{text}<br>%{x}: %{y:.3f} s<extra>" + cache + "</extra>",
            )
        )
    if not fig.data:
        return _empty_figure("no compile latencies in this report")
    fig.update_layout(
        boxmode="group",
        showlegend=True,
        yaxis={"title": {"text": "compile latency, s (log scale)"}, "type": "log", **_log_ticks(latencies)},
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 30, "b": 40},
        height=420,
    )
    return fig


def times_figure(report: Report) -> go.Figure:
    """Each result's eager median against its compiled median, one colour per device model; below the
    diagonal, compiled is faster."""
    import plotly.graph_objects as go

    by_model: dict[str, list[Result]] = defaultdict(list)
    for r in report.results:
        if r.eager and r.compiled and r.status in ("ok", "incorrect"):
            by_model[device_model(r) or "unknown device"].append(r)
    if not by_model:
        return _empty_figure("no result has both sides timed")
    fig = go.Figure()
    values = []
    for i, (model, rs) in enumerate(sorted(by_model.items())):
        xs = [r.eager.median_ms for r in rs if r.eager]
        ys = [r.compiled.median_ms for r in rs if r.compiled]
        values += xs + ys
        fig.add_trace(
            go.Scatter(
                name=model,
                x=xs,
                y=ys,
                mode="markers",
                marker={"size": 10, "color": COLORS[i % len(COLORS)], "line": {"width": 1, "color": "#fff"}},
                text=[f"{_group_of(r)} [{r.config_label}] {r.speedup or 0:.2f}x" for r in rs],
                hovertemplate="%{text}<br>eager %{x:.4g} ms, compiled %{y:.4g} ms<extra></extra>",
            )
        )
    low, high = min(values) / 1.5, max(values) * 1.5
    fig.add_trace(
        go.Scatter(
            name="same time",
            x=[low, high],
            y=[low, high],
            mode="lines",
            line={"color": "#999", "dash": "dash"},
            hoverinfo="skip",
        )
    )
    fig.update_layout(
        xaxis={"title": {"text": "eager median, ms"}, "type": "log", **_log_ticks(values)},
        yaxis={"title": {"text": "compiled median, ms (below the line: faster)"}, "type": "log", **_log_ticks(values)},
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 30},
        height=480,
    )
    return fig


def samples_data(report: Report) -> list[dict[str, Any]]:
    """The raw samples of each timed result (at most ``MAX_SAMPLE_RESULTS``), for the selector."""
    out = []
    for r in report.results:
        sides = [
            {"name": name, "samples": s.samples_ms} for name, s in (("eager", r.eager), ("compiled", r.compiled)) if s
        ]
        if not sides:
            continue
        title = f"{_group_of(r)} [{r.config_label}]: {r.status}" + (f", {r.speedup:.2f}x" if r.speedup else "")
        out.append({"label": f"{_group_of(r)} [{r.config_label}]", "title": title, "sides": sides})
        if len(out) == MAX_SAMPLE_RESULTS:
            break
    return out


# ------------------------------------------------------------------------------------------ html


def _header(report: Report) -> str:
    env = report.environment
    lines = headline(report)
    parts = [f"<h1>{_e(report.name)}</h1>"]
    parts.append(
        f'<p class="meta">created {_e(report.created_at)} · torch {_e(env.torch)} · Python {_e(env.python)} · '
        f"Ray {_e(env.ray)} · {_e(env.platform)} · {len(env.nodes)} node(s)</p>"
    )
    for line in lines[:-1]:
        kind = "incomplete" if line.startswith("INCOMPLETE") else "warning"
        parts.append(f'<div class="banner {kind}">{_e(line)}</div>')
    parts.append(f"<p><b>{_e(lines[-1])}</b></p>")
    return "\n".join(parts)


def _table(rows: Rows) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in rows.headers)
    body = []
    for row in rows.rows:
        cells = []
        for h, cell in zip(rows.headers, row, strict=True):
            cls = "num" if h in rows.right else ""
            if bad(h, cell):
                cls = "bad"
            elif cell == TIE_TEXT:
                cls = "tie"
            cells.append(f'<td class="{cls}">{_e(cell)}</td>' if cls else f"<td>{_e(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in rows.notes)
    return (
        f"<h3>{_e(rows.title)}</h3><div class='scroll'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>" + (f"<ul class='notes'>{notes}</ul>" if notes else "")
    )


def _samples_section(report: Report) -> str:
    data = samples_data(report)
    if not data:
        return "<p>No result has raw samples.</p>"
    options = "".join(f'<option value="{i}">{_e(d["label"])}</option>' for i, d in enumerate(data))
    payload = json.dumps(data).replace("</", "<\\/")
    return (
        f'<p><label for="samples-select">result: </label><select id="samples-select">{options}</select></p>'
        f'<div id="chart-samples" class="chart"></div>'
        f'<script type="application/json" id="samples-data">{payload}</script>'
        f"<script>{SAMPLES_JS}</script>"
    )


def _failures(report: Report) -> str:
    failed = [r for r in report.results if r.status != "ok"]
    if not failed:
        return "<p>None: every experiment is ok.</p>"
    rows = []
    for r in failed:
        error = r.error
        message = error.message if error else (r.check_note or "")
        kind = error.type if error else "-"
        rows.append(
            f"<tr><td>{_e(_group_of(r))}</td><td>{_e(r.config_label)}</td><td class='bad'>{_e(r.status)}</td>"
            f"<td>{_e(kind)}</td><td><details><summary>{_e(first_line(message, 120))}</summary>"
            f"<pre>{_e(message)}</pre></details></td></tr>"
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
        note = f"<span class='bad'>{_e(trace.error)}</span>" if trace.error else ""
        rows.append(
            f"<tr><td>{_e(_group_of(r))}</td><td>{_e(r.config_label)}</td><td class='num'>{r.replicate}</td>"
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
    return f'<a href="{_e(quote(path))}">{_e(text)}</a>'


def _figure_html(fig: go.Figure, div_id: str) -> str:
    return str(
        fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG, default_width="100%")
    )


def _empty_figure(message: str) -> go.Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font={"size": 16})
    fig.update_layout(height=200, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def _log_ticks(values: list[float], suffix: str = "") -> dict[str, Any]:
    """Ticks at 1, 2 and 5 of each decade the values span, labelled plainly (``0.5x``, ``20``)."""
    values = [v for v in values if v > 0]
    if not values:
        return {}
    low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    ticks = [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]
    return {"tickvals": ticks, "ticktext": [f"{t:g}{suffix}" for t in ticks]}


def _group_of(r: Result) -> str:
    return group_label(r.target, r.params, r.phase, r.precision)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
