"""The summary: statistics over a report's results, derived, never measured.

Configurations are ranked only against configurations that measured the same thing (a group:
target, params, device model, phase, precision), and averaged only over the same set of groups.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, get_args

from orchestrator.report.decision import cold_twins, compile_latencies, decide
from orchestrator.report.models import (
    ConfigSummary,
    DeviceSummary,
    GeoMean,
    Group,
    LeftOut,
    Ranked,
    Recompiled,
    Summary,
    gang_label,
    group_label,
    traffic_label,
)
from tasks.models import Result, SideTiming, Status
from tasks.stats import log_mean_interval

Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # se(median) = sqrt(pi/2) * sigma / sqrt(n) for normal samples
IQR_PER_SIGMA = 1.349  # the interquartile range of a normal distribution, in standard deviations
UNKNOWN_DEVICE = "unknown device"
_STATUSES = frozenset(get_args(Status))


def device_model(result: Result) -> str | None:
    """The hardware a result was measured on, or None when the result does not say.

    A GPU's model (the node's ``accelerator_type``, else the CUDA device name), then the GPU
    the experiment asked for, then ``CPU (model)``.
    """
    worker = result.worker
    if worker and worker.gpu_model and result.device != "cpu":
        return worker.gpu_model
    if result.device == "cuda" and worker and worker.gpu_name:
        return worker.gpu_name
    if result.gpu_model:
        return result.gpu_model
    if worker and worker.cpu_model:
        return f"CPU ({worker.cpu_model})"
    return "CPU" if result.device == "cpu" or worker else None


class Timed(Protocol):
    """What ``valid_timing`` reads: a ``Result``, or its ``digest.Digest`` (None: a digest written before it kept
    whether the result recompiled)."""

    @property
    def status(self) -> str: ...

    @property
    def speedup(self) -> float | None: ...

    @property
    def recompiled(self) -> bool | None: ...


def valid_timing(result: Timed) -> bool:
    """ok, with a speedup, and no compilation inside the timed window: fit to rank and average."""
    return result.status == "ok" and bool(result.speedup) and not result.recompiled


class ParamsText:
    """Params as canonical JSON (sorted keys), made once per distinct params: keyed on their ``repr`` (equal
    text is equal loaded data), since a sweep's results repeat the same few params thousands of times."""

    def __init__(self) -> None:
        self._made: dict[str, str] = {}

    def __call__(self, params: dict[str, Any]) -> str:
        text = repr(params)
        return self._made.get(text) or self._made.setdefault(text, json.dumps(params, sort_keys=True, default=str))


def summarize(results: Sequence[Result]) -> Summary:
    """Counts by status; per group the best configuration; per device model the geometric means.

    - A group is one target with one set of params on one device model, in one phase and
      precision. Its best configuration is the highest speedup among valid timings (``ok``,
      not recompiled); ``tie`` says when the best's 95% interval overlaps the runner-up's. The
      runner-up is the next configuration that is not the best one with another ``compile.cache``
      (the same compiled code timed in another process is no rival).
    - Per device model, every configuration run there is averaged over the same set of
      groups: those where every one of them has a valid timing (``common``); the other groups
      are listed in ``left_out`` with the reason. ``own`` is each configuration's mean over all
      its valid groups, which is not comparable across configurations.
    - An experiment run k >= 2 times (``replicate`` 0..k-1, each in another worker process) is
      one between-run figure (``_between``): the median of its replicates' speedups, a Student
      t-interval over them, and the GPU-to-GPU spread. That figure, where there is one, is what
      ranks (``best``, ``tie``) and what the means combine; ``ci_within`` keeps the within-run
      interval beside it. Repeats of other kinds (seeds; an experiment whose results share one
      replicate number, as every report written before replicates) combine as they always have.
    - Geometric means keep slowdowns as they are (nothing is clipped at 1). Their interval
      combines the groups' intervals on the log scale: between-run where there are replicates,
      else the results' own (measurement noise of the mean).
    - Every configuration has a pass rate: results judged correct (``correct: true``) over all its
      results, every replicate counted; ok results never checked (``correct: null``) are counted
      apart (``unchecked``), not as passes.
    - Results that recompiled inside their timed window are listed apart.
    - Every group has a decision (``decision.decide``): what to ship, or eager, and why; its break-even
      and Pareto set.
    """
    counts = Counter({status: 0 for status in get_args(Status)})
    counts.update(r.status for r in results)
    recompiled = [
        Recompiled(experiment_id=r.experiment_id, target=r.target, config=r.config_label, reasons=r.recompile_reasons)
        for r in results
        if r.recompiled
    ]
    params_text = ParamsText()
    groups: dict[tuple[str, str, str, str, str, str | None, str | None], _GroupData] = {}
    for r, model in zip(results, _device_models(results), strict=True):
        params = params_text(r.params)
        traffic = traffic_label(r.traffic)  # a replay measures its traffic, not one shape: a group of its own
        gang = gang_label(r)  # a distributed experiment at each world size: a group of its own
        key = (model, r.target, params, r.phase, r.precision, traffic, gang)
        data = groups.get(key)
        if data is None:
            label = group_label(r.target, r.params, r.phase, r.precision, gang)
            label += f" replay({traffic})" if traffic else ""
            data = groups[key] = _GroupData(model, label)
        data.add(r)

    by_model: dict[str, list[_GroupData]] = defaultdict(list)
    for data in groups.values():
        by_model[data.model].append(data)
    return Summary(
        counts=dict(counts),
        recompiled=recompiled,
        groups=[data.summary() for data in groups.values()],
        devices=[_device(model, by_model[model]) for model in sorted(by_model)],
    )


def _device_models(results: Sequence[Result]) -> list[str]:
    """Each result's device model; one that does not say belongs to the only model there is, if one."""
    models = [device_model(r) for r in results]
    known = {m for m in models if m is not None}
    fallback = next(iter(known)) if len(known) == 1 else UNKNOWN_DEVICE
    return [m or fallback for m in models]


class _Estimate(NamedTuple):
    """A configuration's figure in one group: what ranks it and what the means combine.

    ``log`` and ``se``: the log speedup and its standard error; for a between-run figure ``se`` is the
    t-interval's half-width over Z95, so that means combine it as they combine within-run errors and
    keep the t quantile's width, and ``centre`` is that interval's centre (the mean log speedup of the
    replicates; ``log`` is their median's). ``within_se``: the same point's error from the results' own
    intervals alone. ``between``: the figure comes from replicates.
    """

    speedup: float
    log: float
    se: float
    within_se: float
    ci: tuple[float, float] | None
    centre: float
    replicates: int = 1
    between: bool = False
    spread: float | None = None
    gpus: int = 0


@dataclass
class _Timed:
    """One configuration's valid results in a group, and their combined log speedup and its standard error."""

    results: list[Result] = field(default_factory=list)
    logs: list[tuple[float, float]] = field(default_factory=list)
    _estimate: _Estimate | None = None  # derived once all results are in (functools.cached_property locks: slow)

    @property
    def combined(self) -> tuple[float, float]:
        """Every result combined as a repeat (geometric mean, errors added): the within-run figure."""
        return self.logs[0] if len(self.logs) == 1 else _combine(self.logs)

    @property
    def estimate(self) -> _Estimate:
        if self._estimate is None:
            self._estimate = self._collapse()
        return self._estimate

    def _collapse(self) -> _Estimate:
        """The figure that ranks: each experiment with replicates collapsed into one between-run figure,
        then experiments (seeds) combined as repeats. Without replicates, ``combined`` as it always was."""
        runs: dict[str, list[int]] = {}
        if len(self.results) > 1 and any(r.replicate for r in self.results):  # else nothing to collapse
            for i, r in enumerate(self.results):
                runs.setdefault(r.experiment_id, []).append(i)
        if all(len({self.results[i].replicate for i in run}) < 2 for run in runs.values()):
            log, se = self.combined
            ci = _interval(self.results[0]) if len(self.results) == 1 else _exp_interval(log, se)
            return _Estimate(math.exp(log), log, se, se, ci, log)
        parts = [_experiment([self.results[i] for i in run], [self.logs[i] for i in run]) for run in runs.values()]
        if len(parts) == 1:
            return parts[0]
        log, se = _combine([(p.log, p.se) for p in parts])
        centre = sum(p.centre for p in parts) / len(parts)
        within = _combine([(p.log, p.within_se) for p in parts])[1]
        spreads = [p.spread for p in parts if p.spread is not None]
        return _Estimate(
            speedup=math.exp(log),
            log=log,
            se=se,
            within_se=within,
            ci=_exp_interval(centre, se),
            centre=centre,
            replicates=min(p.replicates for p in parts),
            between=True,
            spread=max(spreads, default=None),
            gpus=max(p.gpus for p in parts),
        )


def _experiment(results: list[Result], logs: list[tuple[float, float]]) -> _Estimate:
    """One experiment's valid results: a between-run figure when they carry two or more replicate numbers,
    else its results combined as repeats."""
    if len({r.replicate for r in results}) >= 2:
        return _between(results, logs)
    log, se = logs[0] if len(logs) == 1 else _combine(logs)
    ci = _interval(results[0]) if len(results) == 1 else _exp_interval(log, se)
    return _Estimate(math.exp(log), log, se, se, ci, log)


def _between(results: list[Result], logs: list[tuple[float, float]]) -> _Estimate:
    """The replicates of one experiment as one between-run figure.

    Method: the point is the median of the k replicates' speedups (one bad run does not move it).
    The interval is Student's t on the log speedups, mean +- t(0.975, k-1) s / sqrt(k), exponentiated
    (``tasks.stats.log_mean_interval``): it holds whatever differs between runs (GPU, clocks, process,
    autotuning) and each run's own measurement noise with it, and it is exact for log-normal run-to-run
    noise at any k; with k = 2, t = 12.71 and the interval is as wide as two runs honestly allow. The
    spread is the fastest GPU's speedup over the slowest's, each GPU's being the median of the replicates
    it ran; None when the replicates ran on fewer than two GPUs that the results name.
    """
    speedups = [r.speedup or 1.0 for r in results]  # valid timings: every speedup is set
    k = len(speedups)
    mean = sum(math.log(x) for x in speedups) / k
    ci = log_mean_interval(speedups)
    half = (math.log(ci[1]) - math.log(ci[0])) / 2
    point = statistics.median(speedups)
    per_gpu: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    for r, x in zip(results, speedups, strict=True):
        gpu = _gpu(r)
        if gpu is not None:
            per_gpu.setdefault(gpu, []).append(x)
    medians = [statistics.median(xs) for xs in per_gpu.values()]
    return _Estimate(
        speedup=point,
        log=math.log(point),
        se=half / Z95,
        within_se=math.sqrt(sum(se * se for _, se in logs)) / k,
        ci=ci,
        centre=mean,
        replicates=k,
        between=True,
        spread=max(medians) / min(medians) if len(medians) > 1 else None,
        gpus=len(medians),
    )


def _gpu(r: Result) -> tuple[str, tuple[str, ...]] | None:
    """The GPU a result ran on, as its worker names it (node, GPU ids); None on a CPU or where unknown."""
    worker = r.worker
    if r.device == "cpu" or worker is None or not worker.gpu_ids:
        return None
    return worker.node_id or worker.hostname, tuple(worker.gpu_ids)


class _GroupData:
    """The results of one group as they are collected, sorted by configuration."""

    def __init__(self, model: str, label: str) -> None:
        self.model = model
        self.label = label
        self.results: list[Result] = []
        self.configs: dict[str, list[Result]] = {}  # every configuration run here, in order
        self.timed: dict[str, _Timed] = {}  # configurations with a valid timing
        self.why: dict[str, str] = {}  # the others: why their first result is not a valid timing

    def add(self, r: Result) -> None:
        config = r.config_label
        self.results.append(r)
        self.configs.setdefault(config, []).append(r)
        if valid_timing(r):
            timed = self.timed.setdefault(config, _Timed())
            timed.results.append(r)
            timed.logs.append(_log_speedup(r))
        else:
            self.why.setdefault(config, _why_not_timed(r))

    def summary(self) -> Group:
        ranked = sorted((self._ranked(c, t) for c, t in self.timed.items()), key=lambda e: e.speedup, reverse=True)
        best = ranked[0] if ranked else None
        twins = {frozenset(pair) for pair in cold_twins(self.configs)}
        rivals = [r for r in ranked[1:] if best and frozenset((best.config, r.config)) not in twins]
        runner_up = rivals[0] if rivals else None
        tie = bool(best and runner_up and best.ci and runner_up.ci and best.ci[0] <= runner_up.ci[1])
        first = self.results[0]
        return Group(
            target=first.target,
            params=first.params,
            device_model=self.model,
            phase=first.phase,
            precision=first.precision,
            traffic=traffic_label(first.traffic),
            gang=gang_label(first),
            results=len(self.results),
            best=best,
            runner_up=runner_up,
            ranked=ranked,
            tie=tie,
            failed={c: s for c, s in self.why.items() if c not in self.timed and s in _STATUSES},
            decision=decide(ranked, self.configs),
        )

    @staticmethod
    def _ranked(config: str, timed: _Timed) -> Ranked:
        """A configuration's standing: replicates as one between-run figure, other repeats (seeds) combined
        by geometric mean; ``ci`` is the interval that ranks, ``ci_within`` the within-run one beside it."""
        est, first = timed.estimate, timed.results[0]
        if not est.between:  # the fields of a figure without replicates, the others at their defaults
            return Ranked(
                experiment_id=first.experiment_id, config=config, speedup=est.speedup, ci=est.ci, ci_within=est.ci
            )
        return Ranked(
            experiment_id=first.experiment_id,
            config=config,
            speedup=est.speedup,
            ci=est.ci,
            replicates=est.replicates,
            ci_within=_exp_interval(est.log, est.within_se),
            ci_between=est.ci,
            spread=est.spread,
            gpus=est.gpus,
        )


def _device(model: str, groups: list[_GroupData]) -> DeviceSummary:
    configs: dict[str, list[Result]] = {}
    for g in groups:
        for config, rs in g.configs.items():
            configs.setdefault(config, []).extend(rs)

    common: list[str] = []
    left_out: list[LeftOut] = []
    for g in groups:
        missing = [c for c in configs if c not in g.timed]
        if not missing:
            common.append(g.label)
        else:
            left_out.append(LeftOut(group=g.label, reason=_left_out_reason(missing, g.why, len(configs))))

    in_common = set(common)
    summaries = []
    for config, rs in configs.items():
        checks = Counter(r.correct for r in rs if r.status == "ok")  # True: passed, None: never checked
        passed = checks[True]
        mine = [(g.label, g.timed[config]) for g in groups if config in g.timed]
        summaries.append(
            ConfigSummary(
                config=config,
                results=len(rs),
                ok=checks.total(),
                passed=passed,
                unchecked=checks[None],
                pass_rate=passed / len(rs),
                counts=dict(Counter(r.status for r in rs if r.status != "ok")),
                common=_geomean([(label, t) for label, t in mine if label in in_common]) if common else None,
                own=_geomean(mine),
            )
        )
    return DeviceSummary(device_model=model, configs=summaries, common=common, left_out=left_out)


def _why_not_timed(r: Result) -> str:
    if r.status != "ok":
        return r.status
    return "recompiled" if r.recompiled else "no speedup"


def _left_out_reason(missing: list[str], why: dict[str, str], total: int) -> str:
    failed = [f"{c}: {why[c]}" for c in missing if c in why]
    not_run = [c for c in missing if c not in why]
    parts = []
    if failed:
        parts.append(", ".join(failed))
    if not_run:
        names = ", ".join(not_run) if len(not_run) <= 3 else f"{', '.join(not_run[:3])}, …"
        parts.append(f"not run under {len(not_run)} of {total} configurations ({names})")
    return "; ".join(parts)


def _geomean(groups: list[tuple[str, _Timed]]) -> GeoMean | None:
    """Geometric means over groups (one value per group), with a 95% interval from the groups' own:
    between-run where a group's figure comes from replicates, else within-run (``ci_within`` is the
    same point's interval from within-run noise alone). Over one group the interval is that group's
    own, as its row shows it (a bootstrap's interval is not symmetric on the log scale)."""
    if not groups:
        return None
    estimates = [t.estimate for _, t in groups]
    log, se = _combine([(e.log, e.se) for e in estimates])
    centre = sum(e.centre for e in estimates) / len(estimates)
    within = _combine([(e.log, e.within_se) for e in estimates])[1]
    own = estimates[0].ci if len(estimates) == 1 else None
    spreads = [e.spread for e in estimates if e.spread is not None]
    latency, cache = compile_latencies([r for _, t in groups for r in t.results])
    memory = [r.memory_ratio for _, t in groups for r in t.results if r.memory_ratio]
    return GeoMean(
        speedup=math.exp(log),
        ci=own or _exp_interval(centre, se),
        ci_within=own if own and not estimates[0].between else _exp_interval(log, within),
        between=sum(e.between for e in estimates),
        spread=max(spreads, default=None),
        compile_latency_s=_plain_geomean(latency),
        compile_cache=cache,
        memory_ratio=_plain_geomean(memory),
        n=len(groups),
        targets=sorted(label for label, _ in groups),
    )


def _combine(values: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Mean of independent (log value, standard error) pairs, and its standard error."""
    n = len(values)
    return sum(v for v, _ in values) / n, math.sqrt(sum(se * se for _, se in values)) / n


def _exp_interval(log: float, se: float) -> tuple[float, float]:
    """The 95% interval of a log value with a normal standard error, back on the ratio scale."""
    return math.exp(log - Z95 * se), math.exp(log + Z95 * se)


def _log_speedup(r: Result) -> tuple[float, float]:
    """The log of a result's speedup and its standard error, read off its 95% interval."""
    low, high = _interval(r) or (r.speedup, r.speedup)
    return math.log(r.speedup or 1.0), (math.log(high or 1.0) - math.log(low or 1.0)) / (2 * Z95)


def _interval(r: Result) -> tuple[float, float] | None:
    """The result's own bootstrap interval; for a result without one, a normal approximation from each
    side's median, IQR and count (se of a median: sqrt(pi/2) sigma / sqrt(n), sigma = IQR / 1.349)."""
    if r.speedup_ci:
        return r.speedup_ci
    if not (r.speedup and r.eager and r.compiled):
        return None
    se = math.sqrt(_log_median_se(r.eager) ** 2 + _log_median_se(r.compiled) ** 2)
    return r.speedup * math.exp(-Z95 * se), r.speedup * math.exp(Z95 * se)


def _log_median_se(side: SideTiming) -> float:
    if side.median_ms <= 0 or side.n < 1:
        return 0.0
    return MEDIAN_SE_FACTOR * (side.iqr_ms / IQR_PER_SIGMA) / math.sqrt(side.n) / side.median_ms


def _plain_geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
