"""Distributed results for people: each rank's figures, and how compile's speedup scales from 1 to k ranks.

A distributed result (``Result.distributed``) holds the experiment's step as the gang's (step i the slowest
rank's step i: ranks meet in collectives every step) and each rank's own figures (``RankFigures``):
its step times per side, its compile and cache use, its graphs and DDPOptimizer's splits, its error.
``rank_rows`` shows them one row a rank, so that a slow or disagreeing rank stands out. ``scaling_rows``
lines up the results of one target, strategy and configuration across world sizes: each world size's
step times, compile speedup and samples per second, and the compiled throughput against one rank's
(``vs 1 rank``: 2.0x at two ranks is linear scaling). Several results at one point (seeds, replicates)
give their median. Views like the others (``views`` lists them in reading order), with the charts of the
HTML page reading ``scaling`` too; imports only the cells and the models.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.report.cells import Rows, figure, ms, seconds, times
from orchestrator.report.models import group_label, result_group
from tasks.models import RankFigures, Result, SideTiming

RANKS_NOTE = (
    "one row a rank: its own step times (median of its samples), speedup and compile. The experiment's step is "
    "the slowest rank's at each step; ddp splits are the graphs DDPOptimizer cut at bucket boundaries, not breaks."
)
SCALING_NOTE = (
    "each world size's median over its ok results; samples/s for the whole gang; vs 1 rank: compiled samples/s "
    "over the same configuration's at world size 1 (2.00x at 2 ranks is linear scaling)."
)


def distributed(results: Sequence[Result]) -> list[Result]:
    """The results of distributed experiments, in report order."""
    return [r for r in results if r.distributed is not None]


def _median_ms(side: SideTiming | None) -> float | None:
    return side.median_ms if side is not None else None


def _rank_speedup(rank: RankFigures) -> float | None:
    eager, compiled = _median_ms(rank.eager), _median_ms(rank.compiled)
    return eager / compiled if eager and compiled else None


def rank_rows(results: Sequence[Result]) -> Rows:
    """One row a rank of each distributed result: where it ran, its step times, compile and graphs."""
    headers = ["target", "config", "rank", "host", "GPU", "eager ms", "compiled ms", "speedup", "compile s"]
    headers += ["cache", "graphs", "breaks", "ddp splits", "recompiles", "status"]
    rows = []
    notes = [RANKS_NOTE]
    for r in distributed(results):
        assert r.distributed is not None
        for rank in r.distributed.ranks:
            failed = rank.rank == r.distributed.failed_rank
            status = f"{rank.error.type}: {rank.error.message}" if rank.error else ("failed" if failed else "ok")
            rows.append(
                [
                    result_group(r),
                    r.config_label,
                    str(rank.rank),
                    rank.hostname or "-",
                    ",".join(rank.gpu_ids) or "-",
                    ms(_median_ms(rank.eager)),
                    ms(_median_ms(rank.compiled)),
                    times(_rank_speedup(rank)),
                    seconds(rank.compile_latency_s),
                    rank.compile_cache.label if rank.compile_cache else "-",
                    _count(rank.graph_count),
                    _count(rank.graph_breaks),
                    _count(rank.ddp_splits),
                    str(rank.recompiles),
                    status,
                ]
            )
        notes += [f"{result_group(r)} [{r.config_label}]: {d}" for d in r.distributed.disagreements]
    right = {"rank", "eager ms", "compiled ms", "speedup", "compile s", "graphs", "breaks", "ddp splits", "recompiles"}
    return Rows("ranks of distributed experiments", headers, rows, right, notes if rows else [])


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


@dataclass(frozen=True)
class Point:
    """One world size of a scaling series: medians over its ok results."""

    world_size: int
    eager_ms: float | None
    compiled_ms: float | None
    speedup: float | None
    throughput: dict[str, float]  # side -> samples (or tokens) per second for the whole gang
    unit: str
    results: int


@dataclass(frozen=True)
class Series:
    """A target, its params, phase, precision, strategy and configuration across world sizes."""

    label: str  # the group without the world size: ``models.gpt training ddp``
    config: str
    points: list[Point]

    def vs_one_rank(self, point: Point) -> float | None:
        """Compiled throughput at ``point`` over its world size 1's, where both were measured."""
        one = next((p for p in self.points if p.world_size == 1), None)
        base, here = (one.throughput.get("compiled") if one else None), point.throughput.get("compiled")
        return here / base if base and here else None


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def scaling(results: Sequence[Result]) -> list[Series]:
    """The distributed results' series across world sizes, in report order; a series with one world size too."""
    by_series: dict[tuple[str, str, str], dict[int, list[Result]]] = {}
    labels: dict[tuple[str, str, str], str] = {}
    key: tuple[str, str, str]
    for r in distributed(results):
        assert r.distributed is not None
        if r.status != "ok":
            continue
        config = r.distributed.config
        key = (json.dumps([r.target, r.params, r.phase, r.precision], default=str), config.strategy, r.config_label)
        labels.setdefault(key, group_label(r.target, r.params, r.phase, r.precision, config.strategy))
        by_series.setdefault(key, {}).setdefault(config.world_size, []).append(r)
    out = []
    for key, sizes in by_series.items():
        points = []
        for size in sorted(sizes):
            rs = sizes[size]
            sides = {side for r in rs for side in (r.distributed.throughput if r.distributed else {})}
            points.append(
                Point(
                    world_size=size,
                    eager_ms=_median([_median_ms(r.eager) for r in rs]),
                    compiled_ms=_median([_median_ms(r.compiled) for r in rs]),
                    speedup=_median([r.speedup for r in rs]),
                    throughput={
                        side: v
                        for side in sorted(sides)
                        if (v := _median([r.distributed.throughput.get(side) for r in rs if r.distributed])) is not None
                    },
                    unit=rs[0].distributed.throughput_unit if rs[0].distributed else "samples/s",
                    results=len(rs),
                )
            )
        out.append(Series(labels[key], key[2], points))
    return out


def scaling_rows(results: Sequence[Result]) -> Rows:
    """One row a world size of each series: step times, compile speedup, throughput, against one rank."""
    headers = ["target", "config", "world size", "eager step ms", "compiled step ms", "speedup"]
    headers += ["eager samples/s", "compiled samples/s", "vs 1 rank", "n"]
    rows = []
    for series in scaling(results):
        for p in series.points:
            vs = series.vs_one_rank(p)
            rows.append(
                [
                    series.label,
                    series.config,
                    str(p.world_size),
                    ms(p.eager_ms),
                    ms(p.compiled_ms),
                    times(p.speedup),
                    _rate(p.throughput.get("eager")),
                    _rate(p.throughput.get("compiled")),
                    times(vs),
                    str(p.results),
                ]
            )
    right = set(headers[2:])
    return Rows("scaling across world sizes", headers, rows, right, [SCALING_NOTE] if rows else [])


def _rate(value: float | None) -> str:
    return "-" if value is None else figure(value)
