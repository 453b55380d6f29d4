"""A report as the performance CSV of PyTorch's dynamo harness, for ``check_perf_csv.py`` and the tools that read it.

The harness (``benchmarks/dynamo/common.py``, ``speedup_experiment``) writes ``dev, name, batch_size,
speedup, abs_latency``, then ``compilation_latency, compression_ratio, eager_peak_mem, dynamo_peak_mem``,
then the counters of ``get_dynamo_stats`` in their order; those columns come first here, in that order
and in its units (ms per call, seconds, GB). After them, the columns that tell compilebench's results
apart where the harness writes one file per configuration: configuration, phase, precision, replicate,
status, experiment id. One row per result. Imports the report's models and ``export.mapping``.
"""

from __future__ import annotations

import csv
import io
from typing import Final

from orchestrator.report.export.mapping import batch_size, model_name, peak_gb
from orchestrator.report.models import Report
from tasks.result import Result

HARNESS_COLUMNS: Final = (
    "dev", "name", "batch_size", "speedup", "abs_latency",
    "compilation_latency", "compression_ratio", "eager_peak_mem", "dynamo_peak_mem",
    "calls_captured", "unique_graphs", "graph_breaks", "unique_graph_breaks",
    "autograd_captures", "autograd_compiles", "cudagraph_skips",
)  # fmt: skip
COLUMNS: Final = (*HARNESS_COLUMNS, "config", "phase", "precision", "replicate", "status", "experiment_id")
FAILED: Final = 0.0  # speedup and abs_latency of a result that was not timed: what the harness writes for a failure

Cell = str | int | float | None


def csv_text(report: Report) -> str:
    """The CSV: a header, then one row per result in the report's order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for result in report.results:
        writer.writerow(_cell(value) for value in row(result))
    return buffer.getvalue()


def row(result: Result) -> tuple[Cell, ...]:
    """One result's cells, in ``COLUMNS`` order. A figure not measured is empty (None), never a made-up 0,
    except the speedup and latency of a result that was not timed: 0, so a checker counts it failed."""
    timed = result.speedup is not None and result.compiled is not None
    skips = result.measurement.cudagraph_skips if result.measurement else []
    graphs = result.graphs_compiled if result.graphs_compiled is not None else result.graph_count
    return (
        result.device or "",
        model_name(result),
        batch_size(result),
        result.speedup if timed else FAILED,
        result.compiled.median_ms if timed and result.compiled else FAILED,
        result.compile_latency_s,
        result.memory_ratio,
        peak_gb(result.eager.peak_memory_bytes if result.eager else None),
        peak_gb(result.compiled.peak_memory_bytes if result.compiled else None),
        None,  # calls_captured: dynamo's count of captured calls; not recorded
        graphs,
        result.graph_breaks,
        len(set(result.break_reasons)) if result.graph_breaks is not None else None,
        None,  # autograd_captures: compiled autograd's; not recorded
        None,  # autograd_compiles: ditto
        len(skips) if result.measurement and result.measurement.cudagraphs else None,
        result.config_label,
        result.phase,
        result.precision,
        result.replicate,
        result.status,
        result.experiment_id,
    )


def _cell(value: Cell) -> str | int:
    """Floats with six decimals, as the harness's ``output_csv`` writes them; None as an empty cell."""
    if value is None:
        return ""
    return f"{value:.6f}" if isinstance(value, float) else value
