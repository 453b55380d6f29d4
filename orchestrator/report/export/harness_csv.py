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
from collections.abc import Iterable
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from orchestrator.report.export.mapping import batch_size, model_name, peak_gb
from orchestrator.report.models import Report
from tasks.experiment import CompileConfig, Phase, Precision
from tasks.result import DistributedResult, Result, Status, config_label

HARNESS_COLUMNS: Final = (
    "dev", "name", "batch_size", "speedup", "abs_latency",
    "compilation_latency", "compression_ratio", "eager_peak_mem", "dynamo_peak_mem",
    "calls_captured", "unique_graphs", "graph_breaks", "unique_graph_breaks",
    "autograd_captures", "autograd_compiles", "cudagraph_skips",
)  # fmt: skip
COLUMNS: Final = (*HARNESS_COLUMNS, "config", "phase", "precision", "replicate", "status", "experiment_id")
FAILED: Final = 0.0  # speedup and abs_latency of a result that was not timed: what the harness writes for a failure

Cell = str | int | float | None


class CsvSide(BaseModel):
    """What the CSV reads of a side's timing (``SideTiming``)."""

    median_ms: float
    peak_memory_bytes: int | None = None


class CsvMeasurement(BaseModel):
    """What the CSV reads of how a result was measured (``Measurement``)."""

    cudagraphs: bool = False
    cudagraph_skips: list[str] = Field(default_factory=list)


class CsvResult(BaseModel):
    """What the CSV reads of a result (``row``), each field declared as ``Result`` declares it (a test holds them
    to it), the timing and measurement as the parts above. ``skim.load_results_as`` validates a big report's
    results as this: every other field (the raw samples, the check, the worker) is skipped as it is parsed,
    less than half the time of validating the whole ``Result`` (``benchmarks/read_scale.py``)."""

    experiment_id: str
    target: str
    params: dict[str, Any]
    device: Literal["cuda", "cpu"] | None
    compile: CompileConfig
    phase: Phase = "inference"
    precision: Precision = "fp32"
    replicate: int = 0
    status: Status
    eager: CsvSide | None = None
    compiled: CsvSide | None = None
    compile_latency_s: float | None = None
    speedup: float | None = None
    memory_ratio: float | None = None
    graphs_compiled: int | None = None
    graph_count: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = Field(default_factory=list)
    measurement: CsvMeasurement | None = None
    distributed: DistributedResult | None = None

    @property
    def config_label(self) -> str:
        """As ``Result.config_label``."""
        return config_label(self.compile, self.distributed, self.compile.cache)


def csv_text(report: Report) -> str:
    """The CSV: a header, then one row per result in the report's order."""
    return results_csv(report.results)


def results_csv(results: Iterable[Result | CsvResult]) -> str:
    """The CSV of these results (whole, or as ``CsvResult``), a row each in their order, after the header."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for result in results:
        writer.writerow(_cell(value) for value in row(result))
    return buffer.getvalue()


def row(result: Result | CsvResult) -> tuple[Cell, ...]:
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
