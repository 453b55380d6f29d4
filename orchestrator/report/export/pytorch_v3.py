"""A report as records of PyTorch's OSS benchmark database (``pytorch/test-infra``, table ``oss_ci_benchmark_v3``).

One record per result and metric, each run of a replicated experiment a result of its own: the eager and
compiled latencies with their raw samples, the speedup, the compile latency with how the caches served it,
peak memory and its ratio where measured, graph breaks, and the outcome (``accuracy``, as the dynamo
harness names it). The database's ``extra_info`` columns are maps of strings and ``benchmark_values`` an
array of Float32, so every non-numeric outcome is a string in ``metric.extra_info`` and no value is NaN.
Imports the report's models and ``export.mapping``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from orchestrator.report.export.mapping import ExportError, accuracy, batch_size, dtype_name, model_name, peak_gb
from orchestrator.report.models import Environment, Node, Report, traffic_label
from orchestrator.report.summary import device_model
from tasks.result import Result, SideTiming
from tasks.text import first_line

SCHEMA_VERSION: Final = "v3"
BENCHMARK_NAME: Final = "compilebench"
DEPENDENCY_REPOS: Final = {  # dependency -> its repository, for the record's dependencies map
    "torch": "pytorch/pytorch",
    "triton": "triton-lang/triton",
    "ray": "ray-project/ray",
    "python": "python/cpython",
}  # the others (cuda, cudnn, driver, compilebench) are given by version alone
NO_TARGET: Final = 0.0  # target_value: the table's Float32 column has no null; 0 is "no target", as the harness writes

Record = dict[str, Any]
_encode = json.JSONEncoder(allow_nan=False).encode  # json.dumps(x, allow_nan=False), without a new encoder a call
_NO_TARGET_TEXT: Final = _encode(NO_TARGET)
_LISTS: dict[tuple[Any, ...], str] = {}  # short lists' JSON text, by item type and items (``_list_text``)
_LISTS_KEPT: Final = 4096
_NAMES: dict[str, str] = {}  # the metrics' names as JSON text, each made once


def records(
    report: Report, *, repo: str | None = None, head_branch: str | None = None, head_sha: str | None = None
) -> list[Record]:
    """Every result's records, in the report's order. ``repo``, ``head_branch``, ``head_sha``: the change
    the run measured (a report does not know it; a CI job does); omitted where not given."""
    return list(iter_records(report, repo=repo, head_branch=head_branch, head_sha=head_sha))


def iter_records(
    report: Report, *, repo: str | None = None, head_branch: str | None = None, head_sha: str | None = None
) -> Iterator[Record]:
    """``records``, one result's at a time: 100,000 results are a million records, never all held."""
    for shared, result in _by_result(report, repo=repo, head_branch=head_branch, head_sha=head_sha):
        yield from (shared | {"metric": metric} for metric in metrics(result))


def iter_record_lines(
    report: Report, *, repo: str | None = None, head_branch: str | None = None, head_sha: str | None = None
) -> Iterator[str]:
    """Each record of ``iter_records`` as compact JSON text, the same text as ``json.dumps(record,
    allow_nan=False)``, put together from parts encoded once: what a result's records share (everything but
    the metric, which comes last) once a result, its outcome (the first entries of every metric's
    ``extra_info``) once a result, and each metric's own name, values and ``extra_info``."""
    for shared, result in _by_result(report, repo=repo, head_branch=head_branch, head_sha=head_sha):
        head = _encode(shared)[:-1] + ', "metric": {"name": '
        outcome = _strings(_outcome(result))
        outcome_text = _encode(outcome)[1:-1]
        for name, values, extra in metric_parts(result):
            if outcome.keys().isdisjoint(extra):
                info = "{" + ", ".join(filter(None, (outcome_text, _encode(extra)[1:-1]))) + "}"
            else:  # an entry of both: the merged map's order and value
                info = _encode(outcome | extra)
            name_text = _NAMES.get(name) or _NAMES.setdefault(name, _encode(name))
            yield (
                f'{head}{name_text}, "benchmark_values": {_encode(values)}, "target_value": {_NO_TARGET_TEXT}, '
                f'"extra_info": {info}}}}}'
            )


def _by_result(
    report: Report, *, repo: str | None, head_branch: str | None, head_sha: str | None
) -> Iterator[tuple[Record, Result]]:
    """Each result with the part of its records they all share."""
    top: Record = {"timestamp": _unix_seconds(report.created_at), "schema_version": SCHEMA_VERSION, "name": report.name}
    top |= {k: v for k, v in (("repo", repo), ("head_branch", head_branch), ("head_sha", head_sha)) if v}
    runs = Counter(r.experiment_id for r in report.results)
    nodes = {n.node_id: n for n in report.environment.nodes}
    for result in report.results:
        shared = top | {
            "benchmark": _benchmark(result, runs[result.experiment_id]),
            "model": _model(result),
            "inputs": _inputs(result),
            "dependencies": _dependencies(result, report.environment),
            "runners": _runners(result, nodes),
        }
        yield shared, result


def metrics(result: Result) -> list[Record]:
    """The metric part of each of one result's records: what it measured, then its outcome (``extra_info``:
    the outcome's entries, then the metric's own)."""
    outcome = _strings(_outcome(result))  # every metric's: as strings once, not once a metric
    return [
        {"name": name, "benchmark_values": values, "target_value": NO_TARGET, "extra_info": outcome | extra}
        for name, values, extra in metric_parts(result)
    ]


def metric_parts(result: Result) -> list[tuple[str, list[float], dict[str, str]]]:
    """Each metric of one result as its name, its finite values and its own ``extra_info`` (strings)."""
    found: list[tuple[str, list[float], dict[str, str]]] = []

    def add(name: str, values: Sequence[float | int | None], **extra: Any) -> None:
        kept = [float(v) for v in values if v is not None and math.isfinite(v)]
        dropped = sum(1 for v in values if v is not None and not math.isfinite(v))
        if dropped:
            extra["non_finite_values_dropped"] = dropped
        if kept or dropped:
            found.append((name, kept, _strings(extra)))

    if result.speedup is not None:
        low, high = result.speedup_ci or (None, None)
        add("speedup", [result.speedup], ci_low=low, ci_high=high, weighted=result.replay is not None or None)
    for side, timing in (("eager", result.eager), ("compiled", result.compiled)):
        if timing is not None:
            add(f"{side}_latency_ms", timing.samples_ms, **_timing_info(timing))
            if timing.device_samples_ms:
                add(f"{side}_device_latency_ms", timing.device_samples_ms, timer="cuda_events")
    if result.compile_latency_s is not None:
        add("compilation_latency", [result.compile_latency_s], unit="s", **_cache_info(result))
    eager_peak = result.eager.peak_memory_bytes if result.eager else None
    compiled_peak = result.compiled.peak_memory_bytes if result.compiled else None
    add("eager_peak_mem", [peak_gb(eager_peak)], unit="GB", bytes=eager_peak)
    add("dynamo_peak_mem", [peak_gb(compiled_peak)], unit="GB", bytes=compiled_peak)
    add("compression_ratio", [result.memory_ratio], meaning="eager peak / compiled peak")
    if result.graph_breaks is not None:
        reasons = sorted(set(result.break_reasons))
        breaks = {"graph_count": result.graph_count, "unique_graph_breaks": len(reasons), "break_reasons": reasons}
        add("graph_breaks", [result.graph_breaks], **breaks)
    found.append(("accuracy", [], _strings({"benchmark_values": [accuracy(result)]})))
    return found


def _outcome(result: Result) -> dict[str, Any]:
    """What every metric of a result carries: its status, correctness and failure, as strings."""
    return {
        "status": result.status,
        "correct": result.correct,
        "check": result.check.method if result.check else None,
        "check_note": result.check_note,
        "error_type": result.error.type if result.error else None,
        "error": first_line(result.error.message) if result.error else None,
        "recompiled": result.recompiled or None,  # the compiled timings are not trusted
        "recompile_reasons": result.recompile_reasons or None,
        "attempts": result.attempts if result.attempts != 1 else None,
    }


def _timing_info(timing: SideTiming) -> dict[str, Any]:
    return {
        "unit": "ms",
        "median_ms": timing.median_ms,
        "iqr_ms": timing.iqr_ms,
        "n": timing.n,
        "warmup": timing.warmup,
        "block_size": timing.block_size,
        "first_call_ms": timing.first_call_ms,
        "noisy": timing.noisy,
        "host_bound": timing.host_bound,
    }


def _cache_info(result: Result) -> dict[str, Any]:
    cache = result.compile_cache
    info: dict[str, Any] = {"cache": result.compile.cache, "breakdown_s": result.compile_breakdown or None}
    if cache is None:
        return info
    return info | {
        "cache_outcome": cache.outcome,  # hit, miss, mixed, bypass, none
        "cache_label": cache.label,
        "fxgraph_hit": cache.fxgraph_hit,
        "fxgraph_miss": cache.fxgraph_miss,
        "autograd_hit": cache.autograd_hit,
        "autograd_miss": cache.autograd_miss,
        "shared_loaded": cache.loaded if cache.state == "shared" else None,
    }


def _benchmark(result: Result, replicates: int) -> Record:
    timing = result.timing
    extra = {
        "device": result.device,
        "device_model": device_model(result),
        "experiment_id": result.experiment_id,
        "replicate": result.replicate,
        "replicates": replicates,
        "seed": result.seed,
        "batch_size": batch_size(result),
        "precision": result.precision,
        "timer": result.measurement.timer if result.measurement else None,
        "timing": timing.model_dump(mode="json", exclude_defaults=True) or None,
        "traffic": traffic_label(result.traffic),
    }
    return {"name": BENCHMARK_NAME, "mode": result.phase, "dtype": dtype_name(result), "extra_info": _strings(extra)}


def _model(result: Result) -> Record:
    cfg = result.compile
    user = ":" in result.target
    extra = {
        "target": result.target,
        "params": result.params or None,
        "compile_backend": cfg.backend,
        "compile_mode": cfg.mode,
        "fullgraph": cfg.fullgraph,
        "dynamic": cfg.dynamic,
        "options": cfg.options or None,
        "method": cfg.method,
        "scope": cfg.scope,
        "cache": cfg.cache,
        "inductor_options": result.inductor_options or None,
    }
    return {
        "name": model_name(result),
        "type": "user target" if user else "compilebench target",
        "backend": result.config_label,  # unique per configuration: inductor:max-autotune+fullgraph+cold
        "origins": [result.target.partition(":")[0] if user else "compilebench." + result.target.split(".")[0]],
        "extra_info": _strings(extra),
    }


def _inputs(result: Result) -> dict[str, Record]:
    """The target's parameters (factory arguments, not tensors): ``dtype`` is the type of the value."""
    return {
        name: {"dtype": type(value).__name__, "extra_info": _strings({"value": value})}
        for name, value in result.params.items()
    }


def _dependencies(result: Result, env: Environment) -> dict[str, Record]:
    """torch, Triton, Ray and the rest, as the worker that ran the result reported them, else the run's."""
    worker = result.worker.versions if result.worker else {}
    found = {"python": env.python, "torch": env.torch, "ray": env.ray} | worker
    out: dict[str, Record] = {}
    for name, version in found.items():
        if name == "git":
            continue
        entry: Record = {"version": version} | ({"repo": repo} if (repo := DEPENDENCY_REPOS.get(name)) else {})
        if name == "compilebench" and worker.get("git"):
            entry["sha"] = worker["git"].removesuffix("-dirty")
            entry["extra_info"] = {"dirty": json.dumps(worker["git"].endswith("-dirty"))}
        out[name] = entry
    return out


def _runners(result: Result, nodes: Mapping[str, Node]) -> list[Record]:
    """The worker that produced the result; none for a result that never reached one."""
    worker = result.worker
    if worker is None:
        return []
    node = nodes.get(worker.node_id or "")
    runner: Record = {
        "name": worker.hostname,
        "type": device_model(result) or "",
        "cpu_info": worker.cpu_model or "",
        "cpu_count": node.cpus if node else worker.threads,
        "gpu_count": len(worker.gpu_ids),
    }
    if result.device == "cuda":
        runner["gpu_info"] = worker.gpu_name or worker.gpu_model or ""
    measurement = result.measurement
    calibration = worker.calibration
    extra = {
        "node_id": worker.node_id,
        "pid": worker.pid,
        "threads": worker.threads,
        "gpu_ids": worker.gpu_ids or None,
        "cores": measurement.cores if measurement and measurement.cores else None,
        "exclusive_cores": measurement.exclusive_cores if measurement else None,
        "experiments_before": worker.experiments_before,
        "calibration_slow": calibration.slow if calibration else None,
    }
    return [runner | {"extra_info": _strings(extra)}]


def _strings(values: Mapping[str, Any]) -> dict[str, str]:
    """A ``Map(String, String)`` column: strings as they are, anything else as JSON, None left out. A bool,
    an int or a finite float as ``json.dumps`` writes it (``true``, ``3``, ``float.__repr__``) without its
    call, the column's most common values by far; a list of strings or of ints (GPU ids, a check's
    outcome) from ``_LISTS`` once made."""
    out: dict[str, str] = {}
    for key, value in values.items():
        kind = type(value)
        if kind is str:
            out[key] = value
        elif value is None:
            continue
        elif kind is bool:
            out[key] = "true" if value else "false"
        elif kind is int:
            out[key] = int.__repr__(value)
        elif kind is float and math.isfinite(value):
            out[key] = float.__repr__(value)
        elif kind is list and len(value) <= 8:
            out[key] = _list_text(value)
        elif isinstance(value, str):  # a subclass of str: as it is, as any string
            out[key] = value
        else:
            out[key] = json.dumps(value, sort_keys=True)
    return out


def _list_text(value: list[Any]) -> str:
    """A short list as JSON text, remembered where its items are all strings or all ints (not bools): the
    same few lists (``[0, 1]``, ``["pass"]``) come back in every result."""
    kinds = {type(item) for item in value}
    if len(kinds) != 1 or not kinds <= {str, int}:
        return json.dumps(value, sort_keys=True)
    key = (kinds.pop(), *value)
    text = _LISTS.get(key)
    if text is None:
        text = json.dumps(value, sort_keys=True)
        if len(_LISTS) < _LISTS_KEPT:
            _LISTS[key] = text
    return text


def _unix_seconds(created_at: str) -> int:
    """The report's time stamp as whole seconds since the epoch, the table's ``timestamp`` (UTC where it
    names no zone). Raises ``ExportError`` for one that is not ISO 8601."""
    try:
        when = datetime.fromisoformat(created_at)
    except ValueError:
        raise ExportError(f"created_at: {created_at!r} is not an ISO 8601 time stamp") from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp())
