"""Change points of one series: where a sequence of positive values (times, ratios) changes level, each
change kept only if Student's t-test between the segments either side finds it significant and it is at
least a given size (``change_points``), and the smallest step a series could show (``detectable``).

The method is Apache Otava's (Hunter's successor; Fleming et al. 2023), borrowed rather than imported:
the ``apache-otava`` wheel pins numpy exactly and pulls cloud clients. Pure numpy and scipy, with ruptures'
binary segmentation for the candidates, redone in prefix sums (``binary_segmentation``): it knows nothing of
reports, so that ``history`` and ``benchmarks/history.py`` (which tunes the constants below) use the same
detector. Imports nothing of ``orchestrator``.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

# SHORT: series this short are worked out in Python: history over 3 reports of 100,000 results is 286,000 series
# of 3 points, and numpy's calls on each cost more than the rest of history
from tasks.stats import SHORT

# Change detection, tuned with benchmarks/history.py on its generator seed 1 (TUNE_SEED there) and reported there
# on the held-out seed 2 as well. Tuning cells: 6 and 8 points at 1% and 2.5% noise (CV), 12, 30 and 60 points at
# 2.5%; lognormal noise, 2% of points outliers of 10-50%; 150 series of each step kind (5% anywhere, 5% and ten
# noise deviations 3 points before the end) and 600-1,000 flat series per cell, each setting moved alone.
# "Points" below are percentage points of steps caught; false alarms are per 100 flat series.
#
# Significance level of a change, after the search's correction (``search_p``). The tightest cell is 6 points at
# 2.5%, where one outlier among 6 points weighs most: its false alarms were 1.0 at 0.004 and 1.3 at 0.006 (the
# goal is at most 1); 0.003 leaves room for the held-out seed. A higher level buys the 5% step on 6-8 points at
# 1% noise (51% caught at 0.004, 63% at 0.006) but no level lets it meet 90% there: 5 noise deviations on 3
# points a side are beyond any test that keeps to the false-alarm goal (``detectable`` says so per series).
ALPHA: Final = 0.003
# Fewest points (reports) either side of a change: a change is flagged once 3 reports show it, the goal's "within
# 3 reports"; fewer would let two bad nights in a row stand for a change.
MIN_SEGMENT: Final = 3
# Candidates must gain more than PENALTY ln(n) noise variances: 2 ln n is Schwarz's criterion (BIC) for a
# change, which adds two parameters (where, and the new level). The t-test decides: 1 and 3 caught within 2
# points of 2 in every cell, and 1 alarmed more on 60 points (1.8 against 1.0 at level 0.01).
PENALTY: Final = 2.0
# Outliers are first pulled towards the median of the CLIP_WINDOW points around them (``clean``) ...
CLIP_WINDOW: Final = 5
# ... to CLIP_SIGMAS noise deviations from it. Without this cleaning the ten-deviation step on 8 points at 1% was
# caught in 85% of series against 91%, and 60 flat points at 2.5% alarmed 1.6 per 100 against 0.8. 2.5 alarmed
# more on 8 points at 2.5% (2.0 against 1.7 at level 0.01), 4 caught up to 3 points fewer.
CLIP_SIGMAS: Final = 3.0
# ... then, in each test, pulled to SEGMENT_SIGMAS noise deviations from their own side's median (``pull_in``):
# with it the ten-deviation step on 6 and 8 points at 1% was caught in 91% of series, without it in 87-89%.
# 3 alarmed 1.4 per 100 on 6 points at 2.5%; without the floor of ``pull_in``, 1.3-1.6.
SEGMENT_SIGMAS: Final = 4.0
# The power at which ``detectable`` states the smallest step: 90%, the detection goal of benchmarks/history.py.
POWER: Final = 0.9
MAD_TO_SIGMA: Final = 1.4826  # the median absolute deviation of normal noise is 0.6745 sigma


@dataclass(frozen=True)
class Split:
    """A significant change: ``index`` is the first point after it; ``p`` the t-test's p-value, corrected for
    the search over where the change is (``search_p``); ``magnitude`` the segment medians' ratio less 1."""

    index: int
    p: float
    magnitude: float


def change_points(
    values: Sequence[float],
    alpha: float = ALPHA,
    min_change: float = 0.0,
    min_segment: int = MIN_SEGMENT,
    penalty: float = PENALTY,
) -> list[Split]:
    """Where ``values`` (positive, in order) change level: candidates by binary segmentation, each kept only if a
    t-test between its neighbours finds it significant and it changes the level by ``min_change`` or more.

    Method, on the logarithms (noise and changes are relative), after Apache Otava's ``compute_change_points``:
    1. Cleaning: outliers pulled towards the running median (``clean``), so that one bad night neither
       makes a change nor hides one by inflating a segment's variance.
    2. Candidates: binary segmentation (``binary_segmentation``) with the least-squares cost, on the cleaned series
       in units of its noise deviation (``noise_sigma``), splitting while a split gains more than
       ``penalty * ln(n)`` and leaves ``min_segment`` points or more either side.
    3. Each candidate is tested on the segment between its neighbouring candidates: Student's two-sample
       t-test of the cleaned values before it against those after it (``scipy.stats.ttest_ind``, equal
       variances, two-sided), its p-value multiplied by the number of places the split could have been in
       that segment (``search_p``: the candidate is the best of them, and Bonferroni's bound keeps a flat
       segment's chance of a false change at ``alpha`` or below, whatever its length). Deterministic: the
       same values give the same changes.
    4. Magnitude: the change is the ratio of the medians of the raw values either side, less 1; one
       smaller than ``min_change`` (relative) is not kept, however significant.
    5. Merge (Hunter's, as Otava does): while a candidate fails step 3 or 4, the one with the largest p
       (ties: the smallest change) is dropped and its two neighbours are tested again on their wider
       segments. So a temporary regression that is fixed later shows as two changes, down and back up.
    A series shorter than ``2 * min_segment`` has no change; ``detectable`` says how large a change must be
    for a series of its length and noise to show it.
    """
    y = _positive(values)
    n = len(y)
    if n < 2 * min_segment:  # too short for any change: most series of a big sweep's few reports
        return []
    x = np.log(y)
    cleaned = clean(x)
    if np.ptp(cleaned) == 0:
        return []
    scale = noise_sigma(cleaned) or float(np.std(cleaned))
    candidates = binary_segmentation(cleaned / scale, min_segment, penalty * math.log(n))
    places = n - 2 * min_segment + 1  # where a change could be: the correction of every candidate's test

    def test(i: int) -> tuple[float, float]:
        lo = candidates[i - 1] if i > 0 else 0
        hi = candidates[i + 1] if i + 1 < len(candidates) else n
        k = candidates[i]
        p = search_p(*pull_in(cleaned[lo:k], cleaned[k:hi], scale), places)
        return p, float(np.median(y[k:hi]) / np.median(y[lo:k]) - 1)

    tests = [test(i) for i in range(len(candidates))]
    while candidates:
        failing = [i for i, (p, change) in enumerate(tests) if p > alpha or abs(change) < min_change]
        if not failing:
            break
        weakest = max(failing, key=lambda i: (tests[i][0], -abs(tests[i][1])))
        del candidates[weakest], tests[weakest]
        for i in (weakest - 1, weakest):  # its neighbours, now either side of a wider segment
            if 0 <= i < len(candidates):
                tests[i] = test(i)
    return [Split(index, p, change) for index, (p, change) in zip(candidates, tests, strict=True)]


def binary_segmentation(signal: np.ndarray, min_size: int, pen: float) -> list[int]:
    """The change points binary segmentation finds in ``signal`` with the least-squares cost, each leaving
    ``min_size`` points or more either side, while the best split of any segment gains more than ``pen``;
    sorted, without the end.

    ruptures' ``Binseg(model="l2", min_size=min_size, jump=1).fit(signal).predict(pen=pen)[:-1]``, step for
    step (the split of a segment: the largest gain, ties to the later split; the segment split next: the
    largest gain, ties to the earlier segment), with each segment's cost sum((x - mean)^2) from prefix sums
    of the centred signal instead of one numpy call per candidate: one vectorised pass per segment, a
    hundredth of the time on a year of nightly points, the same splits (``tests/test_history.py``).
    """
    x = np.asarray(signal, dtype=float)
    x = x - x.mean()  # centred: the prefix sums of squares lose no precision to a large level
    n = len(x)
    s1 = np.concatenate([[0.0], np.cumsum(x)])
    s2 = np.concatenate([[0.0], np.cumsum(x * x)])

    def cost(start: np.ndarray | int, end: np.ndarray | int) -> np.ndarray:
        length = np.asarray(end) - np.asarray(start)
        return np.asarray((s2[end] - s2[start]) - (s1[end] - s1[start]) ** 2 / length)

    best: dict[tuple[int, int], tuple[int | None, float]] = {}

    def split(start: int, end: int) -> tuple[int | None, float]:
        if (start, end) not in best:
            ks = np.arange(start + min_size, end - min_size + 1)
            if len(ks) == 0:
                best[start, end] = None, 0.0
            else:
                gains = cost(start, end) - cost(start, ks) - cost(ks, end)
                top = len(ks) - 1 - int(np.argmax(gains[::-1]))  # the largest gain, the later split on a tie
                best[start, end] = int(ks[top]), float(gains[top])
        return best[start, end]

    bkps = [n]
    while True:
        segments = [split(start, end) for start, end in zip([0, *bkps[:-1]], bkps, strict=True)]
        bkp, gain = max(segments, key=lambda found: found[1])  # the first of the largest
        if bkp is None or not gain > pen:
            break
        bkps = sorted([*bkps, bkp])
    return bkps[:-1]


def search_p(before: np.ndarray, after: np.ndarray, places: int = 1) -> float:
    """Student's t-test p-value (two-sided, equal variances) of ``before`` against ``after``, times the number
    of ``places`` the change was searched for in (Bonferroni), at most 1.

    ``change_points`` passes every place of the whole series that leaves ``min_segment`` points either side:
    the candidate is the best of them, and the candidates of binary segmentation are searched for in the
    whole series, not only in the segment each is tested on. The bound is conservative for long series
    (neighbouring splits' statistics are correlated) and exact for the shortest (one place).
    """
    from scipy.stats import ttest_ind

    if np.ptp(before) == 0 and np.ptp(after) == 0:
        return 0.0 if before[0] != after[0] else 1.0  # no noise at all: the levels differ or they do not
    with warnings.catch_warnings():  # nearly equal values: scipy warns of precision, and p is still right
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(ttest_ind(before, after, equal_var=True).pvalue)
    return min(1.0, p * places)


def detectable(
    values: Sequence[float],
    alpha: float = ALPHA,
    min_change: float = 0.0,
    min_segment: int = MIN_SEGMENT,
    power: float = POWER,
) -> float | None:
    """The smallest relative step ``change_points`` would flag with probability ``power`` in a series of this
    length and noise, had it happened ``min_segment`` points before the end: the latest change it can see,
    and the hardest to see (a split in the middle is seen at a smaller step). None below ``2 * min_segment``
    points: no change can be tested there at all.

    From the t-test's power: with the series' robust noise deviation s (``noise_sigma`` of the cleaned
    logarithms, which neither a step nor an outlier moves), a step delta (in logarithms) with n - m points
    before it and m = ``min_segment`` after has a t statistic noncentral by delta / (s sqrt(1 / (n - m) +
    1 / m)), with n - 2 degrees of freedom. The step is the delta whose noncentral t exceeds the critical
    value with probability ``power`` (``scipy.stats.nct``; the opposite tail is negligible), the critical
    value being two-sided at ``alpha`` divided by the n - 2m + 1 places searched (``search_p``). Returned
    as exp(delta) - 1, never below ``min_change`` (which is all that bounds it when the values have no noise).
    """
    y = _positive(values)
    n = len(y)
    if n < 2 * min_segment:
        return None
    sigma = noise_sigma(clean(np.log(y)))
    delta = _noncentrality(n, alpha, min_segment, power) * sigma * math.sqrt(1 / (n - min_segment) + 1 / min_segment)
    return max(math.expm1(delta), min_change)


@functools.cache
def _noncentrality(n: int, alpha: float, min_segment: int, power: float) -> float:
    """The noncentrality at which the t-test of ``detectable`` is passed with probability ``power``: it depends
    on the series' length alone, so that the thousands of series of a history, of a few lengths, solve for it
    a few times, not once each."""
    from scipy.optimize import brentq
    from scipy.stats import nct
    from scipy.stats import t as student

    df = n - 2
    critical = float(student.ppf(1 - alpha / (n - 2 * min_segment + 1) / 2, df))

    def shortfall(shift: float) -> float:  # the power at this noncentrality less ``power`` (the far tail is nil)
        return float(nct.sf(critical, df, shift)) - power

    return float(brentq(shortfall, 0.0, 3 * critical + 10))  # the power there is over 0.97 for 4 or more df


def relative_noise(values: Sequence[float]) -> float | None:
    """The robust noise deviation of ``values`` (positive), relative: exp(s) - 1 for s the ``noise_sigma`` of
    their cleaned logarithms (``clean``). None below 3 values, whose one difference a step could be."""
    y = _positive(values)
    if len(y) < 3:
        return None
    if len(y) < CLIP_WINDOW:  # nothing to clean: the logarithms in Python, as noise_sigma works out a short series
        return math.expm1(noise_sigma(np.array([math.log(v) for v in values])))
    return math.expm1(noise_sigma(clean(np.log(y))))


def relative_noises(series: Sequence[Sequence[float]]) -> list[float | None]:
    """``relative_noise`` of each of many series, the same figures to the last bit. Those shorter than
    ``CLIP_WINDOW`` (nothing to clean: every series of a big sweep's few reports, hundreds of thousands of them)
    are worked out together, an array per length: the logarithms taken one by one as ``relative_noise`` takes
    them, then the successive differences and both medians along the rows (a median of two values is their
    mean, as ``statistics.median`` takes it). Longer series one by one. Raises ``ValueError`` as
    ``relative_noise`` does for a value that is not finite and positive."""
    out: list[float | None] = [None] * len(series)
    by_length: dict[int, list[int]] = {}
    for i, values in enumerate(series):
        if len(values) >= CLIP_WINDOW:
            out[i] = relative_noise(values)
        else:
            by_length.setdefault(len(values), []).append(i)
    for n, members in by_length.items():
        flat = [v for i in members for v in series[i]]
        if not all(0 < v < math.inf for v in flat):  # NaN fails both comparisons
            raise ValueError("change_points needs finite positive values (times, ratios)")
        if n < 3:
            continue
        steps = np.diff(np.array([math.log(v) for v in flat]).reshape(len(members), n), axis=1)
        middle = np.median(steps, axis=1, keepdims=True)
        sigmas = MAD_TO_SIGMA * np.median(np.abs(steps - middle), axis=1) / math.sqrt(2)
        for i, sigma in zip(members, sigmas.tolist(), strict=True):
            out[i] = math.expm1(sigma)
    return out


def pull_in(before: np.ndarray, after: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """``before`` and ``after`` with outliers pulled to ``SEGMENT_SIGMAS`` noise deviations from their own
    side's median: the second cleaning, against the two levels the t-test compares rather than a running
    median (which a step 3 points from the end pulls along with it).

    The deviation is 1.4826 times the median absolute residual of both sides from their medians, and never
    below ``floor`` (the whole series' ``noise_sigma``): a side of 3 points has its median as one of them, a
    residual of 0, and alone would make the deviation too small and the test liberal.
    """
    mid_before, mid_after = float(np.median(before)), float(np.median(after))
    residuals = np.concatenate([before - mid_before, after - mid_after])
    reach = SEGMENT_SIGMAS * max(MAD_TO_SIGMA * float(np.median(np.abs(residuals))), floor)
    if reach == 0:
        return before, after
    return mid_before + np.clip(before - mid_before, -reach, reach), mid_after + np.clip(
        after - mid_after, -reach, reach
    )


def noise_sigma(x: np.ndarray) -> float:
    """The noise's standard deviation from successive differences: 1.4826 MAD of the differences over
    sqrt 2. A change of level moves one difference and an outlier two, which the median ignores."""
    if len(x) < 2:
        return 0.0
    if len(x) <= SHORT:  # the same arithmetic in Python: numpy's cost per call is most of a short series' work
        diffs = [b - a for a, b in itertools.pairwise(float(v) for v in x)]
        middle = statistics.median(diffs)
        return MAD_TO_SIGMA * statistics.median([abs(d - middle) for d in diffs]) / math.sqrt(2)
    steps = np.diff(x)
    return MAD_TO_SIGMA * float(np.median(np.abs(steps - np.median(steps)))) / math.sqrt(2)


def clean(x: np.ndarray) -> np.ndarray:
    """``x`` with outliers pulled to ``CLIP_SIGMAS`` noise deviations (``noise_sigma``) from the median of the
    ``CLIP_WINDOW`` points around them.

    A running median follows a change of level within half its window, so the points either side of a
    change stay where they are, wherever the change is.
    """
    from scipy.ndimage import median_filter

    if len(x) < CLIP_WINDOW:
        return x
    reach = CLIP_SIGMAS * float(noise_sigma(x))
    around = median_filter(x, size=CLIP_WINDOW, mode="mirror")  # an end point is not its own neighbour
    cleaned: np.ndarray = around + np.clip(x - around, -reach, reach)
    return cleaned


def _positive(values: Sequence[float]) -> np.ndarray:
    if len(values) <= SHORT:  # checked in Python: numpy's calls cost most of a short series' check
        if not all(0 < v < math.inf for v in values):  # NaN fails both comparisons
            raise ValueError("change_points needs finite positive values (times, ratios)")
        return np.asarray(values, dtype=float)
    y = np.asarray(values, dtype=float)
    if np.any(~np.isfinite(y) | (y <= 0)):
        raise ValueError("change_points needs finite positive values (times, ratios)")
    return y
