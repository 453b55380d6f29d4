"""Statistics derived from raw timing samples; pure functions of the samples, nothing measured here.

Every figure a report shows about a side (median, IQR, noise) or about a comparison (speedup
and its confidence interval) comes from these functions, so that it can be recomputed from
the raw samples the report keeps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from tasks.models import SampleStats, SideTiming

NOISY_IQR_RATIO = 0.10  # IQR/median above this marks a side noisy (torch.utils.benchmark warns at 10%)
BOOTSTRAP_RESAMPLES = 2000  # replicates per interval; the 2.5/97.5 percentiles move < 1% beyond this
BOOTSTRAP_SEED = 0  # fixed, so the same samples give the same interval in every report
CONFIDENCE = 0.95
MAX_RESAMPLED_VALUES = 10**6  # resampled values one side's bootstrap holds at once (8 MB), whatever n is


def describe(samples: Sequence[float]) -> SampleStats:
    """Median, min, mean, interquartile range, count, and whether IQR/median exceeds 10%."""
    a = np.asarray(samples, dtype=float)
    q1, median, q3 = np.percentile(a, [25, 50, 75])
    iqr = float(q3 - q1)
    return SampleStats(
        median_ms=float(median),
        min_ms=float(a.min()),
        mean_ms=float(a.mean()),
        iqr_ms=iqr,
        n=int(a.size),
        noisy=bool(median > 0 and iqr / median > NOISY_IQR_RATIO),
    )


# A median's standard error is sqrt(pi / 2) = 1.2533 times the mean's for normal samples, and a normal's SD is
# its IQR / 1.349: the SE of a median from its IQR alone, robust to the outliers the IQR ignores.
MEDIAN_SE_PER_IQR: Final = math.sqrt(math.pi / 2) / 1.349


def log_median_se(stats: SampleStats) -> float | None:
    """The standard error of log(median) of one side's samples, from their IQR and count alone (IQR / median
    is the log samples' IQR to first order): ``MEDIAN_SE_PER_IQR`` (IQR / median) / sqrt(n). None with fewer
    than 2 samples or a median of 0; 0.0 where the IQR is 0. How much a run's median would move if the run
    were taken again under the same conditions: within-run noise, not the run-to-run drift beyond it."""
    if stats.n < 2 or stats.median_ms <= 0:
        return None
    return MEDIAN_SE_PER_IQR * (stats.iqr_ms / stats.median_ms) / math.sqrt(stats.n)


def side_timing(
    first_call_ms: float, samples_ms: list[float], warmup: int, block_size: int = 1, **extra: Any
) -> SideTiming:
    """One side's raw samples with how they were taken, and the statistics ``describe`` derives."""
    return SideTiming(
        first_call_ms=first_call_ms,
        samples_ms=samples_ms,
        warmup=warmup,
        block_size=block_size,
        **describe(samples_ms).model_dump(),
        **extra,
    )


def bootstrap_medians(samples: Sequence[float], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Median of each of ``resamples`` resamples (with replacement) of ``samples``.

    Resamples are drawn a chunk of rows at a time, so that no more than
    ``MAX_RESAMPLED_VALUES`` drawn values exist at once; the random stream is the same as one
    draw of every row, so the replicates do not depend on the chunking. With more samples than
    that, not even one resample fits: each replicate's median is then drawn from its exact
    distribution (``_order_statistic_medians``) instead.
    """
    a = np.asarray(samples, dtype=float)
    n = a.size
    if n > MAX_RESAMPLED_VALUES:
        return _order_statistic_medians(np.sort(a), rng, resamples)
    rows = max(1, MAX_RESAMPLED_VALUES // n)
    medians = np.empty(resamples)
    for first in range(0, resamples, rows):
        last = min(resamples, first + rows)
        picks = rng.integers(0, n, size=(last - first, n))
        medians[first:last] = np.median(a[picks], axis=1)
    return medians


def _order_statistic_medians(ordered: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Bootstrap medians of ``ordered`` (sorted) without drawing whole resamples.

    A resample is n draws ``ordered[floor(n * U)]`` with U uniform, so its k-th smallest value is
    ``ordered[floor(n * U_(k))]`` where U_(k), the k-th smallest of n uniforms, is Beta(k, n-k+1).
    For an even n the median also needs U_(k+1) = U_(k) + (1 - U_(k)) * Beta(1, n-k): the
    smallest of the n-k uniforms known to lie above U_(k).
    """
    n = ordered.size
    k = (n + 1) // 2
    lower = rng.beta(k, n - k + 1, size=resamples)

    def value(u: np.ndarray) -> np.ndarray:
        return ordered[np.minimum((u * n).astype(np.int64), n - 1)]

    if n % 2:
        return value(lower)
    upper = lower + (1 - lower) * rng.beta(1, n - k, size=resamples)
    return (value(lower) + value(upper)) / 2


def speedup_replicates(
    eager: Sequence[float], compiled: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> np.ndarray:
    """Bootstrap replicates of median(eager) / median(compiled), both sides resampled."""
    rng = np.random.default_rng(seed)
    return bootstrap_medians(eager, rng, resamples) / bootstrap_medians(compiled, rng, resamples)


def speedup_ci(
    eager: Sequence[float], compiled: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the ratio of medians."""
    return percentile_interval(speedup_replicates(eager, compiled, resamples, seed))


def median_ci(
    values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``values``."""
    return percentile_interval(bootstrap_medians(values, np.random.default_rng(seed), resamples))


# Lists this short are worked out in plain Python: numpy's cost per call is most of the work on a few values
# (one experiment's runs, compared for each of a sweep's experiments; a series of a few nightly reports).
SHORT: Final = 16


def geomean(values: Sequence[float]) -> float:
    """Geometric mean; slowdowns (< 1) count as they are. Up to ``SHORT`` values in plain Python."""
    if len(values) == 1 and values[0] > 0:  # one run a side, the gate's common case: what the sum below gives
        return math.exp(math.log(values[0]))
    if 0 < len(values) <= SHORT and min(values) > 0:  # numpy keeps its -inf and nan for the rest
        return math.exp(math.fsum(map(math.log, values)) / len(values))
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def geomean_ci(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """95% interval of the geometric-mean speedup over several (eager, compiled) sample pairs.

    Each replicate resamples every pair's two sides, takes each pair's ratio of medians, and
    the geometric mean of those ratios.
    """
    logs = np.stack([np.log(speedup_replicates(e, c, resamples, seed + i)) for i, (e, c) in enumerate(pairs)])
    return percentile_interval(np.exp(logs.mean(axis=0)))


def percentile_interval(replicates: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of bootstrap ``replicates``: their (1 - confidence) / 2 and
    (1 + confidence) / 2 quantiles (``np.percentile``, linear), 2.5% and 97.5% by default."""
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


# ------------------------------------------------------------------ between runs: Student's and Welch's t on logs


@dataclass(frozen=True)
class WelchTest:
    """Welch's t-test of two sets of per-run values on the log scale (``welch_log``)."""

    ratio: float  # new's geometric mean / base's
    p: float  # two-sided
    df: float  # Welch-Satterthwaite degrees of freedom (inf when both spreads are zero)
    detectable: float  # the smallest ratio (> 1) the test flags at alpha given these spreads: exp(t_crit * se)


def welch_log(base: Sequence[float], new: Sequence[float], alpha: float = 0.05) -> WelchTest:
    """Welch's unequal-variance t-test on log values: does new's geometric mean differ from base's?

    Method: ``scipy.stats.ttest_ind(log new, log base, equal_var=False)``: d = mean(x_new) - mean(x_base),
    se = sqrt(s_b^2/n_b + s_n^2/n_n) with sample variances (ddof 1), df by Welch-Satterthwaite,
    p = 2 P(T_df > |d|/se). On the log scale a ratio is what is tested (10% slower and 10% faster are the
    same distance) and run-to-run noise, which is multiplicative, is about symmetric. With 3 runs a side
    the smallest p is not bounded away from 0 as a rank test's is (Mann-Whitney U: 0.1). Both spreads
    zero (scipy gives no statistic): p is 0 when the means differ, else 1. Needs at least 2 values a side.
    """
    from scipy.stats import t as student_t
    from scipy.stats import ttest_ind

    xb, xn = np.log(np.asarray(base, dtype=float)), np.log(np.asarray(new, dtype=float))
    d = float(xn.mean() - xb.mean())
    se = math.sqrt(float(xb.var(ddof=1)) / len(xb) + float(xn.var(ddof=1)) / len(xn))
    if se == 0:
        return WelchTest(math.exp(d), 0.0 if d else 1.0, math.inf, 1.0)
    test = ttest_ind(xn, xb, equal_var=False)
    df = float(test.df)
    detectable = math.exp(float(student_t.ppf(1 - alpha / 2, df)) * se)
    return WelchTest(math.exp(d), float(test.pvalue), df, detectable)


def log_mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of the geometric mean of ``values`` (each > 0): Student's t on their logs,
    ``scipy.stats.ttest_1samp(log values, 0).confidence_interval(confidence)`` = mean +- t(k-1) s / sqrt(k),
    exponentiated. Exact for log-normal run-to-run noise at any k >= 2 (with k = 2, t(0.975, 1) = 12.71:
    as wide as two runs honestly allow); both ends equal when every value is."""
    from scipy.stats import ttest_1samp

    logs = np.log(np.asarray(values, dtype=float))
    if float(logs.std()) == 0.0:  # scipy's statistic is undefined; the interval has no width
        mean = float(logs.mean())
        return math.exp(mean), math.exp(mean)
    low, high = ttest_1samp(logs, 0.0).confidence_interval(confidence)
    return math.exp(float(low)), math.exp(float(high))


# ------------------------------------------------------------------ many experiments at once: FDR, empirical null


def fdr_adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values, in the order given: ``scipy.stats.false_discovery_control(ps,
    method="bh")``, p_(i) * m / i made monotone from the largest down and capped at 1. Flagging the
    experiments whose adjusted p is below q keeps the expected share of false discoveries among those
    flagged at or below q (independent or positively dependent tests). An empty list gives an empty list."""
    from scipy.stats import false_discovery_control

    if not p_values:
        return []
    return [float(p) for p in np.atleast_1d(false_discovery_control(np.asarray(p_values, dtype=float), method="bh"))]


HEAVY_TAIL_Z = 3.0  # a value this many spreads from the centre is far out: a normal null expects 0.27% there
HEAVY_TAIL_SHARE = 0.08  # more than this share that far out says the noise is not normal, whatever the
# shoulders say (10 of 120 where a normal expects 0.3: more than a handful of real changes)
SHOULDERS = (2.0, 5.0)  # spreads from the centre: the band a heavy tail fills and real changes mostly pass over
SHOULDER_ALPHA = 0.01  # more values in the shoulders than a normal's share, at this binomial level: heavy
# Both chosen on simulated sweeps of 120 (python benchmarks/gate_fdr.py --simulate): a handful of real changes
# and natural outliers far out (6+ spreads) leave the shoulders as a normal's and keep the normal null's power;
# noise with tails like Student's t of 1.5-5 degrees of freedom fills them.
TAIL_QUANTILE = 0.90  # the tail quantile of |value - centre| whose ratio to the median gives a Student-t's df


@dataclass(frozen=True)
class EmpiricalNull:
    """The distribution most of many changes come from (Efron's empirical null), estimated robustly from the
    changes themselves (``empirical_null``): normal, or Student's t where the changes' tails are heavy."""

    centre: float  # the median of the values
    spread: float  # 1.4826 * MAD: the SD of a normal sample with that MAD
    n: int  # values it was estimated from
    df: float = math.inf  # Student's t degrees of freedom of its shape; inf: normal
    scale: float = 0.0  # the t's scale (MAD / t_0.75(df)); the spread when normal

    def p(self, values: Sequence[float]) -> list[float]:
        """Two-sided p of each value under this null (``normal_p``, or Student's t of ``df``)."""
        if math.isinf(self.df):
            return normal_p(values, self.centre, self.spread)
        from scipy.stats import t as student_t

        a = np.abs(np.asarray(values, dtype=float) - self.centre)
        return [float(p) for p in 2 * student_t.sf(a / self.scale, self.df)]


def empirical_null(values: Sequence[float]) -> EmpiricalNull:
    """Centre, spread and shape of the bulk of ``values``.

    1. Centre: the median; spread: the median absolute deviation from it scaled to a normal SD
       (``scipy.stats.median_abs_deviation(scale="normal")``, 1.4826 MAD). Neither moves much when a minority
       of the values are shifted (real changes), as a mean and SD would.
    2. Shape: normal, unless the tails are heavy (noise from a machine that other jobs starve in bursts: a
       normal null would call each burst a discovery) by either of two signs (``heavy_tailed``): more values
       in the shoulders, 2-5 spreads out (``SHOULDERS``), than a normal puts there (binomial test at
       ``SHOULDER_ALPHA``; ``scipy.stats.binom``), or more than ``HEAVY_TAIL_SHARE`` of them beyond
       ``HEAVY_TAIL_Z`` spreads. A few real changes and natural outliers far out pass over the shoulders, so
       they keep a normal null (and its power) when the rest is normal. Then Student's t whose ratio of its
       ``TAIL_QUANTILE`` quantile of |x - centre| to its median matches the values' own
       (``scipy.stats.t.ppf``, solved for df by ``scipy.optimize.brentq``), with the scale that gives the
       same MAD."""
    from scipy.stats import median_abs_deviation

    a = np.asarray(values, dtype=float)
    centre, spread = float(np.median(a)), float(median_abs_deviation(a, scale="normal"))
    null = EmpiricalNull(centre, spread, int(a.size), scale=spread)
    if spread == 0 or not heavy_tailed(np.abs(a - centre) / spread):
        return null
    df = _tail_df(np.abs(a - centre))
    if math.isinf(df):
        return null
    from scipy.stats import t as student_t

    scale = float(np.median(np.abs(a - centre))) / float(student_t.ppf(0.75, df))
    return EmpiricalNull(centre, spread, int(a.size), df, scale)


def heavy_tailed(z: np.ndarray) -> bool:
    """Whether distances from the centre, in spreads, come from tails heavier than a normal's: more of them
    in the shoulders (``SHOULDERS``, counted among those not beyond them) than a normal's share at binomial
    level ``SHOULDER_ALPHA``, or more than ``HEAVY_TAIL_SHARE`` of all of them beyond ``HEAVY_TAIL_Z``."""
    from scipy.stats import binom, norm

    low, high = SHOULDERS
    inside = z <= high
    shoulder, count = int(np.sum((z > low) & inside)), int(np.sum(inside))
    normal_share = float(2 * (norm.sf(low) - norm.sf(high)) / (1 - 2 * norm.sf(high)))
    crowded = count > 0 and float(binom.sf(shoulder - 1, count, normal_share)) < SHOULDER_ALPHA
    return crowded or float(np.mean(z > HEAVY_TAIL_Z)) > HEAVY_TAIL_SHARE


def _tail_df(deviations: np.ndarray) -> float:
    """Student's t degrees of freedom whose q/median ratio of |t| (q = ``TAIL_QUANTILE``) is the deviations'
    own; inf when theirs is no heavier than a normal's (2.44 at q = 0.9), 1 (Cauchy) at the heaviest."""
    from scipy.optimize import brentq
    from scipy.stats import norm
    from scipy.stats import t as student_t

    level = 0.5 + TAIL_QUANTILE / 2
    ratio = float(np.quantile(deviations, TAIL_QUANTILE) / np.median(deviations))
    if ratio <= float(norm.ppf(level) / norm.ppf(0.75)):
        return math.inf

    def gap(df: float) -> float:
        return float(student_t.ppf(level, df) / student_t.ppf(0.75, df)) - ratio

    return 1.0 if gap(1.0) <= 0 else float(brentq(gap, 1.0, 1e6))


def normal_p(values: Sequence[float], centre: float, spread: float) -> list[float]:
    """Two-sided p of each value under a normal of that centre and spread: 2 P(Z > |x - centre| / spread)
    (``scipy.stats.norm.sf``). A spread of 0 gives p 1 at the centre and 0 elsewhere."""
    from scipy.stats import norm

    a = np.asarray(values, dtype=float) - centre
    if spread == 0:
        return [1.0 if x == 0 else 0.0 for x in a]
    return [float(p) for p in 2 * norm.sf(np.abs(a) / spread)]


def normal_spread_about_zero(values: Sequence[float]) -> float:
    """The robust SD of ``values`` about 0 rather than about their median: median |x| / Phi^-1(3/4), that is
    1.4826 median |x| (``scipy.stats.norm.ppf``). For changes between two runs of the same code, a drift of
    the whole run is part of the noise a later comparison will meet, so it is kept in."""
    from scipy.stats import norm

    return float(np.median(np.abs(np.asarray(values, dtype=float))) / norm.ppf(0.75))


@dataclass(frozen=True)
class ShiftTest:
    """Whether many changes share one shift (``median_shift``)."""

    median: float  # the median of the values
    p: float  # two-sided, Wilcoxon's signed-rank test of symmetry about 0
    n: int


def median_shift(values: Sequence[float]) -> ShiftTest:
    """Are the values centred away from 0? Wilcoxon's signed-rank test (``scipy.stats.wilcoxon``,
    two-sided; zero values dropped, ``zero_method="wilcox"``): the ranks of |x| summed over the positive
    values, against their distribution when each sign is a coin toss. A few large changes move it little
    (they are a few ranks); a small shift of every value moves it a lot. All values 0: p 1."""
    from scipy.stats import wilcoxon

    a = np.asarray(values, dtype=float)
    median = float(np.median(a))
    if not np.any(a):
        return ShiftTest(median, 1.0, int(a.size))
    return ShiftTest(median, float(wilcoxon(a).pvalue), int(a.size))
