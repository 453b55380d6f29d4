"""Real Ray at the largest width this machine's memory allows: compilebench's per-experiment overhead
against the one-actor-per-GPU floor, on a multi-node ``ray.cluster_utils.Cluster`` of logical GPUs.

    python benchmarks/ray_width.py                         # up to 32 GPUs over 4 nodes, about 5 minutes
    python benchmarks/ray_width.py --widths 8 --per-gpu 2  # a quick look

Method: a head node holding nothing, and nodes of ``--gpus-per-node`` logical GPUs and as many
logical CPUs, added one at a time as the width grows. At each width W (GPUs in all), a sweep of
``--per-gpu`` x W cheap experiments (``seed.foo``, ``backend: eager``, 3 repeats) runs twice, one
after the other: through compilebench's runner on Ray's pool (``run_experiments`` with a journal:
one long-lived worker per GPU, policy, validation, journal), then through the floor of
``benchmarks/overhead.py`` (one bare actor per GPU fed by a ``ray.wait`` loop). Overhead per
experiment = (wall - sum of in-task time / W) / N, as ``benchmarks/overhead.py`` measures it; both
pay their workers' start (each imports torch) in their wall time.

Memory decides the width: each worker is a process that imports torch. While each sweep runs, the
host's available memory (``MemAvailable``) and the workers' own memory (the sum of their ``Pss``) are
sampled; the memory a worker costs is the peak sum over the width, and a wider width is tried only if
its projected need leaves ``--floor-gb`` available (4 GB: the machine is shared), else the widest
that does. A sweep that drives available memory under that floor anyway is interrupted (its workers
killed) and the width recorded as where it stopped. ``--budget-s`` stops the climb after the width
that passes it.
"""

from __future__ import annotations

import _thread
import argparse
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402

from benchmarks.overhead import Run, experiments, run_peer  # noqa: E402
from benchmarks.own_state import in_own_state  # noqa: E402
from orchestrator.execution.cluster import LOCAL_SYSTEM_CONFIG, describe  # noqa: E402
from orchestrator.execution.runner import run_experiments  # noqa: E402
from orchestrator.store.journal import Journal  # noqa: E402

GB = 2**30
NODE_OVERHEAD_GB = 0.3  # a raylet and its agents, per added node
OBJECT_STORE_BYTES = 200 * 2**20  # per node: the experiments' payloads and results are small


def available() -> float:
    """The host's available memory in bytes (``MemAvailable`` of /proc/meminfo)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return float(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


WORKER_NAMES = (b"ray::WorkerActor", b"ray::Runner")  # compilebench's workers, the floor's actors (process titles)


def workers_pss(names: tuple[bytes, ...] = WORKER_NAMES) -> float:
    """The proportional set size (bytes) of every worker process of either sweep, summed: shared pages
    counted once in all (``Pss`` of /proc/PID/smaps_rollup)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "cmdline").read_bytes().startswith(names):
                continue
            for line in (proc / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += float(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class Watch:
    """Samples available memory and the workers' memory every 0.5 s while a sweep runs; interrupts the
    main thread when available memory falls under ``floor``."""

    def __init__(self, floor: float) -> None:
        self.floor, self.lowest, self.tripped, self.workers = floor, available(), False, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self.lowest = min(self.lowest, available())
            self.workers = max(self.workers, workers_pss())
            if self.lowest < self.floor and not self.tripped:
                self.tripped = True
                _thread.interrupt_main()  # the runner kills its workers on KeyboardInterrupt


def fitting_width(spare: float, per_worker: float, per_node: int, nodes: int) -> int:
    """The most GPUs, whole nodes of them, whose workers (and the nodes still to add) fit in ``spare`` bytes."""
    width = 0
    while True:
        wider = width + per_node
        added = max(0, -(-wider // per_node) - nodes)
        if per_worker * wider + added * NODE_OVERHEAD_GB * GB > spare:
            return width
        width = wider


def compilebench(n: int, width: int) -> Run:
    """The sweep through compilebench's runner; returns once its workers' processes are gone (``ray.kill``
    does not wait), so that the floor's actors never share the memory with them."""
    exps = experiments(n)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        with Journal(Path(tmp) / "width.journal.jsonl") as journal:
            results = run_experiments(exps, describe(), journal=journal)
        wall = time.perf_counter() - start
    for _ in range(120):
        if not workers_pss((WORKER_NAMES[0],)):
            break
        time.sleep(0.5)
    return Run(wall, [r.finished_at - r.started_at for r in results], sum(r.status != "ok" for r in results))


def floor(n: int, width: int) -> Run:
    return run_peer("floor")(experiments(n), describe(), width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--per-gpu", type=int, default=4, help="experiments per GPU at each width")
    parser.add_argument("--floor-gb", type=float, default=4.0, help="available memory never to go under")
    parser.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args()
    in_own_state("ray-width")
    from ray.cluster_utils import Cluster

    began, floor_bytes = time.perf_counter(), args.floor_gb * GB
    head = {
        "num_cpus": 0,
        "num_gpus": 0,
        "object_store_memory": OBJECT_STORE_BYTES,
        "_system_config": LOCAL_SYSTEM_CONFIG,  # workers at niceness 0, as compilebench's local instance starts them
    }
    cluster = Cluster(initialize_head=True, head_node_args=head)
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    rows: list[str] = []
    stopped = f"the widths asked for ({', '.join(map(str, args.widths))}) all ran"
    per_worker: float | None = None
    nodes = 0
    ran: list[int] = []
    reduced = False
    try:
        for width in args.widths:
            needed_nodes = -(-width // args.gpus_per_node)
            free_now = available()
            if per_worker is not None:
                need = per_worker * width + (needed_nodes - nodes) * NODE_OVERHEAD_GB * GB
                if free_now - need < floor_bytes:
                    fits = fitting_width(free_now - floor_bytes, per_worker, args.gpus_per_node, nodes)
                    stopped = (
                        f"width {width} not tried: {width} workers at {per_worker / 2**20:.0f} MB each would leave "
                        f"{(free_now - need) / GB:.1f} GB available, under the {args.floor_gb:g} GB floor"
                    )
                    if fits <= (ran[-1] if ran else 0):
                        break
                    stopped += f"; {fits} fit"
                    width, needed_nodes, reduced = fits, -(-fits // args.gpus_per_node), True
            while nodes < needed_nodes:
                gpus = args.gpus_per_node
                cluster.add_node(num_cpus=gpus, num_gpus=gpus, object_store_memory=OBJECT_STORE_BYTES)
                nodes += 1
            cluster.wait_for_nodes()
            n = args.per_gpu * width
            runs: dict[str, Run] = {}
            with Watch(floor_bytes) as watch:
                try:
                    for name, run in (("compilebench", compilebench), ("floor", floor)):
                        runs[name] = run(n, width)
                except KeyboardInterrupt:
                    stopped = (
                        f"width {width} interrupted: available memory fell under {args.floor_gb:g} GB "
                        f"({watch.lowest / GB:.1f} GB) while its workers started"
                    )
                    break
            per_worker = watch.workers / width  # at the peak of either sweep: its workers, one per GPU
            cb, fl = runs["compilebench"], runs["floor"]
            cb_ms, fl_ms = cb.overhead_ms(width), fl.overhead_ms(width)
            rows.append(
                f"| {width} over {nodes} | {n} | {cb.wall_s:.1f} s | {cb_ms:.0f} ms | {fl.wall_s:.1f} s | "
                f"{fl_ms:.0f} ms | {cb_ms / fl_ms:.2f}x | {per_worker / 2**20:.0f} MB | {watch.lowest / GB:.1f} GB |"
                + (f" {cb.not_ok + fl.not_ok} not ok |" if cb.not_ok + fl.not_ok else " |")
            )
            print(rows[-1], flush=True)
            ran.append(width)
            if reduced:
                break  # the widest that memory allows has run
            if time.perf_counter() - began > args.budget_s and width != args.widths[-1]:
                stopped = f"the time budget ({args.budget_s:.0f} s) was spent after width {width}"
                break
    finally:
        ray.shutdown()
        cluster.shutdown()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    flags = f"--widths {' '.join(map(str, args.widths))} --per-gpu {args.per_gpu}"
    print(f"\n$ python benchmarks/ray_width.py {flags}   # {os.cpu_count()} cores, load {load}\n")
    print(
        "| GPUs over nodes | experiments | compilebench wall | its overhead / exp | floor wall | "
        "floor overhead / exp | ratio | memory a worker | lowest available | |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        print(row)
    print(f"\nStopped: {stopped}; {time.perf_counter() - began:.0f} s in all.")


if __name__ == "__main__":
    main()
