"""How compilebench's driver scales with the size of a sweep: expanding 10,000 experiments and
summarising 10,000 results, each against a 1 s target.

    python benchmarks/scale.py [--n 10000] [--repeats 5]

1. **Spec expansion**: ``orchestrator.plan.spec.load_spec`` on a generated spec whose sweep expands to
   N experiments (a built-in target; params, compile modes, fullgraph, two GPU models, seeds):
   reading, validating each experiment, checking its target and params, hashing its id.
2. **Summary**: ``orchestrator.report.summarize`` on N synthetic results (10 raw samples a side,
   a mix of targets, params, configurations, two GPU models and some failures), the work done
   once per report (and again for each ``compilebench report``).

Each figure is the best of ``--repeats`` runs in this process (a first, unmeasured run pays the
imports and caches), as wall time and as this process's CPU time. On a shared machine other
processes inflate the wall time (the load average is printed); the CPU time is what the step
itself costs. The verdict is on wall time, and says when only the CPU time meets the target.
Nothing here touches Ray or a GPU.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.plan.spec import load_spec  # noqa: E402
from orchestrator.report import summarize  # noqa: E402
from tasks.models import CompileConfig, Result, TimingConfig, WorkerInfo  # noqa: E402
from tasks.stats import side_timing  # noqa: E402

TARGET_S = 1.0  # the bound for each figure, on the project's 2-core machine
MODES = [None, "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune", "lite"]


def spec_of(n: int) -> dict:
    """A spec whose one entry sweeps to ``n`` experiments (n a multiple of 200)."""
    assert n % 200 == 0, "n must be a multiple of 200"
    return {
        "name": f"scale-{n}",
        "defaults": {"device": "auto", "timing": {"warmup": 3, "repeats": 10}, "gpu_models": ["H100", "A10G"]},
        "experiments": [
            {
                "target": "seed.foo3",
                "sweep": {
                    "params.shape": [[64 * (i + 1), 64 * (i + 1)] for i in range(10)],
                    "compile.mode": ["default", *MODES[1:]],
                    "compile.fullgraph": [False, True],
                    "seed": list(range(n // 200)),
                },
            }
        ],
    }


def results_of(n: int) -> list[Result]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        mode = MODES[i % len(MODES)]
        eager = [1.0 + rng.random() * 0.05 for _ in range(10)]
        compiled = [0.5 + rng.random() * 0.05 for _ in range(10)]
        ok = i % 20 != 0
        out.append(
            Result(
                experiment_id=f"{i:012x}",
                target=f"t{i % 50}",
                params={"n": i % 7},
                device="cuda",
                compile=CompileConfig(mode=mode, fullgraph=bool(i % 2)),
                timing=TimingConfig(warmup=3, repeats=10),
                seed=i,
                status="ok" if ok else "compile_error",
                eager=side_timing(1.0, eager, 3),
                compiled=side_timing(5.0, compiled, 3) if ok else None,
                speedup=(sorted(eager)[5] / sorted(compiled)[5]) if ok else None,
                speedup_ci=(1.8, 2.2) if ok else None,
                compile_latency_s=1.5 if ok else None,
                started_at=0.0,
                finished_at=1.0,
                worker=WorkerInfo(
                    hostname=f"node{i % 4}",
                    pid=1,
                    threads=8,
                    gpu_name="NVIDIA H100 80GB HBM3" if i % 2 else "NVIDIA A10G",
                    gpu_model="H100" if i % 2 else "A10G",
                ),
            )
        )
    return out


def best_of(repeats: int, fn: Callable[[], object]) -> tuple[float, float]:
    """The least wall time and the least CPU time of ``repeats`` calls, in seconds."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return min(wall), min(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.yaml"
        path.write_text(yaml.safe_dump(spec_of(args.n), sort_keys=False))
        expanded = len(load_spec(path).experiments)  # warm: torch's backend list, the target registry
        assert expanded == args.n, expanded
        expand_s = best_of(args.repeats, lambda: load_spec(path))
    results = results_of(args.n)
    summarize_s = best_of(args.repeats, lambda: summarize(results))

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"$ python benchmarks/scale.py --n {args.n} --repeats {args.repeats}   # {os.cpu_count()} cores, load {load}")
    print()
    print("| step | items | wall (best) | CPU (best) | CPU per item | target | verdict |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for step, (wall, cpu) in (("expand the sweep (load_spec)", expand_s), ("summarise the results", summarize_s)):
        verdict = "ok" if wall < TARGET_S else "MISSED"
        if wall >= TARGET_S > cpu:
            verdict = "ok on CPU time (wall time inflated by load)"
        row = f"| {step} | {args.n:,} | {wall:.3f} s | {cpu:.3f} s | {cpu / args.n * 1e6:.0f} us | < {TARGET_S:g} s"
        print(f"{row} | {verdict} |")


if __name__ == "__main__":
    main()
