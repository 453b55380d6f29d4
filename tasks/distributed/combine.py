"""One result for a gang: the ranks' outcomes of one experiment combined, a pure function (no torch).

The method:

1. **Status.** ``ok`` only if every rank is ok. Otherwise the failure that ended the experiment is the
   lowest rank that failed on its own (``peer_failure`` false: its target raised, its process died, it
   hung); ranks that stopped because of it, or whose collectives broke, are its consequences. Where
   every failing rank blames a peer, the lowest of them is taken. The result's status and error are that
   rank's, and ``distributed.failed_rank`` names it. A rank whose check failed makes the gang
   ``incorrect``; a rank whose check could not judge leaves ``correct`` unjudged.
2. **Step times.** Ranks meet in collectives every step, so the gang's step i takes as long as the
   slowest rank's step i: ``eager``/``compiled`` are the per-sample maximum across ranks of each rank's
   raw samples (every rank takes the same number: the ranks agree on one plan), the first call the
   slowest rank's, peak memory the highest rank's. Speedup, its interval and the memory ratio follow
   from those as for any result (``tasks.stats``).
3. **Throughput.** The gang's samples (or tokens, where every rank reports tokens) per step, summed over
   ranks, divided by the gang's median step time, per side.
4. **Compile.** ``compile_latency_s`` and ``compile_cache`` are the slowest rank's compile; graphs and
   breaks rank 0's; ``recompiled`` when any rank compiled inside its timed window.
5. **Disagreements.** Where the ranks differ in what Dynamo did (graph counts, breaks, DDPOptimizer's
   splits, recompiles on some ranks only), one line each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from tasks.distributed.outcome import RankOutcome
from tasks.models import (
    DistributedResult,
    ErrorInfo,
    Experiment,
    RankFigures,
    Result,
    SideTiming,
    result_identity,
)
from tasks.stats import side_timing, speedup_ci

SIDES = ("eager", "compiled")


def combine(exp: Experiment, outcomes: Sequence[dict[str, Any]], started_at: float, finished_at: float) -> Result:
    """One ``Result`` for the gang from each rank's outcome (plain data; see the module docstring). A rank
    missing from ``outcomes`` counts as crashed without a word; an outcome that does not validate, as
    crashed with the validation's message."""
    cfg = exp.distributed
    if cfg is None:
        raise ValueError("combine() is for distributed experiments (Experiment.distributed is None)")
    ranks = _by_rank(outcomes, cfg.world_size)
    failed = _failure(ranks)
    first = ranks[0]
    figures = [o.rank_figures() for o in ranks]
    timed = [f for f in figures if f.eager is not None and f.compiled is not None]
    sides = {side: _gang_side([getattr(f, side) for f in timed]) for side in SIDES} if len(timed) == len(ranks) else {}
    eager, compiled = sides.get("eager"), sides.get("compiled")
    slowest = max(figures, key=lambda f: f.compile_latency_s or -1.0)
    checks = [o.check for o in ranks]
    correct = _all_correct([c.correct for c in checks])
    decisive = next((c for c in checks if c.correct is False), None) or next(
        (c for c in checks if c.correct is None), checks[0]
    )
    status = failed.status if failed is not None else ("incorrect" if correct is False else "ok")
    error = failed.error if failed is not None else None
    if error is None and status == "incorrect" and decisive.mismatch:
        error = ErrorInfo(type="tasks.check.judge.Mismatch", message=decisive.mismatch)
    unit: Literal["samples/s", "tokens/s"] = "tokens/s" if all(o.tokens for o in ranks) else "samples/s"
    per_step = sum((o.tokens if unit == "tokens/s" else o.samples) or 0 for o in ranks)
    return Result(
        **result_identity(exp),
        status=status,
        error=error,
        device=first.device,
        eager=eager,
        compiled=compiled,
        compile_latency_s=slowest.compile_latency_s,
        compile_cache=slowest.compile_cache,
        speedup=eager.median_ms / compiled.median_ms if eager and compiled and compiled.median_ms > 0 else None,
        speedup_ci=speedup_ci(eager.samples_ms, compiled.samples_ms) if eager and compiled else None,
        memory_ratio=_ratio(eager, compiled),
        compile_breakdown=ranks[slowest.rank].compile_breakdown if slowest.rank < len(ranks) else {},
        graphs_compiled=figures[0].graphs_compiled,
        recompiled=any(f.recompiles for f in figures),
        recompile_reasons=[reason for o in ranks for reason in o.recompile_reasons],
        graph_count=figures[0].graph_count,
        graph_breaks=figures[0].graph_breaks,
        break_reasons=figures[0].break_reasons,
        correct=correct if failed is None else None,
        check=decisive.info if failed is None else None,
        check_note=decisive.note if failed is None and correct is None else None,
        inductor_options=dict(first.inductor_options),
        requested=exp.resources,
        started_at=started_at,
        finished_at=finished_at,
        worker=first.worker,
        measurement=first.measurement,
        distributed=DistributedResult(
            config=cfg,
            world_size=cfg.world_size,
            backend=next((o.backend for o in ranks if o.backend), "unknown"),
            batch=cfg.batch,
            global_batch=sum(o.samples for o in ranks if o.samples) or None,
            ranks=figures,
            throughput=_throughput(per_step, sides),
            throughput_unit=unit,
            disagreements=disagreements(figures),
            failed_rank=failed.rank if failed is not None else None,
        ),
    )


def _by_rank(outcomes: Sequence[dict[str, Any]], world_size: int) -> list[RankOutcome]:
    """One validated outcome per rank 0..world_size-1, in rank order; a missing or malformed one as crashed."""
    found: dict[int, RankOutcome] = {}
    for raw in outcomes:
        rank = raw.get("rank") if isinstance(raw, dict) else None
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            continue
        try:
            found[rank] = RankOutcome.model_validate({k: v for k, v in raw.items() if k in RankOutcome.model_fields})
        except ValueError as e:
            found[rank] = _crashed(rank, f"its outcome does not validate: {str(e).splitlines()[0]}")
    return [found.get(r) or _crashed(r, "no outcome came back from this rank") for r in range(world_size)]


def _crashed(rank: int, message: str) -> RankOutcome:
    return RankOutcome(rank=rank, status="crashed", error=ErrorInfo(type="RankLost", message=message), group_ok=False)


def _failure(ranks: list[RankOutcome]) -> RankOutcome | None:
    """The rank whose failure ended the experiment: the lowest that failed on its own, else the lowest failing."""
    failing = [o for o in ranks if o.status not in ("ok", "incorrect")]
    own = [o for o in failing if not o.peer_failure]
    return (own or failing)[0] if failing else None


def _all_correct(verdicts: list[bool | None]) -> bool | None:
    if any(v is False for v in verdicts):
        return False
    return None if any(v is None for v in verdicts) else True


def _gang_side(sides: list[SideTiming | None]) -> SideTiming | None:
    """Per-sample maximum across ranks (the slowest rank's step i); None where a rank lacks the side or the
    ranks took different numbers of samples."""
    present = [s for s in sides if s is not None]
    if not present or len(present) < len(sides) or len({len(s.samples_ms) for s in present}) != 1:
        return None
    samples = [max(step) for step in zip(*(s.samples_ms for s in present), strict=True)]
    return side_timing(
        max(s.first_call_ms for s in present),
        samples,
        present[0].warmup,
        present[0].block_size,
        peak_memory_bytes=_most([s.peak_memory_bytes for s in present]),
        device_samples_ms=_per_step_max([s.device_samples_ms for s in present]),
        host_bound=any(s.host_bound for s in present) if any(s.host_bound is not None for s in present) else None,
    )


def _most(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _per_step_max(lists: list[list[float] | None]) -> list[float] | None:
    if any(x is None for x in lists) or len({len(x or []) for x in lists}) != 1:
        return None
    return [max(step) for step in zip(*(x or [] for x in lists), strict=True)]


def _ratio(eager: SideTiming | None, compiled: SideTiming | None) -> float | None:
    if eager and compiled and eager.peak_memory_bytes and compiled.peak_memory_bytes:
        return eager.peak_memory_bytes / compiled.peak_memory_bytes
    return None


def _throughput(per_step: int, sides: dict[str, SideTiming | None]) -> dict[str, float]:
    """Samples (or tokens) per second of the whole gang, per side, at the gang's median step time."""
    return {
        side: per_step / (timing.median_ms / 1e3)
        for side, timing in sides.items()
        if timing is not None and timing.median_ms > 0 and per_step
    }


FIGURES: dict[str, Callable[[RankFigures], object]] = {  # what the ranks should agree on, by name
    "graphs compiled": lambda f: f.graphs_compiled,
    "graph breaks": lambda f: f.graph_breaks,
    "DDPOptimizer splits": lambda f: f.ddp_splits,
}


def disagreements(figures: list[RankFigures]) -> list[str]:
    """Where ranks that measured differ in what Dynamo did: one line per figure, naming each rank's value."""
    measured = [f for f in figures if f.error is None and f.compile_latency_s is not None]
    lines = []
    for name, value in FIGURES.items():
        values = {f.rank: value(f) for f in measured}
        if len(set(values.values())) > 1:
            lines.append(f"{name} differ: " + ", ".join(f"rank {r}: {v}" for r, v in values.items()))
    recompiled = [f.rank for f in measured if f.recompiles]
    if recompiled and len(recompiled) < len(measured):
        lines.append(f"recompiled inside the timed window on rank(s) {', '.join(map(str, recompiled))} only")
    return lines
