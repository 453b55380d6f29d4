"""The drift section (``fidelity.py drift``): the reference against itself.

Two identical reference processes, pinned to one core, take turns timing the same workload, window
after window; the ratios of neighbouring windows are what this machine does to two measurements of
one thing seconds apart, the floor under every comparison the other sections make."""

from __future__ import annotations

import os
import sys

from benchmarks.fidelity_sections.reference import DRIFT_WINDOW_S, Reference, windows
from benchmarks.fidelity_sections.tables import drift_header, drift_rows
from benchmarks.fidelity_sections.workloads import E2E_WORKLOADS

DRIFT_WORKLOADS = (E2E_WORKLOADS[0], E2E_WORKLOADS[2], E2E_WORKLOADS[3])  # gelu 512x256, foo3 1024x1024, mlp
DRIFT_PAIRS = 25  # windows of each process, alternating


def section_drift(pairs: int = DRIFT_PAIRS) -> None:
    """The reference against itself: two identical reference processes of a workload, pinned to the
    same core, take turns timing it, window after window; the ratio of each pair of neighbouring
    windows is what this machine does to two measurements of the same thing seconds apart."""
    core = min(os.sched_getaffinity(0))
    rows = drift_header()
    for label, target, params in DRIFT_WORKLOADS:
        print(f"drift: {label}, {pairs} pairs...", file=sys.stderr, flush=True)
        with Reference(target, params, 1, 0, [core]) as a, Reference(target, params, 1, 0, [core]) as b:
            a.time(1, 0.05), b.time(1, 0.05)  # both built and compiled before the first pair
            series = windows(a, b, pairs)
        rows += drift_rows(label, series)
    print(f"\n## The reference against itself: two identical processes taking turns on core {core}\n")
    print(
        f"Per workload, two reference processes (blocked_autorange, one thread, built and compiled alike, "
        f"pinned to core {core}) time it in turn, {DRIFT_WINDOW_S} s per side a window, {pairs} windows each, "
        "which goes first alternating. A/B: each pair of neighbouring windows' ratio, their median [95% "
        "bootstrap interval], the range of single pairs and how many lie within 3% and 5%; over the run: how "
        "far one process's own windows move (max / min).\n"
    )
    print("\n".join(rows))
