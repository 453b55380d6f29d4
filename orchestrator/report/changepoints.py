"""Change points of one series: where a sequence of positive values (times, ratios) changes level, each
change kept only if a permutation test finds it significant (``change_points``).

Pure numpy and scipy, with ruptures' binary segmentation for the candidates: it knows nothing of
reports, so that ``history`` and ``benchmarks/history.py`` (which tunes the constants below) use the
same detector. Imports nothing of ``orchestrator``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

# Change detection, tuned with benchmarks/history.py: series of 30 points, lognormal noise of 1-2.5% CV, 2% of
# points outliers of 10-50%, a 5% step; 300 step and 1,000 flat series per noise level and setting, each
# setting moved alone from the chosen ones. "Points" are percentage points of steps caught.
#
# Significance level of each change. Cleaning the observed order before permuting makes the test slightly
# liberal: on 10,000 flat series at 2% CV, 0.52 false alarms per 100 at 0.003 and 0.83 at 0.005, too close to
# the goal of at most 1; 0.005 caught 0-2 points more, 0.002 3-5 fewer at the same false alarms.
ALPHA: Final = 0.003
# Fewest points (reports) either side of a change: a change is flagged once 3 reports show it. 2 and 4 caught
# within 1.5 points of 3; 2 lets two bad nights in a row stand for a change, 4 flags every change a report later.
MIN_SEGMENT: Final = 3
# Random orders per test: p resolves to 0.0005, a sixth of ALPHA; 999 and 4999 caught within a point of 1999.
# A test of 30 points takes about 2 ms.
PERMUTATIONS: Final = 1999
# Candidates must gain more than PENALTY ln(n) noise variances: 2 ln n is Schwarz's criterion (BIC) for a
# change, which adds two parameters (where, and the new level). The test decides: 1 and 3 caught the same.
PENALTY: Final = 2.0
# Outliers are pulled towards the median of the CLIP_WINDOW points around them: 3 let pairs of outliers through
# (1.5 false alarms per 100); 7 did as well as 5.
CLIP_WINDOW: Final = 5
# ... to CLIP_SIGMAS noise deviations from it: 2.5 caught 0-3 points more than 3, and 4 lost 1-3; 2 caught 1-5
# more than 2.5 but alarmed more (it trims the noise itself, not only outliers).
CLIP_SIGMAS: Final = 2.5
MAD_TO_SIGMA: Final = 1.4826  # the median absolute deviation of normal noise is 0.6745 sigma
SEED: Final = 0  # the permutations' seed: the same reports give the same changes on every run


@dataclass(frozen=True)
class Split:
    """A significant change: ``index`` is the first point after it; ``p`` the permutation test's p-value."""

    index: int
    p: float


def change_points(
    values: Sequence[float],
    alpha: float = ALPHA,
    min_segment: int = MIN_SEGMENT,
    permutations: int = PERMUTATIONS,
    penalty: float = PENALTY,
) -> list[Split]:
    """Where ``values`` (positive, in order) change level: candidates from ruptures, each kept only if a
    permutation test between its neighbours finds it significant.

    Method, on the logarithms (noise and changes are relative):
    1. Candidates: ruptures' binary segmentation with the least-squares (``l2``) cost, on the series
       with its outliers pulled in (``clean``) and in units of its noise deviation (``noise_sigma``),
       splitting while a split gains more than ``penalty * ln(n)`` and leaves ``min_segment`` points or
       more either side.
    2. Each candidate is tested on the segment between its neighbouring candidates (``permutation_p``):
       the fall of the ``l2`` cost at the candidate (the two-sample t statistic between its sides) on the
       cleaned segment, against the best split's of ``permutations`` random orders of the cleaned values,
       each searched for its own best split, so that the search is inside the null distribution (E-
       Divisive's test, Matteson & James 2014, with this cost in place of energy distance).
    3. Merge (Hunter's, Fleming et al. 2023): while a candidate has p > ``alpha``, the one with the
       largest p is dropped and its two neighbours are tested again on their wider segments.
    A series shorter than ``2 * min_segment`` has no change, and no order of a short series can reach a
    small p: ``shortest_testable`` says how many points a change needs.
    """
    import ruptures as rpt  # scipy-heavy: imported only when there is a series to test

    y = np.asarray(values, dtype=float)
    if np.any(~np.isfinite(y) | (y <= 0)):
        raise ValueError("change_points needs finite positive values (times, ratios)")
    n = len(y)
    x = np.log(y)
    cleaned = clean(x)
    if n < 2 * min_segment or np.ptp(cleaned) == 0:
        return []
    scale = noise_sigma(cleaned) or float(np.std(cleaned))
    algo = rpt.Binseg(model="l2", min_size=min_segment, jump=1).fit(cleaned / scale)
    candidates: list[int] = algo.predict(pen=penalty * math.log(n))[:-1]  # ruptures ends the list with n

    def test(i: int) -> float:
        lo = candidates[i - 1] if i > 0 else 0
        hi = candidates[i + 1] if i + 1 < len(candidates) else n
        return permutation_p(x[lo:hi], candidates[i] - lo, min_segment, permutations)

    ps = [test(i) for i in range(len(candidates))]
    while candidates and max(ps) > alpha:
        weakest = ps.index(max(ps))
        del candidates[weakest], ps[weakest]
        for i in (weakest - 1, weakest):  # its neighbours, now either side of a wider segment
            if 0 <= i < len(candidates):
                ps[i] = test(i)
    return [Split(index, p) for index, p in zip(candidates, ps, strict=True)]


def shortest_testable(alpha: float = ALPHA, permutations: int = PERMUTATIONS) -> int:
    """The fewest points in which a change can reach p <= ``alpha`` at all.

    A permutation test cannot find an order more extreme than the most extreme of all: with m points
    split k and m - k, that order and its mirror image are 2 of the C(m, k) orders, so p is at least
    about 2 / C(m, m // 2) + 1 / (1 + permutations), however large the change.
    """
    m = 2
    while 2 / math.comb(m, m // 2) + 1 / (1 + permutations) > alpha:
        m += 1
    return m


def noise_sigma(x: np.ndarray) -> float:
    """The noise's standard deviation from successive differences: 1.4826 MAD of the differences over
    sqrt 2. A change of level moves one difference and an outlier two, which the median ignores."""
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


def permutation_p(segment: np.ndarray, split: int, min_segment: int, permutations: int) -> float:
    """How often a random order of ``segment`` (log values, cleaned by ``clean`` first) has a split that
    gains at least as much as the segment's split before point ``split``, counting the observed order
    itself: (1 + beaten) / (1 + permutations). The observed gain is at a given split and each order's is
    its best, which makes the test conservative; cleaning the observed order first, which makes the cleaned
    values slightly less exchangeable than the raw ones, makes it slightly liberal (``ALPHA``)."""
    cleaned = clean(segment)
    gain = split_gains(cleaned[None, :], min_segment)[0, split - min_segment]
    null = best_gains(cleaned, min_segment, permutations)
    beaten = int(np.count_nonzero(null >= gain * (1 - 1e-9)))  # ties with the observed gain count against it
    return (1 + beaten) / (1 + permutations)


def best_gains(segment: np.ndarray, min_segment: int, permutations: int) -> np.ndarray:
    """The best split's gain (``split_gains``) of each of ``permutations`` random orders of ``segment``,
    drawn with the fixed seed ``SEED``, in chunks of about 16 MB."""
    rng = np.random.default_rng(SEED)
    best = np.empty(permutations)
    chunk = max(1, 2_000_000 // len(segment))
    for start in range(0, permutations, chunk):
        n = min(chunk, permutations - start)
        best[start : start + n] = split_gains(rng.permuted(np.tile(segment, (n, 1)), axis=1), min_segment).max(axis=1)
    return best


def split_gains(orders: np.ndarray, min_segment: int) -> np.ndarray:
    """For each row of ``orders``, how much ruptures' ``l2`` cost falls when the row is split before
    point k, for k = ``min_segment`` .. m - ``min_segment`` (one column each).

    Closed form, every split at once: with S_k the sum of the first k of the m centred values, the
    sides' means are S_k / k and -S_k / (m - k), and the cost falls by k m_L^2 + (m - k) m_R^2
    = S_k^2 m / (k (m - k)).
    """
    m = orders.shape[1]
    ks = np.arange(min_segment, m - min_segment + 1)
    sums = np.cumsum(orders - orders.mean(axis=1, keepdims=True), axis=1)[:, ks - 1]
    gains: np.ndarray = sums * sums * m / (ks * (m - ks))
    return gains
