"""The in-one-process section (``fidelity.py inprocess``): compilebench's whole procedure against
``blocked_autorange`` in the reference process itself, taking turns.

Both share one process's draw of memory, so a ratio off here is the procedure's, and one off only
end to end is what two processes draw apart."""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.fidelity_sections.reference import (
    E2E_REFERENCE_MIN_RUN_S,
    E2E_REFERENCE_ROUNDS,
    Reference,
    take_turns,
)
from benchmarks.fidelity_sections.tables import e2e_table
from benchmarks.fidelity_sections.workloads import E2E_TIMING, E2E_WORKLOADS, e2e_payload

INPROCESS_TURNS = 6  # procedure, reference, reference, procedure...: each turn pairs neighbours in time


def section_inprocess(turns: int = INPROCESS_TURNS) -> None:
    """Compilebench's whole procedure against ``blocked_autorange`` in one process, taking turns: what
    the procedure adds to a side's median, with no second process, worker or Ray to draw apart."""
    core = min(os.sched_getaffinity(0))
    seed = 0
    ours: dict[tuple[int, str], list[float]] = {}
    refs: dict[tuple[int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, workload in enumerate(E2E_WORKLOADS):
            label, target, params = workload
            print(f"inprocess: {label}, {turns} turns...", file=sys.stderr, flush=True)
            payload = e2e_payload(workload, Path(tmp), seed)
            with Reference(target, params, 1, seed, [core]) as ref:
                ask_ours = functools.partial(ref.ask, {"experiment": payload})
                ask_reference = functools.partial(ref.time, E2E_REFERENCE_ROUNDS, E2E_REFERENCE_MIN_RUN_S)
                series = take_turns({"ours": ask_ours, "reference": ask_reference}, turns)
            for mine, theirs in zip(series["ours"], series["reference"], strict=True):
                for side in ("eager", "compiled"):
                    ours.setdefault((i, side), []).append(mine[side])
                    refs.setdefault((i, side), []).append(theirs[side])
    print(f"\n## In one process: compilebench's procedure vs torch.utils.benchmark, taking turns on core {core}\n")
    print(
        f"Per workload, one process (pinned to core {core}, one thread, the worker's allocator setting) builds and "
        "compiles the reference as the e2e section does, then takes turns: the e2e experiment through "
        f"compilebench's whole procedure (tasks.worker.run_payload: build, compile, warm-up, interleaved timing; "
        f"timing {E2E_TIMING}) and blocked_autorange ({E2E_REFERENCE_ROUNDS} rounds of {E2E_REFERENCE_MIN_RUN_S} s "
        f"per side), which goes first alternating, {turns} turns. Per turn the ratio compilebench / reference; "
        "the median over turns. One process holds both, so what a new process draws (drift, heap) is the same "
        "for both: a ratio off here is the procedure's, one off only in e2e is the process's.\n"
    )
    print("\n".join(e2e_table([label for label, _, _ in E2E_WORKLOADS], ours, refs)).replace("per run", "per turn"))
