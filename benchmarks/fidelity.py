"""Fidelity of compilebench's numbers: whole experiments against an independent timer, that timer
against itself, compilebench's timers against independent ones, run-to-run stability through the
real CLI, and an experiment timed alone vs beside a compiling neighbour.

    python benchmarks/fidelity.py                    # every section (about 30 minutes on 2 cores)
    python benchmarks/fidelity.py e2e drift          # some: e2e inprocess drift heap timers interleaving stability
                                                     # neighbours
    python benchmarks/fidelity.py e2e --quick        # two workloads, one run each

**End to end** (``e2e``): each workload runs as an experiment through ``orchestrator.api.run``
on the real workers (a local Ray instance of one CPU: one long-lived worker, one thread),
``--runs`` times, one ``run`` of that workload alone each time; seconds after each, the workload
is timed by ``torch.utils.benchmark.Timer.blocked_autorange`` in a new process (``Reference``),
as each run's worker is one: where a process's memory lies can set a memory-bound call's speed
for the process's life (``drift``), so both sides are drawn afresh every run. The reference is
the same target built by the same factory from the same seed,
compiled the same way (``torch.compile`` with the experiment's compile settings, inference under
``no_grad``, modules in ``eval()``), at the worker's thread count, on its core. The ratio is the
median over runs of each run's compilebench median over the reference taken right after it. This
is what a user sees who times the callable on its own, against what compilebench reports for it.

**In one process** (``inprocess``): the reference process of each workload also runs the e2e
experiment through compilebench's whole procedure (``tasks.worker.run_payload``: build, compile,
warm-up, interleaved timing), taking turns with its own ``blocked_autorange``. Both share one
process's draw of memory, so a ratio off here is the procedure's, and one off only end to end is
what two processes draw apart.

**Drift** (``drift``): the reference against itself. Two identical reference processes, pinned to
one core, take turns timing the same workload, window after window; the ratios of neighbouring
windows are what this machine does to two measurements of one thing seconds apart, the floor
under every comparison the other sections make. **Heap** (``heap``): the same for ``seed.foo3``
1024x1024, before and after one of the two processes fragments its heap (``fragment_heap``), as
varied experiments leave a long-lived worker's.

**Interleaving** (``interleaving``): in this process, the same eager and compiled callables timed
by ``blocked_autorange`` (a loop of one side), by compilebench's CPU timer alone, interleaved as
the procedure interleaves them, and interleaved with an untimed block of the side before each
timed block; and the time of a side's calls just after the other side's, call by call. A side's
first calls after the other's are slower than its steady state; a sample taken right after a
switch measures the switch.

On CUDA the timers section compares both CUDA methods (events and wall) with Triton's do_bench,
on the CPU workloads plus the GPU check's own (foo3 4096x4096 and foo 10x10, eager and compiled).

Targets printed with each table: medians (end to end and timers) within 0.95-1.05 of the
reference for calls of 100 us and more, 0.85-1.15 around 10 us; speedup coefficient of variation <= 5% over 5
runs; alone vs beside a neighbour within 5%.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fidelity_sections.drift import section_drift  # noqa: E402
from benchmarks.fidelity_sections.e2e import E2E_RUNS, section_e2e  # noqa: E402
from benchmarks.fidelity_sections.heap import section_heap  # noqa: E402
from benchmarks.fidelity_sections.inprocess import section_inprocess  # noqa: E402
from benchmarks.fidelity_sections.interleaving import section_interleaving  # noqa: E402
from benchmarks.fidelity_sections.neighbours import section_neighbours  # noqa: E402
from benchmarks.fidelity_sections.reference import reference_child  # noqa: E402
from benchmarks.fidelity_sections.stability import section_stability  # noqa: E402
from benchmarks.fidelity_sections.timers import section_timers  # noqa: E402
from benchmarks.fidelity_sections.workloads import E2E_QUICK  # noqa: E402
from benchmarks.own_state import in_own_state  # noqa: E402

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Each section by name, in the order they run by default; each takes the parsed arguments.
SECTION_RUNS: dict[str, Callable[[argparse.Namespace], None]] = {
    "e2e": lambda args: section_e2e(args.runs, args.quick),
    "inprocess": lambda _: section_inprocess(),
    "drift": lambda _: section_drift(),
    "heap": lambda _: section_heap(),
    "timers": lambda _: section_timers(),
    "interleaving": lambda _: section_interleaving(),
    "stability": lambda _: section_stability(),
    "neighbours": lambda _: section_neighbours(),
}
SECTIONS = tuple(SECTION_RUNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("sections", nargs="*", help=f"of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--runs", type=int, default=E2E_RUNS, help="e2e: runs of the sweep and of the reference")
    parser.add_argument("--quick", action="store_true", help=f"e2e: the first {E2E_QUICK} workloads, one run")
    parser.add_argument("--reference-child", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_child:
        reference_child(json.loads(args.reference_child))
        return
    if unknown := [name for name in args.sections if name not in SECTIONS]:
        parser.error(f"unknown section(s): {', '.join(unknown)} (sections: {', '.join(SECTIONS)})")
    in_own_state("fidelity")  # Ray's local workers start in the driver's directory: they import benchmarks/ from it
    print(f"$ python benchmarks/fidelity.py {' '.join(sys.argv[1:])}".rstrip())
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {gpu}, load average {os.getloadavg()[0]:.1f} at start")
    for name in args.sections or SECTIONS:
        SECTION_RUNS[name](args)


if __name__ == "__main__":
    main()
