"""One self-contained HTML page for a history: every series over time, its change points marked.

Built from the parts every page shares (``page``: styles, the table, the document with plotly.js inlined
once in its head); each series is one plotly chart. Imports the history and the page's parts.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from orchestrator.report.history import (
    History,
    Series,
    change_text,
    detectable_text,
    headline,
    noise_text,
    quiet_rows,
    rows,
    value_text,
)
from orchestrator.report.page import COLORS, document, escape, figure_html, table_html

if TYPE_CHECKING:
    import plotly.graph_objects as go

MAX_CHARTS: Final = 400  # series charted on one page (those with changes first); the table lists every change
AXIS_TITLES: Final = {
    "speedup": "speedup (eager / compiled)",
    "eager_ms": "eager median, ms",
    "compiled_ms": "compiled median, ms",
    "compile_s_cold": "compile latency (cold caches), s",
    "compile_s_warm": "compile latency (warm caches), s",
    "compile_s_shared": "compile latency (loaded from the shared cache), s",
}
CHANGE_COLOR: Final = "#c0392b"
MIN_Y_PAD: Final = 0.02  # the y axis spans at least 2% of a series' largest value either side of it


def render_history_html(history: History, reports: int) -> str:
    """The page as one string: the headline, the changes table, the series without one (what each could have
    shown), then one chart per series."""
    view, quiet = rows(history), quiet_rows(history)
    body = ["<h1>compilebench history</h1>", f'<p class="meta">{escape(headline(history, reports))}</p>']
    body.append(table_html(view) if view.rows else "<p>No change in any series.</p>")
    if quiet.rows:
        body.append(table_html(quiet))
    body.append("<h2>Series</h2>")
    body.append(
        '<p class="meta">One point per report, in the order the reports were created (UTC): the median of its '
        "valid results. Dashed red lines mark change points (hover the cross for the change and its p-value); "
        "grey steps are the medians of the segments between them.</p>"
    )
    ordered = sorted(history.series, key=lambda s: not s.changes)  # series that changed first, else as listed
    body += [figure_html(series_figure(s), f"chart-series-{i}") for i, s in enumerate(ordered[:MAX_CHARTS])]
    if len(ordered) > MAX_CHARTS:
        body.append(f'<p class="meta">{len(ordered) - MAX_CHARTS} more series without charts.</p>')
    if not ordered:
        body.append("<p>No series: no report holds a valid result.</p>")
    return document("compilebench history", body)


def series_figure(series: Series) -> go.Figure:
    """The series' points over time, the medians of its segments, and a marked line at each change."""
    import plotly.graph_objects as go

    xs = [_utc(p.created_at) for p in series.points]
    ys = [p.value for p in series.points]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name=series.metric,
            x=xs,
            y=ys,
            mode="lines+markers",
            marker={"size": 7, "color": COLORS[0]},
            line={"color": COLORS[0], "width": 1.5},
            text=[f"{p.report}: {value_text(series.metric, p.value)}" for p in series.points],
            hovertemplate="%{text}<br>%{x}<extra></extra>",
        )
    )
    bounds = [0, *(c.index for c in series.changes), len(ys)]
    levels = [*(c.before for c in series.changes), series.changes[-1].after] if series.changes else []
    for (start, end), level in zip(itertools.pairwise(bounds), levels, strict=bool(levels)):
        fig.add_trace(
            go.Scatter(
                name="segment median",
                x=[xs[start], xs[end - 1]],
                y=[level, level],
                mode="lines",
                line={"color": "#888", "dash": "dot", "width": 2},
                hoverinfo="skip",
                showlegend=start == 0,
            )
        )
    for change in series.changes:
        fig.add_shape(
            type="line",
            x0=xs[change.index],
            x1=xs[change.index],
            yref="paper",
            y0=0,
            y1=1,
            line={"color": CHANGE_COLOR, "dash": "dash", "width": 1.5},
        )
    if series.changes:
        fig.add_trace(
            go.Scatter(
                name="change point",
                x=[xs[c.index] for c in series.changes],
                y=[c.after for c in series.changes],
                mode="markers",
                marker={"symbol": "x", "size": 12, "color": CHANGE_COLOR},
                text=[change_text(series, c) for c in series.changes],
                hovertemplate="%{text}<extra>change</extra>",
            )
        )
    fig.update_layout(
        title={
            "text": f"{series.label}: {series.metric}<br><sup>noise {noise_text(series)}, "
            f"smallest detectable step {detectable_text(series)}</sup>"
        },
        xaxis={"title": {"text": "report created (UTC)"}},
        yaxis={"title": {"text": AXIS_TITLES[series.metric]}, "range": _y_range(ys)},
        legend={"orientation": "h", "y": -0.3},
        margin={"t": 50, "b": 40},
        height=340,
    )
    return fig


def _y_range(values: list[float]) -> list[float]:
    """The values' span padded by a tenth of it, and by at least ``MIN_Y_PAD`` of the largest: a flat
    series is drawn flat, not as float rounding magnified to fill the chart."""
    low, high = min(values), max(values)
    pad = max((high - low) / 10, MIN_Y_PAD * high)
    return [low - pad, high + pad]


def _utc(created_at: str) -> str:
    """An ISO 8601 time as plotly's date axis reads it: ``2026-01-07 03:00:00``, in UTC."""
    when = datetime.fromisoformat(created_at)
    when = when.astimezone(UTC) if when.tzinfo else when
    return when.strftime("%Y-%m-%d %H:%M:%S")
