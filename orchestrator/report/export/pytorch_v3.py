"""A report as records of PyTorch's OSS benchmark database (``pytorch/test-infra``, table ``oss_ci_benchmark_v3``).

One record per result and metric, each run of a replicated experiment a result of its own: the eager and
compiled latencies with their raw samples, the speedup, the compile latency with how the caches served it,
peak memory and its ratio where measured, graph breaks, and the outcome (``accuracy``, as the dynamo
harness names it). The database's ``extra_info`` columns are maps of strings and ``benchmark_values`` an
array of Float32, so every non-numeric outcome is a string in ``metric.extra_info`` and no value is NaN.
Imports the report's models, ``export.mapping`` and ``export.strings`` (a value as a string of those maps).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, cast

import orjson

from orchestrator.report.export.mapping import ExportError, accuracy, batch_size, dtype_name, model_name, peak_gb
from orchestrator.report.export.strings import compact_json, float_text, memo, strings
from orchestrator.report.models import Environment, Node, Report, traffic_label
from orchestrator.report.summary import device_model
from tasks.experiment import CompileConfig, TimingConfig
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
# What many results share, made once (``memo``): an accuracy outcome's list of one as JSON text, a timing
# configuration's text, a compile configuration's entries and label, a set of versions' dependencies, an
# outcome's strings.
_ACCURACY_TEXT: dict[str, str] = {}
_TIMINGS: dict[Any, str | None] = {}
_CONFIGS: dict[Any, tuple[dict[str, str], str]] = {}
_DEPENDENCIES: dict[Any, dict[str, Record]] = {}
_OUTCOMES: dict[Any, dict[str, str]] = {}
_dumps: Final = orjson.dumps  # every value a record holds is finite (``metric_parts``, ``strings``): no NaN to refuse


@dataclass(frozen=True)
class Run:
    """What every record of one report shares, from the report's fields alone (``run``): its top level (time
    stamp, schema, name, the change measured) and the environment its runners and dependencies are read
    against. Picklable: ``export.fanout`` gives it to each process that encodes a share of the results."""

    top: Record
    environment: Environment
    nodes: dict[str, Node]


def run(
    created_at: str,
    name: str,
    environment: Environment,
    *,
    repo: str | None = None,
    head_branch: str | None = None,
    head_sha: str | None = None,
) -> Run:
    """A report's ``Run``. ``repo``, ``head_branch``, ``head_sha``: the change the run measured (a report does
    not know it; a CI job does); omitted where not given. Raises ``ExportError`` for a time stamp that is not
    ISO 8601."""
    top: Record = {"timestamp": _unix_seconds(created_at), "schema_version": SCHEMA_VERSION, "name": name}
    top |= {k: v for k, v in (("repo", repo), ("head_branch", head_branch), ("head_sha", head_sha)) if v}
    return Run(top, environment, {n.node_id: n for n in environment.nodes})


def records(
    report: Report, *, repo: str | None = None, head_branch: str | None = None, head_sha: str | None = None
) -> list[Record]:
    """Every result's records, in the report's order (``run`` says what ``repo``, ``head_branch`` and
    ``head_sha`` are)."""
    return list(iter_records(report, repo=repo, head_branch=head_branch, head_sha=head_sha))


def iter_records(
    report: Report, *, repo: str | None = None, head_branch: str | None = None, head_sha: str | None = None
) -> Iterator[Record]:
    """``records``, one result's at a time: 100,000 results are half a million records, never all held."""
    for every, result, replicates in _each(report, repo, head_branch, head_sha):
        common = shared(every, result, replicates)
        yield from (common | {"metric": metric} for metric in metrics(result))


def iter_record_lines(
    report: Report, *, repo: str | None = None, head_branch: str | None = None, head_sha: str | None = None
) -> Iterator[bytes]:
    """Each record of ``iter_records`` as a line of JSON (``record_lines``)."""
    for every, result, replicates in _each(report, repo, head_branch, head_sha):
        yield from record_lines(every, result, replicates)


def _each(
    report: Report, repo: str | None, head_branch: str | None, head_sha: str | None
) -> Iterator[tuple[Run, Result, int]]:
    """Each result of a report read whole with the report's ``Run`` and how many runs of its experiment the
    report holds."""
    every = run(
        report.created_at, report.name, report.environment, repo=repo, head_branch=head_branch, head_sha=head_sha
    )
    runs = Counter(r.experiment_id for r in report.results)
    for result in report.results:
        yield every, result, runs[result.experiment_id]


def record_lines(every: Run, result: Result, replicates: int) -> list[bytes]:
    """One result's records, each as compact JSON (UTF-8, orjson's encoding: no spaces, a float as its shortest
    text) put together from parts: what the records share (everything but the metric, which comes last) encoded
    once, then each metric. ``replicates``: how many runs of its experiment the report holds. orjson encodes the
    raw samples' floats 25 times as fast as ``json``'s C encoder, which spent most of the export on them."""
    head = _dumps(shared(every, result, replicates))[:-1] + b',"metric":'
    return [head + _dumps(metric) + b"}" for metric in metrics(result)]


def shared(every: Run, result: Result, replicates: int) -> Record:
    """The part of a result's records they all share: the report's, then the result's benchmark, model,
    inputs, dependencies and runner."""
    device = device_model(result)
    return every.top | {
        "benchmark": _benchmark(result, replicates, device),
        "model": _model(result),
        "inputs": _inputs(result),
        "dependencies": _dependencies(result, every.environment),
        "runners": _runners(result, every.nodes, device),
    }


def metrics(result: Result) -> list[Record]:
    """The metric part of each of one result's records: what it measured, then its outcome (``extra_info``:
    the outcome's entries, then the metric's own)."""
    outcome = _outcome_strings(result)  # every metric's: as strings once, not once a metric
    return [
        {"name": name, "benchmark_values": values, "target_value": NO_TARGET, "extra_info": outcome | extra}
        for name, values, extra in metric_parts(result)
    ]


def metric_parts(result: Result) -> list[tuple[str, list[float], dict[str, str]]]:
    """Each metric of one result as its name, its finite values and its own ``extra_info`` (strings); a metric
    with no value (a figure not measured: None) is left out."""
    found: list[tuple[str, list[float], dict[str, str]]] = []
    if result.speedup is not None:
        low, high = result.speedup_ci or (None, None)
        weighted = result.replay is not None or None
        _add(found, "speedup", [result.speedup], strings({"ci_low": low, "ci_high": high, "weighted": weighted}))
    for timing, latency, device in ((result.eager, *_EAGER), (result.compiled, *_COMPILED)):
        if timing is not None:
            _add(found, latency, timing.samples_ms, _timing_info(timing))
            if timing.device_samples_ms:
                _add(found, device, timing.device_samples_ms, {"timer": "cuda_events"})
    if result.compile_latency_s is not None:
        _add(found, "compilation_latency", [result.compile_latency_s], strings({"unit": "s"} | _cache_info(result)))
    eager_peak = result.eager.peak_memory_bytes if result.eager else None
    compiled_peak = result.compiled.peak_memory_bytes if result.compiled else None
    if eager_peak is not None:
        _add(found, "eager_peak_mem", [peak_gb(eager_peak)], {"unit": "GB", "bytes": int.__repr__(eager_peak)})
    if compiled_peak is not None:
        _add(found, "dynamo_peak_mem", [peak_gb(compiled_peak)], {"unit": "GB", "bytes": int.__repr__(compiled_peak)})
    if result.memory_ratio is not None:
        _add(found, "compression_ratio", [result.memory_ratio], {"meaning": "eager peak / compiled peak"})
    if result.graph_breaks is not None:
        reasons = sorted(set(result.break_reasons))
        breaks = {"graph_count": result.graph_count, "unique_graph_breaks": len(reasons), "break_reasons": reasons}
        _add(found, "graph_breaks", [result.graph_breaks], strings(breaks))
    outcome = accuracy(result)
    text = memo(_ACCURACY_TEXT, outcome, lambda: compact_json([outcome]))
    found.append(("accuracy", [], {"benchmark_values": text}))
    return found


_EAGER: Final = ("eager_latency_ms", "eager_device_latency_ms")  # a side's metrics: its host and device latency
_COMPILED: Final = ("compiled_latency_ms", "compiled_device_latency_ms")


def _add(
    found: list[tuple[str, list[float], dict[str, str]]],
    name: str,
    values: Sequence[float | int | None],
    extra: dict[str, str],
) -> None:
    """A metric with its finite values (as floats) and ``extra`` (strings, as ``strings`` makes them); where some
    are not finite, how many were dropped (``non_finite_values_dropped``); none where it has no value at all."""
    try:
        finite = math.isfinite(sum(cast(Sequence[float], values)))  # every value finite, the common case: a C loop
    except TypeError:  # a None among them
        finite = False
    if finite:
        if values:
            found.append((name, list(map(float, cast(Sequence[float], values))), extra))
        return
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    dropped = sum(1 for v in values if v is not None) - len(kept)
    if dropped:
        extra = extra | {"non_finite_values_dropped": int.__repr__(dropped)}
    if kept or dropped:
        found.append((name, kept, extra))


def _outcome_strings(result: Result) -> dict[str, str]:
    """``_outcome`` as strings, made once per outcome: most results of a sweep share one (ok, correct, by one
    check). Each metric's map is a copy (``outcome | extra``), so none of them changes the kept one."""
    error, check = result.error, result.check
    key = (
        result.status,
        result.correct,
        check.method if check else None,
        result.check_note,
        (error.type, error.message) if error else None,
        result.recompiled,
        tuple(result.recompile_reasons),
        result.attempts,
    )
    return memo(_OUTCOMES, key, lambda: strings(_outcome(result)))


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


def _timing_info(timing: SideTiming) -> dict[str, str]:
    """A side's latency metric's own ``extra_info``, as ``strings.strings`` makes it of its figures: made here, each
    value's type known, two of every result's records."""
    info = {
        "unit": "ms",
        "median_ms": float_text(timing.median_ms),
        "iqr_ms": float_text(timing.iqr_ms),
        "n": int.__repr__(timing.n),
        "warmup": int.__repr__(timing.warmup),
        "block_size": int.__repr__(timing.block_size),
        "first_call_ms": float_text(timing.first_call_ms),
        "noisy": "true" if timing.noisy else "false",
    }
    if timing.host_bound is not None:
        info["host_bound"] = "true" if timing.host_bound else "false"
    return info


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


def _benchmark(result: Result, replicates: int, device: str | None) -> Record:
    timing = result.timing
    extra = {
        "device": result.device,
        "device_model": device,
        "experiment_id": result.experiment_id,
        "replicate": result.replicate,
        "replicates": replicates,
        "seed": result.seed,
        "batch_size": batch_size(result),
        "precision": result.precision,
        "timer": result.measurement.timer if result.measurement else None,
        "timing": memo(_TIMINGS, tuple(timing.__dict__.items()), lambda: _timing_text(timing)),
        "traffic": traffic_label(result.traffic),
    }
    return {"name": BENCHMARK_NAME, "mode": result.phase, "dtype": dtype_name(result), "extra_info": strings(extra)}


def _timing_text(timing: TimingConfig) -> str | None:
    """The timing settings that differ from the defaults as JSON text, None where none does."""
    changed = timing.model_dump(mode="json", exclude_defaults=True)
    return compact_json(changed) if changed else None


def _model(result: Result) -> Record:
    user = ":" in result.target
    compiled, label = _compiled(result)
    extra = {"target": result.target}
    if result.params:
        extra["params"] = compact_json(result.params)
    extra |= compiled
    if result.inductor_options:
        extra["inductor_options"] = compact_json(result.inductor_options)
    return {
        "name": model_name(result),
        "type": "user target" if user else "compilebench target",
        "backend": label,  # unique per configuration: inductor:max-autotune+fullgraph+cold
        "origins": [result.target.partition(":")[0] if user else "compilebench." + result.target.split(".")[0]],
        "extra_info": extra,
    }


def _compiled(result: Result) -> tuple[dict[str, str], str]:
    """The model's ``extra_info`` entries of its compile configuration, and its configuration's label: made once
    per configuration (a sweep has a few), where it has no options or dynamic marks of its own."""
    cfg = result.compile
    if cfg.options or cfg.mark_dynamic or result.distributed is not None:
        return _compiled_entries(cfg), result.config_label
    key = (cfg.backend, cfg.mode, cfg.fullgraph, cfg.dynamic, cfg.method, cfg.scope, cfg.cache)
    return memo(_CONFIGS, key, lambda: (_compiled_entries(cfg), result.config_label))


def _compiled_entries(cfg: CompileConfig) -> dict[str, str]:
    return strings(
        {
            "compile_backend": cfg.backend,
            "compile_mode": cfg.mode,
            "fullgraph": cfg.fullgraph,
            "dynamic": cfg.dynamic,
            "options": cfg.options or None,
            "method": cfg.method,
            "scope": cfg.scope,
            "cache": cfg.cache,
        }
    )


def _inputs(result: Result) -> dict[str, Record]:
    """The target's parameters (factory arguments, not tensors): ``dtype`` is the type of the value."""
    return {
        name: {"dtype": type(value).__name__, "extra_info": strings({"value": value})}
        for name, value in result.params.items()
    }


def _dependencies(result: Result, env: Environment) -> dict[str, Record]:
    """torch, Triton, Ray and the rest, as the worker that ran the result reported them, else the run's: made
    once per set of versions (a run has one or a few), the records of those results sharing the one map."""
    worker = result.worker.versions if result.worker else {}
    key = (env.python, env.torch, env.ray, *worker.items())
    return memo(_DEPENDENCIES, key, lambda: _dependencies_of(worker, env))


def _dependencies_of(worker: Mapping[str, str], env: Environment) -> dict[str, Record]:
    found = {"python": env.python, "torch": env.torch, "ray": env.ray} | dict(worker)
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


def _runners(result: Result, nodes: Mapping[str, Node], device: str | None) -> list[Record]:
    """The worker that produced the result; none for a result that never reached one."""
    worker = result.worker
    if worker is None:
        return []
    node = nodes.get(worker.node_id or "")
    runner: Record = {
        "name": worker.hostname,
        "type": device or "",
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
    return [runner | {"extra_info": strings(extra)}]


def _unix_seconds(created_at: str) -> int:
    """The report's time stamp as whole seconds since the epoch, the table's ``timestamp`` (UTC where it
    names no zone). Raises ``ExportError`` for one that is not ISO 8601."""
    try:
        when = datetime.fromisoformat(created_at)
    except ValueError:
        raise ExportError(f"created_at: {created_at!r} is not an ISO 8601 time stamp") from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp())
