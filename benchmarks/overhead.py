"""Orchestration overhead per experiment: compilebench against what a Ray user would write.

    python benchmarks/overhead.py                       # N=200 experiments on G=4 logical GPUs
    python benchmarks/overhead.py --n 40 --only compilebench,floor

Four ways to run the same sweep, one after another, on one local Ray instance with G logical
GPUs and G CPUs:

- **compilebench**: ``orchestrator.runner.run_experiments`` (long-lived workers, one per GPU,
  reset between experiments; results validated and appended to a journal as they arrive);
- **plain Ray tasks**: one ``@ray.remote(num_gpus=1)`` task per experiment in a process of its
  own (``max_calls=1`` and a ``runtime_env`` of their own, as compilebench did before);
- **actor floor**: one ``@ray.remote(num_gpus=1)`` actor per GPU running experiments sent in
  turn by a bare ``ray.wait`` loop: no reset, no journal, no validation on the driver;
- **Ray Tune**: one trial per experiment, ``tune.with_resources(trainable, {"gpu": 1})``
  (needs ``pip install -e '.[bench]'``).

Every way runs the same procedure in-task (``tasks.procedure.run_experiment``, ``seed.foo``,
``backend: eager``, 3 repeats), whose result carries its own ``started_at``/``finished_at``.
Overhead per experiment = (wall - Σ in-task time ÷ G) ÷ N: what the sweep cost beyond its
experiments' own time, spread over its G concurrent slots; the wall includes starting workers.
Target at N=200, G=4: compilebench ≤ 2x the actor floor and ≤ 0.1x plain tasks.

On a shared machine the load moves while the sweeps run, so compilebench and the floor run
``--rounds`` times, alternately (compilebench, floor, compilebench, ...), and the table shows
each one's median round (every round is printed below it); plain tasks and Tune, minutes per
run, run once.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)  # Ray's local workers start in the driver's directory: they import tasks from here
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("COMPILEBENCH_STATE_DIR", tempfile.mkdtemp(prefix="compilebench-overhead-"))

import ray  # noqa: E402

from orchestrator.cluster import ClusterInfo, connect  # noqa: E402
from tasks.models import Experiment  # noqa: E402

VARIANTS = ("compilebench", "plain", "floor", "tune")
REPEATED = ("compilebench", "floor")  # cheap enough to run --rounds times, alternately
LABELS = {
    "compilebench": "compilebench",
    "plain": "plain Ray GPU tasks (a process each)",
    "floor": "one Ray actor per GPU (floor)",
    "tune": "Ray Tune trials",
}


@dataclass
class Run:
    wall_s: float
    in_task_s: list[float]
    not_ok: int

    def overhead_ms(self, slots: int) -> float:
        n = len(self.in_task_s)
        return (self.wall_s - sum(self.in_task_s) / slots) / n * 1e3


def experiments(n: int) -> list[Experiment]:
    return [
        Experiment(target="seed.foo", compile={"backend": "eager"}, timing={"repeats": 3}, seed=i) for i in range(n)
    ]


def _placement() -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    gpu_ids = [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]
    return {"node_id": ctx.get_node_id(), "gpu_ids": gpu_ids, "cpus": 1, "gpu_model": None}


def _in_task(results: list[dict[str, Any]]) -> Run:
    return Run(0.0, [r["finished_at"] - r["started_at"] for r in results], sum(r["status"] != "ok" for r in results))


def run_compilebench(exps: list[Experiment], cluster: ClusterInfo, gpus: int) -> Run:
    from orchestrator.journal import Journal
    from orchestrator.runner import run_experiments

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        with Journal(Path(tmp) / "overhead.journal.jsonl") as journal:
            results = run_experiments(exps, cluster, journal=journal)
        wall = time.perf_counter() - start
    run = _in_task([r.model_dump() for r in results])
    run.wall_s = wall
    return run


def run_plain(exps: list[Experiment], cluster: ClusterInfo, gpus: int) -> Run:
    def task(payload: dict[str, Any]) -> dict[str, Any]:
        from tasks.hygiene import run_payload

        return run_payload(payload, _placement())

    remote = ray.remote(
        num_gpus=1, num_cpus=1, max_calls=1, max_retries=0, runtime_env={"env_vars": {"OVERHEAD_PLAIN": "1"}}
    )(task)
    start = time.perf_counter()
    results = ray.get([remote.remote(e.model_dump(mode="json")) for e in exps])
    run = _in_task(results)
    run.wall_s = time.perf_counter() - start
    return run


@ray.remote(num_gpus=1, num_cpus=1)
class FloorActor:
    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        from tasks.hygiene import run_payload

        return run_payload(payload, _placement())


def run_floor(exps: list[Experiment], cluster: ClusterInfo, gpus: int) -> Run:
    start = time.perf_counter()
    actors = [FloorActor.remote() for _ in range(gpus)]  # type: ignore[attr-defined]
    todo = [e.model_dump(mode="json") for e in exps]
    calls = {actor.run.remote(todo.pop()): actor for actor in actors if todo}
    results = []
    while calls:
        (ready,), _ = ray.wait(list(calls), num_returns=1)
        actor = calls.pop(ready)
        results.append(ray.get(ready))
        if todo:
            calls[actor.run.remote(todo.pop())] = actor
    run = _in_task(results)
    run.wall_s = time.perf_counter() - start
    for actor in actors:
        ray.kill(actor)
    return run


def run_tune(exps: list[Experiment], cluster: ClusterInfo, gpus: int) -> Run:
    from ray import tune

    payloads = [e.model_dump(mode="json") for e in exps]

    def trainable(config: dict[str, Any]) -> None:
        from tasks.hygiene import run_payload

        result = run_payload(payloads[config["index"]], _placement())
        tune.report({k: result[k] for k in ("started_at", "finished_at", "status")})

    with tempfile.TemporaryDirectory() as tmp:
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"gpu": 1, "cpu": 1}),
            param_space={"index": tune.grid_search(list(range(len(exps))))},
            run_config=tune.RunConfig(storage_path=tmp, verbose=0),
        )
        start = time.perf_counter()
        grid = tuner.fit()
        wall = time.perf_counter() - start
    run = _in_task([r.metrics for r in grid])
    run.wall_s = wall
    return run


RUNNERS: dict[str, Callable[[list[Experiment], ClusterInfo, int], Run]] = {
    "compilebench": run_compilebench,
    "plain": run_plain,
    "floor": run_floor,
    "tune": run_tune,
}


def median_run(runs: list[Run], slots: int) -> Run:
    """The run whose overhead is the median (the lower middle one of an even count)."""
    return sorted(runs, key=lambda r: r.overhead_ms(slots))[(len(runs) - 1) // 2]


def table(runs: dict[str, Run], n: int, gpus: int) -> str:
    floor = runs.get("floor")
    rows = [
        "| variant | N | wall (s) | Σ in-task (s) | overhead per experiment (ms) | x floor |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, run in runs.items():
        ratio = f"{run.overhead_ms(gpus) / floor.overhead_ms(gpus):.2f}" if floor else "-"
        rows.append(
            f"| {LABELS[name]} | {len(run.in_task_s)} | {run.wall_s:.1f} | {sum(run.in_task_s):.1f} "
            f"| {run.overhead_ms(gpus):.0f} | {ratio} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="experiments per variant")
    parser.add_argument("--gpus", type=int, default=4, help="logical GPUs of the local Ray instance")
    parser.add_argument("--only", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=3, help=f"runs of {' and '.join(REPEATED)}, alternately")
    args = parser.parse_args()
    chosen = [v.strip() for v in args.only.split(",") if v.strip()]
    if unknown := [v for v in chosen if v not in RUNNERS]:
        parser.error(f"unknown variant(s): {', '.join(unknown)}")

    cluster = connect(num_gpus=args.gpus, num_cpus=args.gpus)
    exps = experiments(args.n)
    load = os.getloadavg()[0]
    rounds: dict[str, list[Run]] = {name: [] for name in chosen}
    order = [name for name in chosen if name not in REPEATED]
    order += [name for _ in range(args.rounds) for name in chosen if name in REPEATED]
    for name in order:
        print(f"{LABELS[name]}: {args.n} experiments...", file=sys.stderr, flush=True)
        run = RUNNERS[name](exps, cluster, args.gpus)
        rounds[name].append(run)
        if run.not_ok:
            print(f"  warning: {run.not_ok} result(s) not ok", file=sys.stderr)
    ray.shutdown()
    runs = {name: median_run(rs, args.gpus) for name, rs in rounds.items()}

    print(f"\n`python benchmarks/overhead.py {shlex.join(sys.argv[1:])}`".replace(" `", "`"))
    print(
        f"\n{args.n} experiments (seed.foo, backend eager, 3 repeats) on {args.gpus} logical GPUs; "
        f"{os.cpu_count()} cores, load average {load:.1f} at start; Ray {ray.__version__}, "
        f"Python {platform.python_version()}\n"
    )
    print(table(runs, args.n, args.gpus))
    for name in REPEATED:
        if len(rounds.get(name, [])) > 1:
            each = ", ".join(f"{r.overhead_ms(args.gpus):.0f}" for r in rounds[name])
            print(f"\n{LABELS[name]}, overhead per experiment in each round (ms): {each}", end="")
    print()
    if {"compilebench", "floor", "plain"} <= runs.keys():
        ours = runs["compilebench"].overhead_ms(args.gpus)
        vs_floor = ours / runs["floor"].overhead_ms(args.gpus)
        vs_plain = ours / runs["plain"].overhead_ms(args.gpus)
        verdict = "met" if vs_floor <= 2 and vs_plain <= 0.1 else "NOT met"
        print(f"\ntarget (≤ 2x floor, ≤ 0.1x plain tasks): {verdict}: {vs_floor:.2f}x floor, {vs_plain:.3f}x plain")


if __name__ == "__main__":
    main()
