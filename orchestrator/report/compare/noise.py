"""The noise an experiment without replicates is judged against: the sweep's own, a stored A/A figure, or none.

An experiment with fewer than ``MIN_RUNS`` runs a side has no run-to-run noise of its own. A big sweep
measures it for all of them at once (``judge``), per device model, as large-scale testing does (Efron's
empirical null): most experiments did not change, so the spread of their log changes is the noise. Each
change is scaled to one run against one (``Move.scale``), the bulk is described robustly (its median and
1.4826 MAD, ``tasks.stats.empirical_null``) and each experiment gets a two-sided normal p-value against it
(Student's t fitted to the sweep's tails where they are far heavier than a normal's).
A shift of the whole sweep (every experiment a little slower) is in that null's centre, not in any
experiment's p: it is tested on its own, Wilcoxon's signed-rank test on the log changes
(``tasks.stats.median_shift``), and becomes one verdict. Below ``MIN_SWEEP`` experiments (or with no spread
at all) an A/A noise figure of the same device model and metric stands in, centred on 0; without one the
experiments are untested.

Imports the comparison's data (``compare.models``) and the statistics; nothing of reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.report.compare.models import (
    AA_NOISE,
    EMPIRICAL,
    MIN_SWEEP,
    UNTESTED,
    Metric,
    NoiseFigure,
    SweepNoise,
)
from tasks.stats import empirical_null, median_shift, normal_p


@dataclass(frozen=True)
class Move:
    """One experiment's move on the gated metric: log(new / base) of the sides' geometric means over runs."""

    log_change: float
    runs: tuple[int, int]  # runs behind each side

    @property
    def scale(self) -> float:
        """The SD of this log change in units of one run against one, when every run scatters alike:
        a side's geometric mean over k runs has the variance of one run over k, so sqrt((1/kb + 1/kn) / 2)."""
        kb, kn = self.runs
        return math.sqrt((1 / kb + 1 / kn) / 2)


@dataclass(frozen=True)
class Judged:
    """Moves of one device model judged together (``judge``)."""

    p: list[float | None]  # per move, in order; None: untested
    deviation: list[float]  # per move: its scaled log change less the null's centre (the direction judged)
    test: str  # EMPIRICAL, AA_NOISE or UNTESTED
    noise: SweepNoise


def find_figure(figures: Sequence[NoiseFigure], device_model: str, metric: Metric) -> NoiseFigure | None:
    """The last stored A/A figure of this device model and metric, if any."""
    found = [f for f in figures if f.device_model == device_model and f.metric == metric]
    return found[-1] if found else None


def judge(device_model: str, metric: Metric, moves: Sequence[Move], figures: Sequence[NoiseFigure]) -> Judged:
    """p-values for the moves of one device model's experiments without replicates.

    1. ``MIN_SWEEP`` moves or more: the empirical null of their scaled log changes (median, 1.4826 MAD;
       normal, or Student's t where the tails are heavy: ``tasks.stats.empirical_null``); each move's p is
       two-sided against it; the median raw log change is tested against 0 by
       Wilcoxon's signed-rank test (``SweepNoise.shift``, ``shift_p``), the sweep-wide verdict.
    2. Fewer (or a spread of 0: more than half the experiments exactly unchanged, as when a report is
       compared with an edited copy of itself): the stored A/A figure's spread, centred on 0.
    3. No figure: untested (p None); ``SweepNoise.why`` says why.
    """
    scaled = [m.log_change / m.scale for m in moves]
    count = len(moves)
    if count >= MIN_SWEEP:
        null = empirical_null(scaled)
        if null.spread > 0:
            shift = median_shift([m.log_change for m in moves])
            noise = SweepNoise(
                device_model=device_model,
                metric=metric,
                experiments=count,
                source="sweep",
                centre=null.centre,
                spread=null.spread,
                df=None if math.isinf(null.df) else null.df,
                shift=shift.median,
                shift_p=shift.p,
            )
            deviation = [x - null.centre for x in scaled]
            return Judged(list(null.p(scaled)), deviation, EMPIRICAL, noise)
        why = "more than half of the experiments exactly unchanged: no spread to measure the sweep's noise by"
    else:
        why = f"fewer than the {MIN_SWEEP} experiments that measure the sweep's own noise"
    figure = find_figure(figures, device_model, metric)
    if figure is not None:
        noise = SweepNoise(
            device_model=device_model,
            metric=metric,
            experiments=count,
            source="aa",
            spread=figure.spread,
            figure=figure,
            why=why,
        )
        return Judged(list(normal_p(scaled, 0.0, figure.spread)), scaled, AA_NOISE, noise)
    why += f", and no A/A noise figure for {device_model} ({metric})"
    noise = SweepNoise(device_model=device_model, metric=metric, experiments=count, source="none", why=why)
    return Judged([None] * count, scaled, UNTESTED, noise)
