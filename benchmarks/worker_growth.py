"""What a long-lived worker accumulates: resident memory, modules and reset time over many experiments.

    python benchmarks/worker_growth.py                  # 200 experiments, a row every 10; ~10 min on 2 cores
    python benchmarks/worker_growth.py -n 60 -k 5

One ``tasks.worker.Worker`` runs experiments in this process, one after another, exactly as a
Ray worker does (the procedure, then ``reset``): the tutorial's targets (``seed.*``) on the CPU,
compiled by inductor, each with a shape of its own so that every experiment compiles new code,
as a sweep over shapes and configurations does, against compile caches of its own (a fresh
``COMPILEBENCH_STATE_DIR``: nothing left by earlier runs is loaded). Every ``k`` experiments it prints the
process's resident memory (``VmRSS``) and its growth since the worker started, the number of
modules in ``sys.modules`` and of objects ``gc.freeze`` holds, the mean reset time and the
mean experiment time of the last ``k``. The worker's own limits are lifted (nothing retires).

Then the two sides of recycling: growth per experiment past the first row (the first
experiments import what every later one uses: a one-off), and what a replacement costs,
spread over the experiments of one worker. A replacement is timed as it happens: a new
Python process (the same caches, now warm) starts a ``Worker`` and runs one more experiment;
its cost is that wall time less the median experiment (Ray's own worker start, about a
second more, is not in it). These figures set the defaults of ``tasks.models.WorkerLimits``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from tasks.worker import RETIRE, Worker, resident_mb

# A replacement worker: a fresh process starts a Worker and runs one experiment (argv[1], JSON).
REPLACEMENT = """
import json, sys, time
from tasks.worker import Worker
worker = Worker({"node_id": None, "gpu_ids": [], "cpus": int(sys.argv[2]), "gpu_model": None})
result = worker.run(json.loads(sys.argv[1]))
print(json.dumps({"status": result["status"]}))
"""

# (target, params for the i-th use): shapes step so that no two experiments compile the same graph
TARGETS: list[tuple[str, Any]] = [
    ("seed.foo", lambda i: {"shape": [64 + 8 * i, 64]}),
    ("seed.outer", lambda i: {"shape": [64 + 8 * i, 64]}),
    ("seed.my_module", lambda i: {"batch": 4 + i}),
    ("seed.foo3", lambda i: {"shape": [128 + 8 * i, 128]}),
    ("seed.bar", lambda i: {"size": 8 + i}),
    ("seed.bar_fixed", lambda i: {"size": 8 + i}),
]


def payloads(n: int) -> list[dict[str, Any]]:
    """``n`` experiments cycling through ``TARGETS``, each with its own shape."""
    out = []
    for i, (target, params) in zip(range(n), itertools.cycle(TARGETS), strict=False):
        out.append(
            {
                "target": target,
                "params": params(i // len(TARGETS)),
                "device": "cpu",
                "compile": {"backend": "inductor"},
                "timing": {"warmup": 1, "repeats": 3},
                "seed": i,
            }
        )
    return out


def replacement_s(payload: dict[str, Any], cpus: int) -> float:
    """Wall time of a new process that starts a ``Worker`` and runs ``payload``."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", REPLACEMENT, json.dumps(payload), str(cpus)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the replacement worker failed: {proc.stderr[-2000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="experiments to run (default 200)")
    parser.add_argument("-k", type=int, default=10, help="a row every k experiments (default 10)")
    parser.add_argument("--cpus", type=int, default=1, help="cores the worker claims, as a scheduled one does")
    args = parser.parse_args()

    state = tempfile.mkdtemp(prefix="worker-growth-")
    os.environ["COMPILEBENCH_STATE_DIR"] = state  # compile caches of its own: every shape compiles anew
    try:
        measure(args)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def measure(args: argparse.Namespace) -> None:
    """Run the experiments on one worker and print the table and the summary."""
    started = time.perf_counter()
    placement = {"node_id": None, "gpu_ids": [], "cpus": args.cpus, "gpu_model": None}
    placement["limits"] = {"max_experiments": 10**9, "max_rss_growth_mb": 1e9}
    worker = Worker(placement)
    worker_start_s = time.perf_counter() - started
    print(f"worker started in {worker_start_s:.1f} s", flush=True)
    base_mb, base_modules = worker.started_mb or 0.0, len(sys.modules)
    header = (
        f"{'experiments':>11} {'RSS MiB':>8} {'growth':>7} {'modules':>8} {'+mod':>6} {'frozen':>8} "
        f"{'reset ms':>9} {'exp s':>6} {'not ok':>6}"
    )
    print(header)
    print(f"{0:>11} {base_mb:>8.0f} {0:>7.0f} {base_modules:>8} {0:>6} {gc.get_freeze_count():>8}", flush=True)
    resets: list[float] = []
    runs: list[float] = []
    every_run: list[float] = []
    rows: list[tuple[int, float, int, int]] = []  # experiments, RSS MiB, modules, frozen objects
    failed = 0
    for i, payload in enumerate(payloads(args.n), start=1):
        t = time.perf_counter()
        result = worker.run(payload)
        runs.append(time.perf_counter() - t)
        every_run.append(runs[-1])
        resets.append(worker.last_reset_s or 0.0)
        failed += result.get("status") != "ok"
        if RETIRE in result:
            print(f"  (the worker would retire: {result[RETIRE]})")
        if i % args.k == 0 or i == args.n:
            mb = resident_mb() or 0.0
            rows.append((i, mb, len(sys.modules), gc.get_freeze_count()))
            print(
                f"{i:>11} {mb:>8.0f} {mb - base_mb:>7.0f} {len(sys.modules):>8} {len(sys.modules) - base_modules:>6} "
                f"{gc.get_freeze_count():>8} {1e3 * statistics.mean(resets):>9.0f} {statistics.mean(runs):>6.2f} "
                f"{failed:>6}",
                flush=True,
            )
            resets, runs = [], []
    if len(rows) >= 2:
        (i0, mb0, mod0, fr0), (i1, mb1, mod1, fr1) = rows[0], rows[-1]
        per = i1 - i0
        print(
            f"\nper experiment after the first {i0}: {(mb1 - mb0) / per:.2f} MiB, {(mod1 - mod0) / per:.1f} modules, "
            f"{(fr1 - fr0) / per:.0f} frozen objects"
        )
    typical = statistics.median(every_run)
    wall = replacement_s(payloads(args.n + 1)[-1], args.cpus)
    cost = wall - typical
    spread = ", ".join(f"{n}: {cost / n:.3f} s ({100 * cost / n / typical:.1f}%)" for n in (10, 25, 50, 100, 200))
    print(f"a replacement costs {cost:.1f} s (a new process, its Worker and one experiment: {wall:.1f} s)")
    print(f"spread over N experiments (share of the median experiment, {typical:.2f} s): {spread}")
    print(f"\npython benchmarks/worker_growth.py -n {args.n} -k {args.k} --cpus {args.cpus}")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
