"""Where a benchmark script runs from and keeps its state: the checkout, and core locks and compile
caches of its own. Shared by the scripts that start Ray workers; imports nothing of compilebench."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def in_own_state(name: str) -> None:
    """Run from the checkout (Ray's local workers start in the driver's directory) with core locks
    and compile caches of this benchmark's own (``compilebench-{name}-`` in the temporary
    directory), apart from any other compilebench process."""
    os.chdir(ROOT)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if "COMPILEBENCH_STATE_DIR" not in os.environ:
        state = tempfile.mkdtemp(prefix=f"compilebench-{name}-")
        os.environ["COMPILEBENCH_STATE_DIR"] = state
        atexit.register(shutil.rmtree, state, ignore_errors=True)  # its locks and compile caches
