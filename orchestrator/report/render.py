"""Rendering a report for people and programs: the terminal (rich), Markdown, CSV.

The terminal and Markdown draw the report's views (``views``) with the cells' table builders
(``cells``); the CSV is one flat row per result, for spreadsheets and pandas. Imports the views
and what is below them; the HTML page (``html``) is a format of its own.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.report.cells import SCREENFUL, Rows, clipped, markdown_table, rich_table
from orchestrator.report.models import Outline, Report, Summary
from orchestrator.report.summary import device_model
from orchestrator.report.views import (
    groups_rows,
    has_replicates,
    headline,
    on_slow_device,
    results_rows,
    slow_devices,
    views,
)
from tasks.models import Calibration, Result, SideTiming
from tasks.text import first_line
from tasks.throughput import achieved

# ------------------------------------------------------------------------------------- terminal


def results_table(
    results: Sequence[Result], title: str | None = None, calibration: Sequence[Calibration] = ()
) -> Table:
    return rich_table(results_rows(results, title or "results", calibration))


def summary_table(summary: Summary) -> Table:
    """The best configuration of each group (the device tables follow in ``print_report``)."""
    return rich_table(groups_rows(summary))


def print_report(console: Console, report: Report, results: bool = True, shown: Sequence[Rows] | None = None) -> None:
    """The whole report on a terminal: warnings first, the results, then the summary (``shown``: its
    ``views``, where they were worked out already). ``report`` may be a big report's ``Outline``.

    Past a screenful (``SCREENFUL``) of results the table of results is left out, and each summary table
    shows its first rows and says how many more there are and how to see them all (``--format markdown``,
    ``--format csv``): the device tables, a row per configuration, are the aggregates that stay.
    """
    for line in headline(report)[:-1]:
        console.print(Text(line, style="bold yellow"), soft_wrap=True)
    count = report.result_count if isinstance(report, Outline) else len(report.results)
    many = count > SCREENFUL
    if results and not many:
        console.print(results_table(report.results, title=report.name, calibration=report.environment.calibration))
    elif results:
        console.print(
            Text(f"{report.name}: {count:,} results, one row each with --format csv (or markdown)"), soft_wrap=True
        )
    for view in views(report, SCREENFUL if many else None) if shown is None else shown:
        view = clipped(view, rest="every row with --format markdown, every result with --format csv") if many else view
        console.print(rich_table(view))
        for note in view.notes:
            console.print(Text(f"  {note}"), soft_wrap=True)
    console.print(Text(headline(report)[-1]))


# ------------------------------------------------------------------------------------- markdown


def markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown, for pull requests and wikis."""
    out = [f"# {report.name}", ""]
    lines = headline(report)
    for line in lines[:-1]:  # each warning a quoted paragraph of its own
        out += [f"> **{line}**", ""]
    out += [lines[-1], "", markdown_table(results_rows(report.results, calibration=report.environment.calibration))]
    for view in views(report):
        out += ["", markdown_table(view)]
        out += [f"- {note}" for note in view.notes]
    env = report.environment
    out += ["", f"torch {env.torch}, Python {env.python}, Ray {env.ray}, {env.platform}; created {report.created_at}"]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------ CSV

CSV_COLUMNS = [
    "experiment_id", "target", "params", "phase", "precision", "device", "device_model", "gpu_model",
    "backend", "mode", "fullgraph", "dynamic", "method", "cache", "options", "seed",
    "status", "error_type", "error_message", "correct",
    "eager_median_ms", "eager_min_ms", "eager_iqr_ms", "eager_n", "eager_first_call_ms", "eager_peak_memory_bytes",
    "compiled_median_ms", "compiled_min_ms", "compiled_iqr_ms", "compiled_n", "compiled_first_call_ms",
    "compiled_peak_memory_bytes", "speedup", "speedup_ci_low", "speedup_ci_high", "memory_ratio",
    "compile_latency_s", "graphs_compiled", "graph_count", "graph_breaks", "recompiled",
    "flops", "bytes", "eager_tflops", "eager_gbps", "compiled_tflops", "compiled_gbps",
    "attempts", "hostname", "gpu_name", "cpu_model", "started_at", "finished_at",
]  # fmt: skip


def csv_text(report: Report) -> str:
    """One row per result, flat columns (params and options as JSON), for spreadsheets and pandas.

    ``replicate`` follows ``experiment_id`` when some experiment ran more than once; ``calibration``
    (the worker's entry) and ``slow`` close the row when the report holds calibrated workers.
    """
    columns = list(CSV_COLUMNS)
    if has_replicates(report.results):
        columns.insert(1, "replicate")
    slow = slow_devices(report.environment.calibration)
    calibrated = bool(report.environment.calibration) or any(r.worker and r.worker.calibration for r in report.results)
    if calibrated:
        columns += ["calibration", "slow"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for r in report.results:
        row = csv_row(r)
        if calibrated:
            entry = r.worker.calibration if r.worker else None
            row |= {"calibration": entry.id if entry else None, "slow": on_slow_device(r, slow) if entry else None}
        writer.writerow(row)
    return buffer.getvalue()


def csv_row(r: Result) -> dict[str, Any]:
    def side(prefix: str, s: SideTiming | None) -> dict[str, Any]:
        keys = ("median_ms", "min_ms", "iqr_ms", "n", "first_call_ms", "peak_memory_bytes")
        return {f"{prefix}_{k}": getattr(s, k) if s else None for k in keys}

    work, worker, ci = r.work, r.worker, r.speedup_ci
    eager_rates = achieved(work, r.eager.median_ms if r.eager else None)
    compiled_rates = achieved(work, r.compiled.median_ms if r.compiled else None)
    return {
        "experiment_id": r.experiment_id,
        "replicate": r.replicate,
        "target": r.target,
        "params": json.dumps(r.params, sort_keys=True),
        "phase": r.phase,
        "precision": r.precision,
        "device": r.device,
        "device_model": device_model(r),
        "gpu_model": r.gpu_model,
        "backend": r.compile.backend,
        "mode": r.compile.mode,
        "fullgraph": r.compile.fullgraph,
        "dynamic": r.compile.dynamic,
        "method": r.compile.method,
        "cache": r.compile.cache,
        "options": json.dumps(r.compile.options, sort_keys=True) if r.compile.options else "",
        "seed": r.seed,
        "status": r.status,
        "error_type": r.error.type if r.error else None,
        "error_message": first_line(r.error.message, limit=160) if r.error else None,
        "correct": r.correct,
        **side("eager", r.eager),
        **side("compiled", r.compiled),
        "speedup": r.speedup,
        "speedup_ci_low": ci[0] if ci else None,
        "speedup_ci_high": ci[1] if ci else None,
        "memory_ratio": r.memory_ratio,
        "compile_latency_s": r.compile_latency_s,
        "graphs_compiled": r.graphs_compiled,
        "graph_count": r.graph_count,
        "graph_breaks": r.graph_breaks,
        "recompiled": r.recompiled,
        "flops": work.flops if work else None,
        "bytes": work.bytes if work else None,
        "eager_tflops": eager_rates.tflops,
        "eager_gbps": eager_rates.gbps,
        "compiled_tflops": compiled_rates.tflops,
        "compiled_gbps": compiled_rates.gbps,
        "attempts": r.attempts,
        "hostname": worker.hostname if worker else None,
        "gpu_name": worker.gpu_name if worker else None,
        "cpu_model": worker.cpu_model if worker else None,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    }
