"""A report's points in the series that history follows: one per measured thing and metric, the median of
the report's valid results of it; kept in a small file beside each report (its history file).

History over a year of nightlies reads one history file per report (a few hundred KB) instead of the
report itself (megabytes of raw samples, every result validated): ``write_report`` writes it with the
report, and records the report's size in it so that a report replaced without it is read whole again.
A history file is plain JSON (``ReportPoints``), its points in columns, so that other tools read it too
(``duckdb``: ``SELECT report, created_at, unnest(metric), unnest(value) FROM read_json('nightly/*.history.json')``).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.report.models import Report, gang_label
from orchestrator.report.summary import UNKNOWN_DEVICE, ParamsText, device_model, valid_timing
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


class Things(BaseModel):
    """The measured things of a report's points (what a series follows, less the metric), in columns of equal
    length: the ``thing`` of a point is an index into them."""

    model_config = ConfigDict(extra="forbid")

    target: list[str] = Field(default_factory=list)
    params: list[dict[str, Any]] = Field(default_factory=list)  # as the report's first result of each names them
    params_key: list[str] = Field(default_factory=list)  # the same as JSON with sorted keys: what tells them apart
    config: list[str] = Field(default_factory=list)
    device_model: list[str] = Field(default_factory=list)
    phase: list[Phase] = Field(default_factory=list)
    precision: list[Precision] = Field(default_factory=list)

    def keys(self) -> list[tuple[str, str, str, str, Phase, Precision]]:
        """Each thing as target, params (JSON, keys sorted), configuration, device model, phase, precision."""
        columns = (self.target, self.params_key, self.config, self.device_model, self.phase, self.precision)
        return list(zip(*columns, strict=True))


class ReportPoints(BaseModel):
    """A report's history file: its points, and how to tell it belongs to the report beside it.

    The points are three columns of equal length: ``thing`` (an index into ``things``), ``metric`` and
    ``value``, the median of the report's valid values of that thing and metric.
    """

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = POINTS_VERSION
    report: str  # the report's file name
    report_bytes: int  # its size as written: a report of another size was replaced, and is read whole
    created_at: str
    things: Things
    thing: list[int]
    metric: list[Metric]
    value: list[float]


def said(r: Result) -> list[tuple[Metric, float | None]]:
    """The metrics one result says something of, with what it says (possibly None, not finite or not above
    zero: ``metric_values`` keeps the valid ones), in ``METRICS``'s order; a metric left out says nothing.

    Speed (``speedup``, ``eager_ms``, ``compiled_ms``, medians of the samples): ok results that did not
    recompile inside the timed window (``valid_timing``). Compile latency (the measured compile's first
    call): ok results, under the metric of the cache state their compile used; a recompile later, inside the
    timed window, does not change the first compile. ``compile_s_shared`` takes only shared compiles that
    loaded artifacts from the shared cache: one that found it empty compiled like a cold one, and a
    series mixing both would show the cache's state, not the compile's.
    """
    if r.status != "ok":
        return []
    found: list[tuple[Metric, float | None]] = []
    if valid_timing(r):
        found += [
            ("speedup", r.speedup),
            ("eager_ms", r.eager.median_ms if r.eager else None),
            ("compiled_ms", r.compiled.median_ms if r.compiled else None),
        ]
    cache = r.compile.cache
    if cache != "shared" or (r.compile_cache is not None and r.compile_cache.loaded):
        found.append((_COMPILE_METRICS[cache], r.compile_latency_s))
    return found


def metric_value(r: Result, metric: Metric) -> float | None:
    """What one result says of one metric (``said``), or None when it says nothing."""
    return next((value for name, value in said(r) if name == metric), None)


def metric_values(r: Result) -> list[tuple[Metric, float]]:
    """Every metric ``r`` has a valid value of (``said``: not None, finite, above zero), with it, in
    ``METRICS``'s order."""
    return [(metric, value) for metric, value in said(r) if value is not None and 0 < value < math.inf]


_COMPILE_METRICS: Final[dict[str, Metric]] = {
    "cold": "compile_s_cold",
    "warm": "compile_s_warm",
    "shared": "compile_s_shared",
}


def report_points(report: Report, name: str, size: int = 0) -> ReportPoints:
    """The report's point in each series it has a valid value for, in the order its results first name
    them: the median of the values (finite, above zero) of the results of that series. ``name`` and ``size``:
    the report's file and its size in bytes."""
    values: dict[tuple[Any, ...], list[float]] = {}
    things: dict[tuple[Any, ...], int] = {}
    measured = Things()
    params_text = ParamsText()
    for r in report.results:
        found = metric_values(r)
        if not found:
            continue
        params = params_text(r.params)
        model = device_model(r) or UNKNOWN_DEVICE
        gang = gang_label(r)  # a distributed result's series is its world size's
        config = r.config_label + (f" {gang}" if gang else "")
        thing = (r.target, params, config, model, r.phase, r.precision)
        if thing not in things:
            things[thing] = len(things)
            for column, cell in zip(_COLUMNS, (*thing, r.params), strict=True):
                getattr(measured, column).append(cell)
        for metric, value in found:
            values.setdefault((thing, metric), []).append(value)
    keys = list(values)
    return ReportPoints(
        report=name,
        report_bytes=size,
        created_at=report.created_at,
        things=measured,
        thing=[things[thing] for thing, _ in keys],
        metric=[metric for _, metric in keys],
        value=[v[0] if len(v := values[key]) == 1 else statistics.median(v) for key in keys],
    )


_COLUMNS: Final = ("target", "params_key", "config", "device_model", "phase", "precision", "params")


def history_name(report_name: str) -> str:
    """``nightly-07.history.json`` for ``nightly-07.json`` or ``nightly-07.json.gz``."""
    return report_name.removesuffix(".gz").removesuffix(".json") + HISTORY_SUFFIX
