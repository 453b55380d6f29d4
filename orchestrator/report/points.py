"""A report's points in the series that history follows: one per measured thing and metric, the median of
the report's valid results of it; kept in a small file beside each report (its history file).

History over a year of nightlies reads one history file per report (a few hundred KB) instead of the
report itself (megabytes of raw samples, every result validated): ``write_report`` writes it with the
report, and records the report's size in it so that a report replaced without it is read whole again.
A history file is plain JSON (``ReportPoints``), one object per point, so that other tools read it too
(``duckdb``: ``SELECT * FROM read_json('nightly/*.history.json')``, unnesting ``points``).
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.report.models import Report
from orchestrator.report.summary import UNKNOWN_DEVICE, device_model, valid_timing
from tasks.models import Phase, Precision, Result

Metric = Literal["speedup", "eager_ms", "compiled_ms", "compile_s_cold", "compile_s_warm", "compile_s_shared"]
METRICS: Final[tuple[Metric, ...]] = (
    "speedup",
    "eager_ms",
    "compiled_ms",
    "compile_s_cold",
    "compile_s_warm",
    "compile_s_shared",
)
POINTS_VERSION: Final = 1
HISTORY_SUFFIX: Final = ".history.json"  # beside REPORT.json or REPORT.json.gz: REPORT.history.json


class SeriesPoint(BaseModel):
    """One report's value of one series: the median of its valid results' values (its replicates, seeds)."""

    model_config = ConfigDict(extra="forbid")

    target: str
    params: dict[str, Any]  # as the report's first result of the series names them
    config: str
    device_model: str
    phase: Phase
    precision: Precision
    metric: Metric
    value: float

    @property
    def key(self) -> tuple[str, str, str, str, Phase, Precision, Metric]:
        """What a series is: target, params (JSON, keys sorted), configuration, device model, phase,
        precision, metric."""
        params = json.dumps(self.params, sort_keys=True, default=str)
        return (self.target, params, self.config, self.device_model, self.phase, self.precision, self.metric)


class ReportPoints(BaseModel):
    """A report's history file: what history needs of the report, and how to tell it belongs to it."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = POINTS_VERSION
    report: str  # the report's file name
    report_bytes: int  # its size as written: a report of another size was replaced, and is read whole
    created_at: str
    points: list[SeriesPoint]


def metric_value(r: Result, metric: Metric) -> float | None:
    """What one result says of one metric, or None when it says nothing valid.

    Speed (``speedup``, ``eager_ms``, ``compiled_ms``, medians of the samples): ok results that did not
    recompile inside the timed window (``valid_timing``). Compile latency (the measured compile's first
    call): ok results whose compile used the metric's cache state; a recompile later, inside the timed
    window, does not change the first compile. ``compile_s_shared`` takes only shared compiles that
    loaded artifacts from the shared cache: one that found it empty compiled like a cold one, and a
    series mixing both would show the cache's state, not the compile's.
    """
    if metric in ("compile_s_cold", "compile_s_warm", "compile_s_shared"):
        wanted = metric.removeprefix("compile_s_")
        ok = r.status == "ok" and r.compile.cache == wanted
        if wanted == "shared":
            ok = ok and r.compile_cache is not None and r.compile_cache.loaded
        return r.compile_latency_s if ok else None
    if not valid_timing(r):
        return None
    if metric == "speedup":
        return r.speedup
    side = r.eager if metric == "eager_ms" else r.compiled
    return side.median_ms if side else None


def report_points(report: Report) -> list[SeriesPoint]:
    """The report's point in each series it has a valid value for, in the order its results first name
    them: the median of the values (finite, above zero) of the results of that series."""
    values: dict[tuple[Any, ...], list[float]] = {}
    firsts: dict[tuple[Any, ...], Result] = {}
    for r in report.results:
        params = json.dumps(r.params, sort_keys=True, default=str)
        model = device_model(r) or UNKNOWN_DEVICE
        for metric in METRICS:
            value = metric_value(r, metric)
            if value is None or not math.isfinite(value) or value <= 0:
                continue
            key = (r.target, params, r.config_label, model, r.phase, r.precision, metric)
            values.setdefault(key, []).append(value)
            firsts.setdefault(key, r)
    return [
        SeriesPoint(
            target=first.target,
            params=first.params,
            config=key[2],
            device_model=key[3],
            phase=first.phase,
            precision=first.precision,
            metric=key[6],
            value=statistics.median(values[key]),
        )
        for key, first in firsts.items()
    ]


def history_name(report_name: str) -> str:
    """``nightly-07.history.json`` for ``nightly-07.json`` or ``nightly-07.json.gz``."""
    return report_name.removesuffix(".gz").removesuffix(".json") + HISTORY_SUFFIX
