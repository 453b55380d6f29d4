"""benchmarks/history.py: its detector finds a planted step where it is and leaves flat series alone, its
rates meet their goal at 1% noise, and ``--quick`` prints both of its figures."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks import history

ROOT = Path(__file__).resolve().parents[1]
LENGTH = 30  # the benchmark's default series


def options(steps: int, flat: int) -> argparse.Namespace:
    """The benchmark's arguments at its defaults: the detector's own settings, ``steps`` and ``flat`` series."""
    return argparse.Namespace(
        length=LENGTH,
        steps=steps,
        flat=flat,
        alpha=history.ALPHA,
        min_segment=history.MIN_SEGMENT,
        permutations=history.PERMUTATIONS,
        penalty=history.PENALTY,
    )


def test_a_planted_step_is_found_at_its_index_and_a_flat_series_has_none():
    rng = np.random.default_rng(1)
    for at in (history.MARGIN, 15, LENGTH - history.MARGIN):
        values = history.series(rng, LENGTH, 0.005, at)  # 0.5% noise: the 5% step is ten noise deviations
        assert [split.index for split in history.change_points(values)] == [at]
    clean_step = np.r_[np.ones(12), np.full(LENGTH - 12, 1 + history.STEP)]
    assert [split.index for split in history.change_points(clean_step)] == [12]
    flat = [history.series(rng, LENGTH, 0.01, None) for _ in range(20)]
    assert [values for values in flat if history.change_points(values)] == []


def test_at_one_percent_noise_the_steps_are_caught_and_false_alarms_stay_within_the_goal():
    row = history.measure(0.01, options(steps=20, flat=100), np.random.default_rng(0))
    assert (row.steps, row.flat) == (20, 100)
    assert row.caught >= history.DETECTION_GOAL * row.steps and row.located >= row.caught - 1
    assert row.alarms <= history.FALSE_ALARM_GOAL * row.flat and row.met
    noisy = history.measure(0.03, options(steps=20, flat=0), np.random.default_rng(0))
    assert noisy.caught < row.caught  # three times the noise hides some of the same steps


def test_quick_run_prints_the_detection_and_false_alarm_rates():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "history.py"), "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "series of 30 points" in out and "alpha" in out and "permutations" in out  # what was used
    detection = re.search(r"^detection rate: (\d+\.\d)% at CV 1\.0%, (\d+\.\d)% at CV 3\.0%$", out, re.M)
    alarms = re.search(r"^false-alarm rate: (\d+\.\d) per 100 at CV 1\.0%, (\d+\.\d) per 100 at CV 3\.0%$", out, re.M)
    assert detection and alarms, out
    assert all(0 <= float(v) <= 100 for v in (*detection.groups(), *alarms.groups()))
    rows = re.findall(r"^\| (\d\.\d)% \| 40 \| .* \| 100 \| .* \| (yes|no) \|$", out, re.M)
    assert [cv for cv, _ in rows] == ["1.0", "3.0"], out  # one table row per noise level, with its counts
    assert float(detection[1]) >= 100 * history.DETECTION_GOAL and float(alarms[1]) <= 100 * history.FALSE_ALARM_GOAL
    assert rows[0][1] == "yes"  # at 1% noise the goal is met
