"""Statistics from raw samples: descriptions, bootstrap intervals, geometric means."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks import stats
from tasks.stats import bootstrap_medians, describe, geomean, geomean_ci, median_ci, speedup_ci


def test_describe_derives_everything_from_the_samples():
    d = describe([1.0, 2.0, 3.0, 4.0, 100.0])
    assert d.model_dump() == {"median_ms": 3.0, "min_ms": 1.0, "mean_ms": 22.0, "iqr_ms": 2.0, "n": 5, "noisy": True}
    assert describe([10.0, 10.1, 10.2, 9.9]).noisy is False


def test_bootstrap_interval_contains_the_true_ratio():
    rng = np.random.default_rng(42)
    true_ratio = 2.5
    misses = 0
    for trial in range(40):
        eager = rng.lognormal(np.log(5.0), 0.05, size=30)
        compiled = rng.lognormal(np.log(5.0 / true_ratio), 0.05, size=30)
        low, high = speedup_ci(eager, compiled, seed=trial)
        assert low < high
        misses += not (low <= true_ratio <= high)
    assert misses <= 6  # a 95% interval misses ~2 of 40; far more means the interval is wrong


def test_bootstrap_interval_is_reproducible_and_narrows_with_more_samples():
    rng = np.random.default_rng(1)
    eager, compiled = rng.normal(10, 1, 200), rng.normal(5, 0.5, 200)
    assert speedup_ci(eager, compiled) == speedup_ci(eager, compiled)
    wide = np.subtract(*reversed(speedup_ci(eager[:10], compiled[:10])))
    narrow = np.subtract(*reversed(speedup_ci(eager, compiled)))
    assert narrow < wide


def test_geomean_counts_slowdowns_as_they_are():
    assert geomean([4.0, 0.25]) == pytest.approx(1.0)
    assert geomean([0.5, 0.5]) == pytest.approx(0.5)


def test_geomean_of_a_few_values_in_python_agrees_with_numpy_and_keeps_its_edge_cases():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 16, 17, 40):  # SHORT (16) and below in Python, above it numpy
        values = list(np.exp(rng.normal(0, 2, n)))
        assert geomean(values) == pytest.approx(float(np.exp(np.mean(np.log(values)))), rel=1e-13)
    with np.errstate(divide="ignore"):  # numpy's warning of the -inf logarithm is not this test's
        assert geomean([2.0, 0.0]) == 0.0  # a zero is numpy's -inf logarithm, not an error
    assert math.isnan(geomean([2.0, float("nan")]))


def test_geomean_interval_brackets_the_geomean():
    rng = np.random.default_rng(3)
    pairs = [(rng.normal(10, 0.3, 30), rng.normal(10 / r, 0.3 / r, 30)) for r in (4.0, 0.5)]
    low, high = geomean_ci(pairs)
    assert low < geomean([4.0, 0.5]) < high
    assert high < 1.6  # the 0.5x slowdown pulls the mean down: it is not clipped to 1


class CountingRng:
    """A numpy Generator that remembers the largest draw of resample indices asked of it."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.largest = 0

    def integers(self, low, high, size):
        self.largest = max(self.largest, int(np.prod(size)))
        return self.rng.integers(low, high, size=size)

    def beta(self, a, b, size):
        self.largest = max(self.largest, int(np.prod(size)))
        return self.rng.beta(a, b, size=size)


def test_bootstrap_holds_at_most_the_cap_of_resampled_values_and_chunks_change_nothing(monkeypatch):
    samples = np.random.default_rng(5).lognormal(0, 0.2, size=700)
    whole = bootstrap_medians(samples, np.random.default_rng(0), 300)  # 210k values: one draw
    monkeypatch.setattr(stats, "MAX_RESAMPLED_VALUES", 5000)
    rng = CountingRng(0)
    chunked = bootstrap_medians(samples, rng, 300)
    assert rng.largest <= 5000
    assert np.array_equal(whole, chunked)  # the same random stream, drawn in pieces


@pytest.mark.parametrize("n", [1501, 1500])  # odd and even: the median of a resample is one value or two
def test_beyond_the_cap_medians_come_from_their_exact_distribution(monkeypatch, n):
    samples = np.random.default_rng(n).lognormal(0, 0.3, size=n)
    exact = bootstrap_medians(samples, np.random.default_rng(1), 4000)
    monkeypatch.setattr(stats, "MAX_RESAMPLED_VALUES", 1000)  # not even one resample fits
    rng = CountingRng(1)
    drawn = bootstrap_medians(samples, rng, 4000)
    assert rng.largest == 4000  # one number per replicate, whatever n is
    for q in (2.5, 50, 97.5):
        assert np.percentile(drawn, q) == pytest.approx(np.percentile(exact, q), rel=0.01)
    assert drawn.std() == pytest.approx(exact.std(), rel=0.1)


def test_median_ci_brackets_the_median_and_narrows_with_agreeing_values() -> None:
    assert median_ci([1.04] * 9) == (1.04, 1.04)
    low, high = median_ci([0.85, 1.04, 1.2, 0.95, 1.1, 1.04, 0.9])
    assert low <= 1.04 <= high and low < 1.0 < high
    assert median_ci([0.85, 1.04, 1.2, 0.95, 1.1, 1.04, 0.9]) == (low, high)  # seeded: the same every time


def test_the_empirical_null_is_the_median_and_the_normal_scaled_mad_and_ignores_a_few_shifted_values():
    from scipy.stats import norm

    from tasks.stats import empirical_null, normal_p, normal_spread_about_zero

    rng = np.random.default_rng(0)
    values = list(rng.normal(0.01, 0.03, 2000))
    null = empirical_null(values + [1.0] * 50)  # 50 large real changes barely move it
    assert null.centre == pytest.approx(0.01, abs=0.003) and null.spread == pytest.approx(0.03, rel=0.08)
    assert normal_p([0.01 + 1.96 * 0.03], 0.01, 0.03) == pytest.approx([0.05], rel=1e-3)
    assert normal_p([0.0, 0.1], 0.0, 0.0) == [1.0, 0.0]
    assert normal_spread_about_zero([-2.0, 1.0, 3.0]) == pytest.approx(2.0 / norm.ppf(0.75))


def test_median_shift_is_wilcoxons_signed_rank_test():
    from scipy.stats import wilcoxon

    from tasks.stats import median_shift

    values = [0.03, -0.01, 0.05, 0.04, 0.02, 0.06, -0.02, 0.07]
    shift = median_shift(values)
    assert shift.p == pytest.approx(float(wilcoxon(values).pvalue)) and shift.median == pytest.approx(0.035)
    assert median_shift([0.0, 0.0]).p == 1.0


def test_the_empirical_null_turns_student_t_where_the_tails_are_heavy():
    from scipy.stats import t as student_t

    from tasks.stats import HEAVY_TAIL_SHARE, empirical_null

    rng = np.random.default_rng(1)
    normal = rng.normal(0, 0.02, 120)
    assert empirical_null(normal).df == float("inf")
    planted = np.concatenate([normal[:115], np.full(5, -0.1)])  # 5 real changes among 120 keep it normal
    assert empirical_null(planted).df == float("inf")
    # 5 real changes and 3 natural outliers, all 6-8 spreads out: 8 of 120 beyond 3 spreads (6.7%), yet the
    # shoulders (2-5 spreads) hold a normal's share: still normal, so the 5 keep a normal null's power
    far = np.concatenate([normal[:112], np.full(5, -0.13), [0.14, -0.15, 0.12]])
    assert empirical_null(far).df == float("inf")
    assert np.mean(np.abs(far - np.median(far)) > 3 * empirical_null(far).spread) > 0.05
    heavy = rng.standard_t(1.5, 120) * 0.2
    null = empirical_null(heavy)
    assert 1 <= null.df < 4 and np.mean(np.abs(heavy - null.centre) > 3 * null.spread) > HEAVY_TAIL_SHARE
    (p,) = null.p([null.centre + 5 * null.scale])
    assert p == pytest.approx(2 * student_t.sf(5, null.df))
