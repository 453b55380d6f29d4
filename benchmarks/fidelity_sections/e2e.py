"""The end-to-end section (``fidelity.py e2e``): each workload run as an experiment through
``orchestrator.api.run`` on the real workers, against the reference in a new process seconds after.

Each run's workers are new and so is each run's reference process: where a process's memory lies
can set a memory-bound call's speed for the process's life (the drift section), so both sides are
drawn afresh every run. The ratio is the median over runs of each run's compilebench median over
the reference taken right after it."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.fidelity_sections.reference import E2E_REFERENCE_MIN_RUN_S, E2E_REFERENCE_ROUNDS, Reference
from benchmarks.fidelity_sections.tables import e2e_table
from benchmarks.fidelity_sections.workloads import E2E_QUICK, E2E_TIMING, E2E_WORKLOADS, e2e_spec

E2E_RUNS = 5  # runs of each workload, each followed by a new reference process


def e2e_run(workloads: list[tuple[str, str, dict[str, Any]]], out_dir: Path, index: str, seed: int) -> list[Any]:
    """One run of the workloads through ``orchestrator.api.run`` (one worker: a one-CPU instance);
    the results in workload order. The workers of a run are gone when it returns."""
    from orchestrator.api import run

    spec = out_dir / f"e2e-{index}.yaml"
    spec.write_text(e2e_spec(workloads, seed))
    report = run(spec, out_dir / f"e2e-{index}.json", num_cpus=1, overwrite=True)
    return list(report.results)


def section_e2e(runs: int = E2E_RUNS, quick: bool = False) -> None:
    """Whole experiments through ``orchestrator.api.run`` against a reference taken right after each, per side."""
    workloads = E2E_WORKLOADS[:E2E_QUICK] if quick else E2E_WORKLOADS
    runs = 1 if quick else runs
    seed = 0
    ours: dict[tuple[int, str], list[float]] = {}
    refs: dict[tuple[int, str], list[float]] = {}
    threads_seen: set[int] = set()
    not_ok: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(runs):
            print(f"e2e run {index + 1}/{runs}: {len(workloads)} workloads...", file=sys.stderr, flush=True)
            for i, (label, target, params) in enumerate(workloads):
                (result,) = e2e_run([workloads[i]], Path(tmp), f"{index}-{i}", seed)
                if result.status != "ok" or result.eager is None or result.compiled is None:
                    not_ok.append(f"run {index + 1}, {label}: {result.status}")
                    continue
                threads = result.worker.threads if result.worker is not None else 1
                threads_seen.add(threads)
                ours.setdefault((i, "eager"), []).append(result.eager.median_ms)
                ours.setdefault((i, "compiled"), []).append(result.compiled.median_ms)
                cores = list(result.measurement.cores) if result.measurement is not None else []
                with Reference(target, params, threads, seed, cores) as reference:  # a new process each run
                    ref = reference.time(E2E_REFERENCE_ROUNDS, E2E_REFERENCE_MIN_RUN_S)
                for side in ("eager", "compiled"):
                    refs.setdefault((i, side), []).append(ref[side])
        import ray

        ray.shutdown()
    shown = ", ".join(str(t) for t in sorted(threads_seen)) or "-"
    print(
        f"\n## End to end on cpu: orchestrator.api.run vs torch.utils.benchmark in a process of its own "
        f"({shown} thread)\n"
    )
    print(
        f"{runs} run(s) of each workload, each one orchestrator.api.run of that workload alone (a new worker; "
        f"timing {E2E_TIMING}), and right after it the reference: blocked_autorange ({E2E_REFERENCE_ROUNDS} rounds "
        f"of {E2E_REFERENCE_MIN_RUN_S} s per side) in a new process, pinned to the worker's core with the "
        "worker's allocator setting. Medians of the runs' "
        "medians; ratio: the median over runs of compilebench / the reference taken seconds after it.\n"
    )
    print("\n".join(e2e_table([label for label, _, _ in workloads], ours, refs)))
    for line in not_ok:
        print(f"\nnot timed: {line}", end="")
    print()
