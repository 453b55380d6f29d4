"""The heap section (``fidelity.py heap``): a memory-bound call in two identical reference processes
taking turns on one core, before and after one of them fragments its heap (``fragment_heap``), as
varied experiments leave a long-lived worker's."""

from __future__ import annotations

import os
import sys

from benchmarks.fidelity_sections.reference import DRIFT_WINDOW_S, HEAP_SIZES, Reference, windows
from benchmarks.fidelity_sections.tables import drift_header, drift_rows
from benchmarks.fidelity_sections.workloads import E2E_WORKLOADS

HEAP_PAIRS = 12  # pairs before and after the fragmenting


def section_heap(pairs: int = HEAP_PAIRS) -> None:
    """A memory-bound call in two identical processes taking turns on one core, before and after one
    of them fragments its heap (``fragment_heap``): what a long-lived worker's heap does to it."""
    label, target, params = E2E_WORKLOADS[2]  # seed.foo3 1024x1024: four 4 MB buffers a call
    core = min(os.sched_getaffinity(0))
    rows = drift_header()
    print(f"heap: {label}, {pairs} pairs, A fragments its heap, {pairs} pairs...", file=sys.stderr, flush=True)
    with Reference(target, params, 1, 0, [core]) as a, Reference(target, params, 1, 0, [core]) as b:
        a.time(1, 0.05), b.time(1, 0.05)  # both built and compiled before the first pair
        for when in ("both fresh", "A's heap fragmented"):
            if when != "both fresh":
                a.ask({"fragment": True})
            rows += drift_rows(f"{label}, {when}", windows(a, b, pairs))
    print(f"\n## A fragmented heap: {label} in two identical processes on core {core}\n")
    print(
        f"Two reference processes as in the drift section ({DRIFT_WINDOW_S} s per side a window), {pairs} pairs; "
        f"then A makes 3000 tensors of mixed sizes ({', '.join(str(b) for b in HEAP_SIZES)} bytes) and frees "
        f"every other one, and makes and frees 500 more, as varied experiments leave a worker's heap; "
        f"{pairs} pairs again.\n"
    )
    print("\n".join(rows))
