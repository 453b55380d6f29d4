"""benchmarks/history.py runs and prints both of its figures: the detection rate and the false-alarm rate."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
