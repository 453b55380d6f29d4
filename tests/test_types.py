"""mypy over the packages ``[tool.mypy]`` names, as one test of the suite.

A cold run costs about 19 s of CPU. Before the suite it held up every test for 14 s with one of the two cores
idle; as a test it runs beside the others on the pytest workers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_issues():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout
