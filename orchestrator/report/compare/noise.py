"""The noise an experiment without replicates is judged against: the sweep's own, a stored A/A figure, or none.

An experiment with fewer than ``MIN_RUNS`` runs a side has no run-to-run noise of its own. A big sweep
measures it for all of them at once (``judge``), per device model, as large-scale testing does (Efron's
empirical null): most experiments did not change, so the spread of their log changes is the noise. The
experiments of one sweep are not equally noisy (a 0.3 ms call scatters more than a 10 ms one), and a null
of their raw changes is then heavy-tailed: the quiet ones' real changes hide among the noisy ones' noise.
So where every run knows how far its own samples let its median move (``Move.se``, from the samples' IQR:
``tasks.stats.log_median_se``), each change less the sweep's median change is divided by its own noise, that
standard error and a run-to-run part every experiment shares (``standardized``, a random-effects model),
and the null is of those standardized changes (``SweepNoise.se_spread``, ``between``). Without them, each
change is scaled to one run against one (``Move.scale``). Either way the bulk is described robustly (its
median and 1.4826 MAD, ``tasks.stats.empirical_null``) and each experiment gets a two-sided normal p-value
against it (Student's t fitted to the sweep's tails where they are far heavier than a normal's).
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

import numpy as np

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
    se: float | None = None  # the standard error of ``log_change`` from the runs' own samples; None: unknown

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


@dataclass(frozen=True)
class Standardized:
    """Moves standardized by their own noise (``standardized``)."""

    values: list[float]  # each move's log change less the centre, over sqrt(se^2 + between^2)
    between: float  # the run-to-run SD beyond the runs' own standard errors (0: they account for it all)


def standardized(moves: Sequence[Move], centre: float) -> Standardized | None:
    """Each move's log change less ``centre`` (the sweep's median change) over its own noise, as a
    random-effects model has it: its runs' standard error and a run-to-run part all moves share,
    sqrt(se^2 + between^2). ``between`` is 0 where the standard errors alone give the standardized moves a
    spread (1.4826 MAD) of 1 or less; otherwise the value that makes it 1 (``scipy.optimize.brentq``): a
    quiet experiment's move then counts for more than a noisy one's, and where drift between runs dwarfs
    every run's own scatter all moves count alike, as unstandardized. A standard error of 0 (samples with
    no IQR at all: a coarse timer's ticks) counts as the smallest any other move has. None where a move
    knows none (a report from before runs kept theirs) or none is above 0: the moves are judged
    unstandardized."""
    known = [m.se for m in moves if m.se is not None]
    positive = [se for se in known if se > 0]
    if not moves or len(known) < len(moves) or not positive:
        return None
    from scipy.optimize import brentq
    from scipy.stats import median_abs_deviation

    residual = np.array([m.log_change - centre for m in moves])
    se = np.maximum(np.array(known, dtype=float), min(positive))

    def spread(between: float) -> float:
        return float(median_abs_deviation(residual / np.sqrt(se * se + between * between), scale="normal"))

    between = 0.0
    if spread(0.0) > 1:
        high = 10 * float(np.max(np.abs(residual)))
        between = float(brentq(lambda b: spread(b) - 1, 0.0, high)) if spread(high) < 1 else high
    return Standardized([float(x) for x in residual / np.sqrt(se * se + between * between)], between)


def find_figure(figures: Sequence[NoiseFigure], device_model: str, metric: Metric) -> NoiseFigure | None:
    """The last stored A/A figure of this device model and metric, if any."""
    found = [f for f in figures if f.device_model == device_model and f.metric == metric]
    return found[-1] if found else None


def judge(device_model: str, metric: Metric, moves: Sequence[Move], figures: Sequence[NoiseFigure]) -> Judged:
    """p-values for the moves of one device model's experiments without replicates.

    1. ``MIN_SWEEP`` moves or more: the empirical null (median, 1.4826 MAD; normal, or Student's t where the
       tails are heavy: ``tasks.stats.empirical_null``) of their log changes standardized by their own
       standard errors (``standardized``), or where not every move knows one, scaled to one run against
       one; each move's p is two-sided against it. ``SweepNoise.spread`` is the scaled changes' spread
       either way (what an A/A figure stores). The median raw log change is tested against 0 by Wilcoxon's
       signed-rank test (``SweepNoise.shift``, ``shift_p``), the sweep-wide verdict.
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
            std = standardized(moves, shift.median)
            values = std.values if std else scaled
            tested = empirical_null(values) if std else null
            noise = SweepNoise(
                device_model=device_model,
                metric=metric,
                experiments=count,
                source="sweep",
                centre=null.centre,
                spread=null.spread,
                se_spread=tested.spread if std else None,
                between=std.between if std else None,
                df=None if math.isinf(tested.df) else tested.df,
                shift=shift.median,
                shift_p=shift.p,
            )
            deviation = [x - tested.centre for x in values]
            return Judged(list(tested.p(values)), deviation, EMPIRICAL, noise)
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
