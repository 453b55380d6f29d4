"""The worker side runs one experiment without Ray (as on a GPU machine that has no Ray)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tasks_and_spec_loading_do_not_import_ray():
    code = (
        "import sys\n"
        "import orchestrator.spec, tasks.procedure, tasks.stats\n"
        "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
