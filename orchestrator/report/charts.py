"""The charts of a report's HTML page, each a plotly figure built from the report: speedups with their
intervals, the Pareto set of what to ship, the replays' traffic, compile latencies, eager against
compiled times, distributed experiments' per-rank step times and compile's speedup across world sizes.

A chart is data to draw, not a page: the page (``html``) places each figure with ``page.figure_html``.
Imports the views, the replay and ranks views (for the groups and labels they share), the summary and
the page's palette; plotly is imported when a chart is built, never on import.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from orchestrator.report.digest import Digest
from orchestrator.report.models import Report, result_group
from orchestrator.report.page import COLORS, escape
from orchestrator.report.ranks import distributed, scaling
from orchestrator.report.replay import traffic_groups
from orchestrator.report.summary import valid_timing
from orchestrator.report.views import as_digests, cache_text, has_replicates
from tasks.models import Result

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Groups drawn as traces of their own on the Pareto chart (a colour and a legend entry each); past it the points
# of every group are pooled into a trace per kind (Pareto set, other candidates, not shipped), each point's group
# in its hover: 8,000 groups of a 100,000-result sweep are 8,000 traces, a minute of plotly and a page too slow.
MAX_PARETO_GROUPS: Final = 40
# Results drawn as bars of their own on a device model's speedup chart; past it each configuration is one box of
# its results' speedups (every point still in it, its group in the hover): 100,000 bars are no chart to read.
MAX_SPEEDUP_BARS: Final = 400


def column(values: list[Any]) -> Any:
    """A trace's column as a numpy array: plotly checks and copies a list element by element (and deep-copies
    it with the trace), an array whole; numbers are then written to the page as base64 rather than as text.
    At 10,000 results the page's points took 2 of its 3 s as lists. Text is a fixed-width string array where
    every item is a string (plotly deep-copies a figure's arrays: an object array item by item, 2 s of the page of
    100,000 results, a string array whole), else an object array."""
    import numpy as np

    if all(isinstance(v, int | float) for v in values):
        return np.asarray(values, dtype=float)
    return np.asarray(values, dtype=str if all(isinstance(v, str) for v in values) else object)


def speedup_figures(results: Sequence[Result] | Sequence[Digest]) -> list[go.Figure]:
    """One grouped bar chart per device model: a bar per configuration, 95% whiskers, a line at 1.0x.
    Where experiments ran more than once, each replicate has its bar (``seed.foo r1``). Past
    ``MAX_SPEEDUP_BARS`` results on a device model, a box per configuration of its results' speedups. Drawn
    from the results' digests (``views.as_digests``)."""
    import plotly.graph_objects as go

    digests = as_digests(results)
    replicated = has_replicates(digests)
    valid = [d for d in digests if valid_timing(d)]
    by_model: dict[str, list[Digest]] = defaultdict(list)
    for d in valid:
        by_model[d.device_model or "unknown device"].append(d)
    figures = []
    speedups_all = [v for d in valid for v in (d.speedup_ci or (d.speedup or 1.0,) * 2)]
    for model, rs in sorted(by_model.items()):
        by_config: dict[str, list[Digest]] = defaultdict(list)  # in the order the results first name them
        for r in rs:
            by_config[r.config].append(r)
        fig = go.Figure()
        for i, (config, mine) in enumerate(by_config.items()):
            speedups = [r.speedup or 0.0 for r in mine]
            if len(rs) > MAX_SPEEDUP_BARS:
                fig.add_trace(
                    go.Box(
                        name=config,
                        y=column(speedups),
                        text=column([r.group for r in mine]),
                        boxpoints="outliers",
                        marker_color=COLORS[i % len(COLORS)],
                        hovertemplate="%{text}<br>" + escape(config) + ": %{y:.2f}x<extra></extra>",
                    )
                )
                continue
            fig.add_trace(
                go.Bar(
                    name=config,
                    x=column([r.group + (f" r{r.replicate}" if replicated else "") for r in mine]),
                    y=column(speedups),
                    marker_color=COLORS[i % len(COLORS)],
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": column(
                            [(r.speedup_ci[1] - s) if r.speedup_ci else 0 for r, s in zip(mine, speedups, strict=True)]
                        ),
                        "arrayminus": column(
                            [(s - r.speedup_ci[0]) if r.speedup_ci else 0 for r, s in zip(mine, speedups, strict=True)]
                        ),
                        "thickness": 1.5,
                        "color": "#333",
                    },
                    hovertemplate="%{x}<br>" + escape(config) + ": %{y:.2f}x<extra></extra>",
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
        pooled = f": a box per configuration over {len(rs):,} results" if len(rs) > MAX_SPEEDUP_BARS else ""
        fig.update_layout(
            title={"text": f"speedup on {model}{pooled}"},
            barmode="group",
            yaxis={"title": {"text": "speedup (log scale)"}, "type": "log", **log_ticks(speedups_all, "x")},
            legend={"orientation": "h", "y": -0.25},
            margin={"t": 50, "b": 40},
            height=460,
        )
        figures.append(fig)
    return figures or [empty_figure("no valid timings to chart")]


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
    pooled = len(decided) > MAX_PARETO_GROUPS
    pools: dict[str, tuple[list[float], list[float], list[str]]] = {}
    for i, group in enumerate(decided):
        assert group.decision is not None  # decided: for mypy
        label = group.label  # made once, not once a configuration
        name = f"{label} ({group.device_model})" if len(report.summary.devices) > 1 else label
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
            hover = [_pareto_hover(label, c.config, kind, c.excluded, c.compile_label) for c in configs]
            if pooled:
                pool_xs, pool_ys, pool_hover = pools.setdefault(kind, ([], [], []))
                pool_xs.extend(xs)
                pool_ys.extend(ys)
                pool_hover.extend(hover)
                continue
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
                    customdata=hover,
                    hovertemplate="%{customdata}<br>%{y:.2f}x at %{x:.3g} s<extra></extra>",
                )
            )
            shown = True
    for n, (kind, (xs, ys, hover)) in enumerate(pools.items()):  # past MAX_PARETO_GROUPS: a trace per kind
        symbol = {"Pareto set": "star", "other candidates": "circle"}.get(kind, "x")
        fig.add_trace(
            go.Scattergl(
                name=f"{kind} ({len(xs):,})",
                x=column(xs),
                y=column(ys),
                mode="markers",
                marker={"symbol": symbol, "size": 8, "color": COLORS[n % len(COLORS)], "opacity": 0.6},
                customdata=column(hover),
                hovertemplate="%{customdata}<br>%{y:.2f}x at %{x:.3g} s<extra></extra>",
            )
        )
    if not fig.data:
        return empty_figure("no configuration has a speedup and a compile latency to chart")
    fig.add_hline(y=1.0, line={"color": "#c0392b", "dash": "dash", "width": 1.5})
    fig.update_layout(
        xaxis={"title": {"text": "compile latency charged, s (log scale)"}, "type": "log", **log_ticks(xs_all)},
        yaxis={
            "title": {"text": "speedup: lower 95% bound, or the point without one (log)"},
            "type": "log",
            **log_ticks([*values, 1.0], "x"),
        },
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 30, "b": 40},
        height=460,
    )
    return fig


def _pareto_hover(group: str, config: str, kind: str, excluded: str | None, label: str | None) -> str:
    why = f" ({excluded})" if excluded else ""
    return f"{escape(group)} [{escape(config)}]: {kind}{escape(why)}<br>compile: {escape(label or '-')}"


def replay_figures(report: Report) -> list[tuple[str, go.Figure]]:
    """Per replayed traffic (``replay.traffic_groups``), two charts with their div ids: the warm median of a
    call per size, eager beside each policy; and the cumulative time over the call sequence, eager's and
    each policy's, compiles included (``ReplayResult.cumulative_ms``)."""
    import plotly.graph_objects as go

    out = []
    for i, group in enumerate(traffic_groups(report.results)):
        first, traffic = group[0]
        label = result_group(first)
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


def compile_figure(results: Sequence[Result] | Sequence[Digest]) -> go.Figure:
    """Compile latency (first compiled call) per configuration, cold and warm caches as separate boxes;
    each point says how the caches served it (``warm: hit``, ``cold: miss``). Drawn from the results' digests."""
    import plotly.graph_objects as go

    digests = as_digests(results)
    fig = go.Figure()
    latencies = [d.compile_latency_s for d in digests if d.compile_latency_s]
    for i, cache in enumerate(("warm", "cold")):
        rs = [d for d in digests if d.compile_latency_s and d.cache == cache]
        if not rs:
            continue
        fig.add_trace(
            go.Box(
                name=f"{cache} cache",
                x=column([r.config.removesuffix("+cold") for r in rs]),
                y=column([r.compile_latency_s for r in rs]),
                text=column([f"{r.group} ({cache_text(r)})" for r in rs]),
                boxpoints="all",
                jitter=0.3,
                pointpos=0,
                marker_color=COLORS[i],
                hovertemplate="%{text}<br>%{x}: %{y:.3f} s<extra>" + cache + "</extra>",
            )
        )
    if not fig.data:
        return empty_figure("no compile latencies in this report")
    fig.update_layout(
        boxmode="group",
        showlegend=True,
        yaxis={"title": {"text": "compile latency, s (log scale)"}, "type": "log", **log_ticks(latencies)},
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 30, "b": 40},
        height=420,
    )
    return fig


def times_figure(results: Sequence[Result] | Sequence[Digest]) -> go.Figure:
    """Each result's eager median against its compiled median, one colour per device model; below the
    diagonal, compiled is faster. Drawn from the results' digests."""
    import plotly.graph_objects as go

    by_model: dict[str, list[Digest]] = defaultdict(list)
    for d in as_digests(results):
        if d.eager_ms is not None and d.compiled_ms is not None and d.status in ("ok", "incorrect"):
            by_model[d.device_model or "unknown device"].append(d)
    if not by_model:
        return empty_figure("no result has both sides timed")
    fig = go.Figure()
    values: list[float] = []
    for i, (model, rs) in enumerate(sorted(by_model.items())):
        xs = [r.eager_ms for r in rs if r.eager_ms is not None]
        ys = [r.compiled_ms for r in rs if r.compiled_ms is not None]
        values += xs + ys
        fig.add_trace(
            go.Scatter(
                name=model,
                x=column(xs),
                y=column(ys),
                mode="markers",
                marker={"size": 10, "color": COLORS[i % len(COLORS)], "line": {"width": 1, "color": "#fff"}},
                text=column([f"{r.group} [{r.config}] {r.speedup or 0:.2f}x" for r in rs]),
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
        xaxis={"title": {"text": "eager median, ms"}, "type": "log", **log_ticks(values)},
        yaxis={"title": {"text": "compiled median, ms (below the line: faster)"}, "type": "log", **log_ticks(values)},
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 30},
        height=480,
    )
    return fig


def rank_figure(report: Report) -> go.Figure | None:
    """Each rank's median step time, eager and compiled, a bar a rank of each distributed result: a slow rank
    is the gang's step (ranks meet in collectives every step). None when no distributed result timed a rank."""
    import plotly.graph_objects as go

    rows = [(r, rank) for r in distributed(report.results) if r.distributed for rank in r.distributed.ranks]
    rows = [(r, rank) for r, rank in rows if rank.eager or rank.compiled]
    if not rows:
        return None
    fig = go.Figure()
    labels = [f"{result_group(r)} [{r.config_label}] rank {rank.rank}" for r, rank in rows]
    for i, side in enumerate(("eager", "compiled")):
        values = [getattr(rank, side).median_ms if getattr(rank, side) else None for _, rank in rows]
        fig.add_trace(go.Bar(name=side, x=labels, y=values, marker_color=COLORS[i]))
    fig.update_layout(
        barmode="group",
        yaxis={"title": {"text": "median step time, ms"}},
        legend={"orientation": "h", "y": -0.35},
        margin={"t": 30, "b": 140},
        height=460,
    )
    return fig


def scaling_figure(report: Report) -> go.Figure | None:
    """Compile's speedup at each world size, a line per target, strategy and configuration; the hover says
    each point's compiled throughput against one rank's. None when no distributed result is ok."""
    import plotly.graph_objects as go

    series = scaling(report.results)
    if not series:
        return None
    fig = go.Figure()
    for i, s in enumerate(series):
        points = [p for p in s.points if p.speedup is not None]
        fig.add_trace(
            go.Scatter(
                name=f"{s.label} [{s.config}]",
                x=[p.world_size for p in points],
                y=[p.speedup for p in points],
                mode="lines+markers",
                marker={"size": 10, "color": COLORS[i % len(COLORS)]},
                text=[f"compiled {_vs(s.vs_one_rank(p))} one rank's throughput" for p in points],
                hovertemplate="%{x} ranks: %{y:.2f}x<br>%{text}<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line_dash="dash", line_color="#999")
    fig.update_layout(
        xaxis={"title": {"text": "world size (ranks)"}, "dtick": 1},
        yaxis={"title": {"text": "compile speedup (eager step / compiled step)"}},
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 30},
        height=420,
    )
    return fig


def _vs(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def empty_figure(message: str) -> go.Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font={"size": 16})
    fig.update_layout(height=200, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def log_ticks(values: list[float], suffix: str = "") -> dict[str, Any]:
    """Ticks at 1, 2 and 5 of each decade the values span, labelled plainly (``0.5x``, ``20``)."""
    values = [v for v in values if v > 0]
    if not values:
        return {}
    low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    ticks = [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]
    return {"tickvals": ticks, "ticktext": [f"{t:g}{suffix}" for t in ticks]}
