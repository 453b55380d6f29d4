"""Statistics from raw samples: descriptions, bootstrap intervals, geometric means."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.stats import describe, geomean, geomean_ci, speedup_ci


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


def test_geomean_interval_brackets_the_geomean():
    rng = np.random.default_rng(3)
    pairs = [(rng.normal(10, 0.3, 30), rng.normal(10 / r, 0.3 / r, 30)) for r in (4.0, 0.5)]
    low, high = geomean_ci(pairs)
    assert low < geomean([4.0, 0.5]) < high
    assert high < 1.6  # the 0.5x slowdown pulls the mean down: it is not clipped to 1
