"""The summary: statistics over a report's results, derived, never measured."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import get_args

from orchestrator.report.models import Best, GeoMean, Recompiled, Summary
from tasks.models import Result, Status
from tasks.stats import geomean, geomean_ci


def device_model(result: Result) -> str:
    """The hardware a result was measured on: the GPU's name, or the CPU's."""
    worker = result.worker
    if result.device == "cuda" and worker and worker.gpu_name:
        return worker.gpu_name
    return f"CPU ({worker.cpu_model})" if worker and worker.cpu_model else "CPU"


def summarize(results: Sequence[Result]) -> Summary:
    """Counts by status; per target the best configuration; geometric-mean speedups.

    Geometric means are taken over every ``ok`` result of a configuration, slowdowns
    included as they are (a 0.5x result pulls the mean down; nothing is clipped at 1).
    Results that compiled inside their timed window, or hit the recompile limit, are
    listed apart and kept out of the bests and the means.
    """
    counts = Counter({status: 0 for status in get_args(Status)})
    counts.update(r.status for r in results)
    recompiled = [
        Recompiled(experiment_id=r.experiment_id, target=r.target, config=r.config_label, reasons=r.recompile_reasons)
        for r in results
        if r.recompiled
    ]
    timed = [r for r in results if r.status == "ok" and r.speedup and not r.recompiled]

    best: dict[str, Best] = {}
    for r in timed:
        speedup = r.speedup or 0.0
        if r.target not in best or speedup > best[r.target].speedup:
            best[r.target] = Best(
                experiment_id=r.experiment_id, config=r.config_label, params=r.params, speedup=speedup
            )

    by_model: dict[str, list[Result]] = defaultdict(list)
    for r in timed:
        by_model[device_model(r)].append(r)
    return Summary(
        counts=dict(counts),
        recompiled=recompiled,
        best_by_target=best,
        geomean_by_config=_geomeans(timed),
        geomean_by_device_model={model: _geomeans(rs) for model, rs in sorted(by_model.items())},
    )


def _geomeans(results: Sequence[Result]) -> dict[str, GeoMean]:
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        groups[r.config_label].append(r)
    out = {}
    for config, rs in groups.items():
        pairs = [(r.eager.samples_ms, r.compiled.samples_ms) for r in rs if r.eager and r.compiled]
        out[config] = GeoMean(
            speedup=geomean([r.speedup for r in rs if r.speedup]),
            ci=geomean_ci(pairs),
            n=len(rs),
            targets=sorted({r.target for r in rs}),
        )
    return out
