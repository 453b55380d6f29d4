"""benchmarks/history.py: its detector finds planted steps where they are and leaves flat series alone, on
short and long series, on the tuned seed and on the held-out one, and ``--quick`` prints both tables."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks import history

ROOT = Path(__file__).resolve().parents[1]


def options(steps: int, flat: int) -> argparse.Namespace:
    """The benchmark's arguments at its defaults: the detector's own settings, ``steps`` and ``flat`` series."""
    return argparse.Namespace(
        steps=steps, flat=flat, alpha=history.ALPHA, min_change=history.SPEED_MIN_CHANGE, penalty=history.PENALTY
    )


def test_a_planted_step_is_found_at_its_index_and_a_flat_series_has_none():
    rng = np.random.default_rng(1)
    for length, at in ((8, 5), (12, 3), (30, 15), (30, 27)):
        values = history.series(rng, length, 0.005, at)  # 0.5% noise: the 5% step is ten noise deviations
        assert [split.index for split in history.change_points(values)] == [at], (length, at)
    flat = [history.series(rng, 30, 0.01, None) for _ in range(20)]
    assert [values for values in flat if history.change_points(values)] == []


def test_on_both_seeds_large_steps_are_caught_and_false_alarms_stay_within_the_goal():
    for seed in (history.TUNE_SEED, history.HELD_OUT_SEED):
        short, long = (history.measure(seed, n, 0.01, options(steps=30, flat=100)) for n in (8, 30))
        for row in (short, long):
            assert (row.steps, row.flat) == (30, 100)
            assert row.large >= 0.8 * row.steps  # ten noise deviations, 3 points before the end
            assert row.alarms <= history.FALSE_ALARM_GOAL * row.flat
        assert long.anywhere >= history.DETECTION_GOAL * long.steps  # a 5% step in 30 points of 1% noise
        assert long.anywhere > short.anywhere  # 8 points see less than 30
        assert long.detectable < short.detectable < 0.15
    noisy = history.measure(history.TUNE_SEED, 30, 0.025, options(steps=30, flat=0))
    assert noisy.anywhere < long.anywhere  # two and a half times the noise hides some of the same steps


def test_quick_run_prints_both_seeds_tables():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "history.py"), "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "series of 8,30 points" in out and "alpha 0.003" in out and "min change 2%" in out  # what was used
    assert "seed 1 (tuned on):" in out and "seed 2 (held out):" in out
    cell = r"(\d+\.\d)%"
    rows = re.findall(
        rf"^\| (\d+) \| (\d\.\d)% \| {cell} \| {cell} \| {cell} \| (\d+\.\d) \| {cell} \| (yes|no) \|$", out, re.M
    )
    assert [(n, cv) for n, cv, *_ in rows] == [("8", "1.0"), ("8", "2.5"), ("30", "1.0"), ("30", "2.5")] * 2, out
    for _, _, anywhere, end, large, alarms, floor, _ in rows:
        assert all(0 <= float(v) <= 100 for v in (anywhere, end, large, floor))
        assert float(alarms) <= 100 * history.FALSE_ALARM_GOAL
    worst = re.findall(
        r"^seed (\d): worst false-alarm rate (\d+\.\d) per 100 .* goal met in (\d) of 4 cells$", out, re.M
    )
    assert [seed for seed, *_ in worst] == ["1", "2"], out
