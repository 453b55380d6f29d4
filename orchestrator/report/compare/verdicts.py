"""The verdicts on speed and compile latency: each experiment's move tested, the p-values of one comparison
adjusted together, and the changes that count.

An experiment's move on a gated quantity is a ``Candidate``: the ratio new / base of the sides' geometric
means over runs. With ``MIN_RUNS`` or more runs a side its p-value is Welch's t on the runs' logs
(``tasks.stats.welch_log``); with fewer, a speed move is judged against the sweep's own noise, an A/A figure
or nothing (``compare.noise``), and a compile latency is one sample a side, judged by its threshold alone.
The p-values of one comparison are adjusted together by Benjamini-Hochberg (``tasks.stats.fdr_adjust``),
speed and compile latency each a family of their own, and a move counts when it is beyond its threshold
and its adjusted p is below q. Imports the comparison's data, the noise, the summary (device models), the
compile phases and the cells; nothing that draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from orchestrator.report.cells import ms, seconds, times
from orchestrator.report.compare.models import (
    MIN_RUNS,
    ONE_RUN,
    ONE_SAMPLE,
    UNTESTED,
    UNTESTED_BOUND,
    WELCH,
    WILCOXON,
    Change,
    Kind,
    Metric,
    NoiseFigure,
    SweepNoise,
    Thresholds,
)
from orchestrator.report.compare.noise import Move, judge
from orchestrator.report.compile_phases import explain, explanation
from orchestrator.report.digest import Digest
from tasks.stats import fdr_adjust, geomean, welch_log


@dataclass
class Candidate:
    """One experiment's move on a gated quantity (the speed metric, or compile latency), before the verdict:
    the ratio new / base of the sides' geometric means over runs, and its test once run."""

    b: list[Digest]
    n: list[Digest]
    ratio: float
    p: float | None = None
    p_adjusted: float | None = None
    test: str = UNTESTED
    deviation: float = 0.0  # the move as its test saw it (scaled, less the null's centre): its direction
    se: float | None = None  # the within-run standard error of log(ratio) (``within_run_se``)
    note: str = ""
    # what the change shows beside the ratio (base, new, change, phases): worked out only for a candidate
    # that becomes a change, not for each of a big sweep's unchanged experiments
    describe: Callable[[], dict[str, str]] = field(default=dict, repr=False)

    @property
    def runs(self) -> tuple[int, int]:
        return len(self.b), len(self.n)

    def significant(self, q: float) -> bool:
        """Tested, the adjusted p below ``q``, and the test saw the move in its own direction (against a
        sweep-wide shift an experiment can move less than the rest, the other way from its own move)."""
        return self.p_adjusted is not None and self.p_adjusted < q and self.deviation * math.log(self.ratio) > 0


def run_values(runs: Sequence[Digest], metric: Metric) -> list[float]:
    """One value a timed run: its speedup (eager median / compiled median), or its compiled median ("time")."""
    if metric == "speedup":
        return [r.speedup for r in runs if r.speedup]
    return [r.compiled_ms for r in runs if r.compiled_ms is not None]


def within_run_se(runs: Sequence[Digest], metric: Metric) -> float | None:
    """The standard error of log of one side's geometric mean of ``metric`` over its runs, from each run's own
    samples (``Digest.eager_se``, ``compiled_se``): a speedup's log is the difference of its sides' log
    medians, so their variances add; a mean over k runs has the sum of their variances over k^2. None where
    a run does not know its own."""
    total = 0.0
    for r in runs:
        sides = (r.eager_se, r.compiled_se) if metric == "speedup" else (r.compiled_se,)
        if any(se is None for se in sides):
            return None
        total += sum(se * se for se in sides if se is not None)
    return math.sqrt(total) / len(runs) if runs else None


def speed_candidate(b: Sequence[Digest], n: Sequence[Digest], metric: Metric) -> Candidate:
    """The move of ``metric`` between two sides' ok, timed runs, with Welch's p where both have ``MIN_RUNS``;
    the other metric's move is kept to be shown beside it, never gated."""
    speedup = geomean(run_values(n, "speedup")) / geomean(run_values(b, "speedup"))
    time = geomean(run_values(n, "time")) / geomean(run_values(b, "time"))
    c = Candidate(list(b), list(n), speedup if metric == "speedup" else time)
    b_se, n_se = within_run_se(c.b, metric), within_run_se(c.n, metric)
    c.se = math.hypot(b_se, n_se) if b_se is not None and n_se is not None else None
    c.describe = partial(_speed_extra, c, speedup, time, metric)
    if min(c.runs) >= MIN_RUNS:
        c.p, c.test = welch_log(run_values(b, metric), run_values(n, metric)).p, WELCH
        c.deviation = math.log(c.ratio)
    return c


def speed_changes(
    candidates: Sequence[Candidate], t: Thresholds, figures: Sequence[NoiseFigure] = ()
) -> tuple[list[Change], list[SweepNoise]]:
    """Slower or faster on the gated metric, and the noise experiments without replicates were judged by.

    1. Candidates with fewer than ``MIN_RUNS`` runs a side are judged per device model
       (``compare.noise.judge``): against the sweep's own noise, an A/A figure, or untested.
    2. Every p-value (Welch's and those) is adjusted together, Benjamini-Hochberg (``_adjust``).
    3. A move beyond ``t.speed`` is a change when significant at ``t.fdr``; untested, it is listed with
       no p and fails the gate only beyond ``UNTESTED_BOUND``.
    4. Per device model judged against its own noise, the median move of all its experiments, when beyond
       ``t.sweep`` and Wilcoxon's p < ``t.fdr``, is one sweep-wide change (``_sweep_change``).
    """
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        if min(c.runs) < MIN_RUNS:
            groups.setdefault(c.n[0].device_model or "unknown", []).append(c)
    swept = []
    for model, group in groups.items():
        judged = judge(model, t.metric, [Move(math.log(c.ratio), c.runs, c.se) for c in group], figures)
        for c, p, deviation in zip(group, judged.p, judged.deviation, strict=True):
            c.p, c.deviation, c.test = p, deviation, judged.test
            c.note = untested_note(*c.runs) if p is None else ""
        swept.append(judged.noise)
    _adjust(candidates)
    changes = []
    for c in candidates:
        slower, faster = _beyond(c.ratio, t.speed, t.metric)
        tested = c.test != UNTESTED
        if not (slower or faster) or (tested and not c.significant(t.fdr)):
            continue
        regression = slower and (tested or _beyond(c.ratio, UNTESTED_BOUND, t.metric)[0])
        kind: Kind = "slower" if slower else "faster"
        changes.append(_candidate_change(kind, c, regression))
    changes += [change for noise in swept if (change := _sweep_change(noise, t))]
    return changes, swept


def _beyond(ratio: float, threshold: float, metric: Metric) -> tuple[bool, bool]:
    """(slower, faster): the gated metric moved beyond ``threshold`` the bad way or the good way."""
    if metric == "speedup":
        return ratio < 1 - threshold, ratio > 1 + threshold
    return ratio > 1 + threshold, ratio < 1 - threshold


def _adjust(candidates: Sequence[Candidate]) -> None:
    """Set each tested candidate's Benjamini-Hochberg adjusted p, over every tested candidate given."""
    tested = [c for c in candidates if c.p is not None]
    for c, adjusted in zip(tested, fdr_adjust([c.p for c in tested if c.p is not None]), strict=True):
        c.p_adjusted = adjusted


def _sweep_change(noise: SweepNoise, t: Thresholds) -> Change | None:
    """The median move of a device model's experiments judged against their own noise, as one change:
    listed when beyond ``t.sweep`` and Wilcoxon's p < ``t.fdr``, a regression when slower."""
    if noise.source != "sweep" or noise.shift is None or noise.shift_p is None or noise.shift_p >= t.fdr:
        return None
    ratio = math.exp(noise.shift)
    slower, faster = _beyond(ratio, t.sweep, t.metric)
    if not (slower or faster):
        return None
    count = noise.experiments
    return Change(
        kind="sweep_slower" if slower else "sweep_faster",
        experiment_id="",
        target=f"all {count} experiments without replicates",
        config="-",
        device_model=noise.device_model,
        base="-",
        new="-",
        change=f"median {t.metric} {percent(ratio)}",
        runs=(count, count),
        test=WILCOXON,
        p_value=noise.shift_p,
        note=f"every experiment's move judged against the sweep's spread around this median ({_spread(noise)})",
        regression=slower,
    )


def untested_note(base_runs: int, new_runs: int) -> str:
    """Why a speed change has no p-value."""
    if base_runs == new_runs == 1:
        return ONE_RUN
    return f"{base_runs} vs {new_runs} runs: run-to-run noise not measured (a test needs {MIN_RUNS} a side)"


def compile_comparable(b: Digest, n: Digest) -> str | None:
    """None when the two compile latencies were served alike (the same cache state, and each layer
    hit or missed alike); else why they measure different things. A report from before caches were
    recorded compares by state alone."""
    if b.cache != n.cache:
        return f"cache {b.cache} vs {n.cache}"
    if b.cache_state is not None and n.cache_state is not None and b.cache_outcome != n.cache_outcome:
        return f"{b.cache_label} vs {n.cache_label}"
    return None


def compile_candidate(b: Sequence[Digest], n: Sequence[Digest]) -> tuple[Candidate | None, str | None]:
    """The move of compile latency (geometric means over runs), Welch's p where both sides have
    ``MIN_RUNS`` runs; runs the caches served differently (a hit against a miss, on either side) are never
    compared: the reason comes back instead."""
    b_runs = [r for r in b if r.compile_latency_s]
    n_runs = [r for r in n if r.compile_latency_s]
    if not (b_runs and n_runs):
        return None, None
    apart = next((why for r in b_runs[1:] + n_runs if (why := compile_comparable(b_runs[0], r))), None)
    if apart is not None:
        return None, f"{n_runs[0].label}: compile latencies not compared ({apart})"
    b_s, n_s = (geomean([r.compile_latency_s or 0.0 for r in rs]) for rs in (b_runs, n_runs))
    c = Candidate(b_runs, n_runs, n_s / b_s)
    c.describe = partial(_compile_extra, c, b_s, n_s)
    if min(c.runs) >= MIN_RUNS:
        before, after = ([r.compile_latency_s or 0.0 for r in rs] for rs in (b_runs, n_runs))
        c.p, c.test, c.deviation = welch_log(before, after).p, WELCH, math.log(c.ratio)
    else:
        c.note = ONE_SAMPLE if c.runs == (1, 1) else f"{c.runs[0]} vs {c.runs[1]} samples: {ONE_SAMPLE[13:]}"
    return c, None


def _speed_extra(c: Candidate, speedup: float, time: float, metric: Metric) -> dict[str, str]:
    """A speed change's cells: both sides' compiled median and speedup, the gated move and the other one."""
    moves = {"speedup": f"speedup {percent(speedup)}", "time": f"time {percent(time)}"}
    other = "time" if metric == "speedup" else "speedup"
    return {"change": f"{moves[metric]} ({moves[other]})", "base": _speed_text(c.b), "new": _speed_text(c.n)}


def _compile_extra(c: Candidate, b_s: float, n_s: float) -> dict[str, str]:
    """A compile-latency change's cells, and the phases that account for 80% of the move."""
    first = c.n[0]
    how = first.cache_label or first.cache
    return {
        "base": f"{seconds(b_s)} s",
        "new": f"{seconds(n_s)} s ({how})",
        "change": percent(c.ratio),
        "phases": explanation(explain(c.b, c.n, n_s - b_s)),
    }


def compile_changes(candidates: Sequence[Candidate], t: Thresholds) -> list[Change]:
    """Compile latency that moved beyond ``t.compile``: with ``MIN_RUNS`` runs a side when Welch's p, adjusted
    with the comparison's other compile latencies (Benjamini-Hochberg), is below ``t.fdr``; with fewer, one
    sample a side, by the threshold alone. A regression only with ``t.gate_compile``."""
    _adjust(candidates)
    changes = []
    for c in candidates:
        if abs(c.ratio - 1) <= t.compile or (c.test != UNTESTED and not c.significant(t.fdr)):
            continue
        slower = c.ratio > 1
        kind: Kind = "compile_slower" if slower else "compile_faster"
        changes.append(_candidate_change(kind, c, slower and t.gate_compile))
    return changes


def _candidate_change(kind: Kind, c: Candidate, regression: bool) -> Change:
    cells = c.describe()
    return new_change(
        kind,
        c.n[0],
        cells["base"],
        cells["new"],
        cells["change"],
        c.runs,
        regression,
        p=c.p,
        p_adjusted=c.p_adjusted,
        test=c.test,
        note=c.note,
        phases=cells.get("phases", ""),
    )


def _speed_text(runs: Sequence[Digest]) -> str:
    """A side's compiled median and speedup, geometric means over its runs."""
    return f"{ms(geomean(run_values(runs, 'time')))} ms, {times(geomean(run_values(runs, 'speedup')))}"


def new_change(
    kind: Kind,
    r: Digest,
    base: str,
    new: str,
    change: str,
    runs: tuple[int, int],
    regression: bool,
    p: float | None = None,
    p_adjusted: float | None = None,
    test: str | None = None,
    note: str = "",
    phases: str = "",
) -> Change:
    """A change of the experiment ``r`` ran, labelled as the report labels it."""
    return Change(
        kind=kind,
        experiment_id=r.experiment_id,
        target=r.group,
        config=r.config,
        device_model=r.device_model,
        base=base,
        new=new,
        change=change,
        runs=runs,
        test=test,
        p_value=p,
        p_adjusted=p_adjusted,
        note=note,
        phases=phases,
        regression=regression,
    )


def percent(ratio: float) -> str:
    """A ratio as a signed change: 0.9 -> ``-10.0%``."""
    return f"{(ratio - 1) * 100:+.1f}%"


def _spread(noise: SweepNoise) -> str:
    """A null's spread: the SD of the log change of one run against one, as a percentage, and that of the
    changes in units of their own standard errors where they were judged so."""
    text = f"spread {noise.spread or 0.0:.1%} a run against a run"
    return text if noise.se_spread is None else f"{text}, {noise.se_spread:.2f} in units of its own runs' SE"
