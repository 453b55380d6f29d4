"""Orchestration overhead per experiment: compilebench against what a Ray user would write.

    python benchmarks/overhead.py                     # N=40 on G=4 logical GPUs (about 25 minutes on 2 cores)
    python benchmarks/overhead.py --quick             # N=8, compile workloads N=4, one round
    python benchmarks/overhead.py --workloads trivial --only compilebench,floor

Four ways to run the same sweep on a local Ray instance with G logical GPUs and G CPUs:

- **compilebench**: long-lived workers, one per GPU, reset between experiments; spec loading and
  validation, planning, a journal, the summary and the report;
- **plain Ray tasks**: one ``@ray.remote(num_gpus=1)`` task per experiment in a process of its
  own (``max_calls=1`` and a ``runtime_env`` of their own, as compilebench did before);
- **actor floor**: one ``@ray.remote(num_gpus=1)`` actor per GPU running experiments sent in
  turn by a bare ``ray.wait`` loop: no reset, no journal, no validation, no report;
- **Ray Tune**: one trial per experiment, ``tune.with_resources(trainable, {"gpu": 1})``
  (needs ``pip install -e '.[bench]'``; skipped, and said so, without it).

Every way runs the same procedure in-task (``tasks.procedure.run_experiment``), whose result
carries its own ``started_at``/``finished_at``. Three workloads: ``trivial`` (``seed.foo``,
``backend: eager``, 3 repeats), ``inductor`` (the same with ``backend: inductor``: a real
compile, and compilebench's reset after it) and ``cold`` (``compile.cache: cold``: each
experiment in a fresh process with empty compile caches; the floor's actor starts that process
as compilebench's worker does, a plain task is one).

**Whole processes** (the first table): each way is a process of its own, timed from
interpreter start to exit, as a user waits for it: ``compilebench run SPEC --out ...``, and a
bare script for each peer (``ray.init`` to ``ray.shutdown``, written out below as
``FLOOR_SCRIPT``, ``PLAIN_SCRIPT`` and ``TUNE_SCRIPT``). **In process** (the second table, the
trivial workload): the peers and ``orchestrator.execution.runner.run_experiments`` called from this
process on one Ray instance, timed from after ``ray.init``: the marginal cost, without the
fixed one.

Overhead per experiment = (wall - sum of in-task time / G) / N: what the sweep cost beyond its
experiments' own time, spread over its G concurrent slots. Targets at N=40, G=4, whole
processes, trivial workload: compilebench <= 1.3x the actor floor and <= 0.15x plain tasks.

On a shared machine the load moves while the sweeps run, so compilebench and the floor run
``--rounds`` times, alternately (compilebench, floor, compilebench, ...), and the tables show
each one's median round (every round is printed below them); plain tasks and Tune, minutes per
run, run once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402

from benchmarks.own_state import in_own_state  # noqa: E402
from orchestrator.execution.cluster import ClusterInfo, connect  # noqa: E402
from tasks.models import Experiment  # noqa: E402

VARIANTS = ("compilebench", "plain", "floor", "tune")
REPEATED = ("compilebench", "floor")  # cheap enough to run --rounds times, alternately
WORKLOADS = ("trivial", "inductor", "cold")
WORKLOAD_LABELS = {
    "trivial": "seed.foo, backend eager, 3 repeats",
    "inductor": "seed.foo, backend inductor (compile and reset), 3 repeats",
    "cold": "seed.foo, inductor, cache: cold (a fresh process each), 3 repeats",
}
TARGET_VS_FLOOR, TARGET_VS_PLAIN = 1.3, 0.15  # whole processes, trivial workload, N=40
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


def spec_entries(workload: str, n: int) -> list[dict[str, Any]]:
    """The experiments of a workload as a user writes them in a spec."""
    compile_cfg = {
        "trivial": {"backend": "eager"},
        "inductor": {"backend": "inductor"},
        "cold": {"backend": "inductor", "cache": "cold"},
    }[workload]
    return [{"target": "seed.foo", "compile": compile_cfg, "timing": {"repeats": 3}, "seed": i} for i in range(n)]


def experiments(n: int, workload: str = "trivial") -> list[Experiment]:
    return [Experiment.model_validate(entry) for entry in spec_entries(workload, n)]


def _placement() -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    gpu_ids = [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]
    return {"node_id": ctx.get_node_id(), "gpu_ids": gpu_ids, "cpus": 1, "gpu_model": None}


def _in_task(results: list[dict[str, Any]]) -> Run:
    return Run(0.0, [r["finished_at"] - r["started_at"] for r in results], sum(r["status"] != "ok" for r in results))


def run_compilebench(exps: list[Experiment], cluster: ClusterInfo, gpus: int) -> Run:
    from orchestrator.execution.runner import run_experiments
    from orchestrator.store.journal import Journal

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        with Journal(Path(tmp) / "overhead.journal.jsonl") as journal:
            results = run_experiments(exps, cluster, journal=journal)
        wall = time.perf_counter() - start
    run = _in_task([r.model_dump() for r in results])
    run.wall_s = wall
    return run


# The peers as a user would write them. Each body runs ``payloads`` (the experiments as plain data)
# on ``gpus`` logical GPUs through ``placement()`` and hands its results to ``save``: as a script of
# its own (the preamble reads them from argv and starts Ray; ``ray.shutdown()`` ends it), or in this
# process (``run_peer``), on its Ray instance.
_PEER_PREAMBLE = """
    import json, sys
    import ray

    payloads, gpus, out = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
    ray.init(address="local", num_gpus=gpus, num_cpus=gpus, include_dashboard=False, log_to_driver=False)


    def placement():
        ctx = ray.get_runtime_context()
        gpu_ids = [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]
        return {"node_id": ctx.get_node_id(), "gpu_ids": gpu_ids, "cpus": 1, "gpu_model": None}


    def save(results):
        keep = ("started_at", "finished_at", "status")
        json.dump([{k: r.get(k) for k in keep} for r in results], open(out, "w"))
"""
FLOOR_BODY = """

    @ray.remote(num_gpus=1, num_cpus=1)
    class Runner:
        def run(self, payload):
            from tasks.worker import run_in_fresh_process, run_payload

            if payload["compile"]["cache"] == "cold":  # a fresh process, as compilebench's worker starts one
                return run_in_fresh_process(payload, placement())
            return run_payload(payload, placement())


    actors = [Runner.remote() for _ in range(gpus)]
    todo, calls, results = list(payloads), {}, []
    for actor in actors:
        if todo:
            calls[actor.run.remote(todo.pop())] = actor
    while calls:
        (ready,), _ = ray.wait(list(calls), num_returns=1)
        actor = calls.pop(ready)
        results.append(ray.get(ready))
        if todo:
            calls[actor.run.remote(todo.pop())] = actor
    save(results)
"""
PLAIN_BODY = """

    @ray.remote(num_gpus=1, num_cpus=1, max_calls=1, max_retries=0, runtime_env={"env_vars": {"PLAIN": "1"}})
    def run(payload):
        from tasks.worker import run_payload

        return run_payload(payload, placement())  # a process of its own: fresh for cache: cold too


    save(ray.get([run.remote(p) for p in payloads]))
"""
TUNE_BODY = """
    import tempfile

    from ray import tune


    def trainable(config):
        from tasks.worker import run_payload

        result = run_payload(payloads[config["index"]], placement())
        tune.report({k: result[k] for k in ("started_at", "finished_at", "status")})


    with tempfile.TemporaryDirectory() as tmp:
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"gpu": 1, "cpu": 1}),
            param_space={"index": tune.grid_search(list(range(len(payloads))))},
            run_config=tune.RunConfig(storage_path=tmp, verbose=0),
        )
        save([r.metrics for r in tuner.fit()])
"""
PEER_BODIES = {"floor": FLOOR_BODY, "plain": PLAIN_BODY, "tune": TUNE_BODY}
PEER_SCRIPTS = {
    name: textwrap.dedent(_PEER_PREAMBLE) + textwrap.dedent(body) + "ray.shutdown()\n"
    for name, body in PEER_BODIES.items()
}
FLOOR_SCRIPT, PLAIN_SCRIPT, TUNE_SCRIPT = (PEER_SCRIPTS[name] for name in ("floor", "plain", "tune"))


def run_peer(name: str) -> Callable[[list[Experiment], ClusterInfo, int], Run]:
    """A peer's body run in this process, on its Ray instance, timed from its first line to its
    ``save``; the actors it started are killed after, so that the next run finds the GPUs free."""

    def runner(exps: list[Experiment], cluster: ClusterInfo, gpus: int) -> Run:
        saved: list[dict[str, Any]] = []
        scope: dict[str, Any] = {
            "__name__": f"overhead_{name}",  # not importable: Ray ships its functions by value
            "ray": ray,
            "payloads": [e.model_dump(mode="json") for e in exps],
            "gpus": gpus,
            "placement": _placement,
            "save": saved.extend,
        }
        code = compile(textwrap.dedent(PEER_BODIES[name]), f"<{name}>", "exec")
        start = time.perf_counter()
        exec(code, scope)
        wall = time.perf_counter() - start
        for actor in scope.get("actors", ()):
            ray.kill(actor)
        run = _in_task(saved)
        run.wall_s = wall
        return run

    return runner


RUNNERS: dict[str, Callable[[list[Experiment], ClusterInfo, int], Run]] = {
    "compilebench": run_compilebench,
    **{name: run_peer(name) for name in ("plain", "floor", "tune")},
}


def tune_installed() -> bool:
    """Whether ``ray.tune`` imports: it is there without ``ray[tune]``'s dependencies, and refuses then."""
    done = subprocess.run([sys.executable, "-c", "import ray.tune"], capture_output=True, check=False)
    return done.returncode == 0


def whole_process(variant: str, workload: str, n: int, gpus: int, tmp: Path) -> Run:
    """One sweep as a process of its own, timed from its start to its exit; in-task times from what it wrote."""
    entries = spec_entries(workload, n)
    out = tmp / f"{variant}-{workload}.json"
    out.unlink(missing_ok=True)
    if variant == "compilebench":
        spec = tmp / f"{workload}.spec.json"
        spec.write_text(json.dumps({"name": f"overhead-{workload}", "experiments": entries}))
        cli = shutil.which("compilebench", path=str(Path(sys.executable).parent))
        cmd = [cli] if cli else [sys.executable, "-m", "orchestrator"]
        cmd += ["run", str(spec), "--out", str(out), "--num-gpus", str(gpus), "--num-cpus", str(gpus), "--overwrite"]
    else:
        script, payloads = tmp / f"{variant}.py", tmp / f"{workload}.payloads.json"
        script.write_text(PEER_SCRIPTS[variant])
        payloads.write_text(json.dumps([Experiment.model_validate(e).model_dump(mode="json") for e in entries]))
        cmd = [sys.executable, str(script), str(payloads), str(gpus), str(out)]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{variant} ({workload}) exited with {done.returncode}: {' / '.join(tail)}")
    written = json.loads(out.read_text())
    run = _in_task(written["results"] if variant == "compilebench" else written)
    run.wall_s = wall
    return run


def median_run(runs: list[Run], slots: int) -> Run:
    """The run whose overhead is the median (the lower middle one of an even count)."""
    return sorted(runs, key=lambda r: r.overhead_ms(slots))[(len(runs) - 1) // 2]


def table(runs: dict[str, Run], gpus: int, workload: str | None = None) -> str:
    """One row per way: wall, in-task time, overhead per experiment, and both against the floor's."""
    floor = runs.get("floor")
    first = "| workload " if workload else ""
    rows = [
        f"{first}| variant | N | wall (s) | Σ in-task (s) | overhead per experiment (ms) | x floor | wall x floor |",
        ("|---" if workload else "") + "|---|" + "---:|" * 6,
    ]
    for name, run in runs.items():
        ratio = f"{run.overhead_ms(gpus) / floor.overhead_ms(gpus):.2f}" if floor else "-"
        wall_ratio = f"{run.wall_s / floor.wall_s:.2f}" if floor else "-"
        cell = f"| {workload} " if workload else ""
        rows.append(
            f"{cell}| {LABELS[name]} | {len(run.in_task_s)} | {run.wall_s:.1f} | {sum(run.in_task_s):.1f} "
            f"| {run.overhead_ms(gpus):.0f} | {ratio} | {wall_ratio} |"
        )
    return "\n".join(rows)


def each_round(rounds: dict[str, list[Run]], gpus: int) -> str:
    lines = []
    for name in REPEATED:
        if len(rounds.get(name, [])) > 1:
            each = ", ".join(f"{r.overhead_ms(gpus):.0f}" for r in rounds[name])
            lines.append(f"{LABELS[name]}, overhead per experiment in each round (ms): {each}")
    return "\n".join(lines)


def alternate(chosen: list[str], rounds: int) -> list[str]:
    """The others once, then the repeated ways in turn, ``rounds`` times."""
    order = [name for name in chosen if name not in REPEATED]
    return order + [name for _ in range(rounds) for name in chosen if name in REPEATED]


def main() -> None:
    in_own_state("overhead")
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="experiments per sweep, trivial workload")
    parser.add_argument("--n-compile", type=int, default=12, help="experiments per sweep, inductor and cold workloads")
    parser.add_argument("--gpus", type=int, default=4, help="logical GPUs of the local Ray instance")
    parser.add_argument("--only", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"whole processes: of {', '.join(WORKLOADS)}")
    parser.add_argument("--rounds", type=int, default=3, help=f"runs of {' and '.join(REPEATED)}, alternately")
    parser.add_argument("--no-in-process", action="store_true", help="skip the in-process table")
    parser.add_argument("--quick", action="store_true", help="N=8, compile workloads N=4, one round")
    args = parser.parse_args()
    if args.quick:
        args.n, args.n_compile, args.rounds = 8, 4, 1
    chosen = [v.strip() for v in args.only.split(",") if v.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if unknown := [v for v in chosen if v not in RUNNERS] + [w for w in workloads if w not in WORKLOADS]:
        parser.error(f"unknown variant(s) or workload(s): {', '.join(unknown)}")
    skipped = []
    if "tune" in chosen and not tune_installed():
        chosen.remove("tune")
        skipped.append("Ray Tune: skipped, ray[tune] is not installed (pip install -e '.[bench]')")
    load = os.getloadavg()[0]

    whole: dict[str, dict[str, Run]] = {}
    whole_rounds: dict[str, dict[str, list[Run]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workload in workloads:
            n = args.n if workload == "trivial" else args.n_compile
            rounds: dict[str, list[Run]] = {name: [] for name in chosen}
            for name in alternate(chosen, args.rounds):
                print(f"whole process, {workload}: {LABELS[name]}, {n} experiments...", file=sys.stderr, flush=True)
                run = whole_process(name, workload, n, args.gpus, Path(tmp))
                rounds[name].append(run)
                if run.not_ok:
                    print(f"  warning: {run.not_ok} result(s) not ok", file=sys.stderr)
            whole_rounds[workload] = rounds
            whole[workload] = {name: median_run(rs, args.gpus) for name, rs in rounds.items()}

    in_process: dict[str, Run] = {}
    in_rounds: dict[str, list[Run]] = {}
    if not args.no_in_process:
        cluster = connect(num_gpus=args.gpus, num_cpus=args.gpus)
        exps = experiments(args.n)
        in_rounds = {name: [] for name in chosen}
        for name in alternate(chosen, args.rounds):
            print(f"in process: {LABELS[name]}: {args.n} experiments...", file=sys.stderr, flush=True)
            run = RUNNERS[name](exps, cluster, args.gpus)
            in_rounds[name].append(run)
            if run.not_ok:
                print(f"  warning: {run.not_ok} result(s) not ok", file=sys.stderr)
        ray.shutdown()
        in_process = {name: median_run(rs, args.gpus) for name, rs in in_rounds.items()}

    print(f"\n`python benchmarks/overhead.py {shlex.join(sys.argv[1:])}`".replace(" `", "`"))
    print(
        f"\n{args.gpus} logical GPUs; {os.cpu_count()} cores, load average {load:.1f} at start; Ray {ray.__version__}, "
        f"Python {platform.python_version()}. Workloads: " + "; ".join(f"{w}: {WORKLOAD_LABELS[w]}" for w in workloads)
    )
    for line in skipped:
        print(f"\n{line}")
    if whole:
        print("\n### Whole processes: interpreter start to exit\n")
        lines = [table(runs, args.gpus, workload) for workload, runs in whole.items()]
        header, rows = lines[0].splitlines()[:2], [row for text in lines for row in text.splitlines()[2:]]
        print("\n".join([*header, *rows]))
        for workload, rounds in whole_rounds.items():
            if text := each_round(rounds, args.gpus):
                print(f"\n{workload}: {text}", end="")
        print()
        trivial = whole.get("trivial", {})
        if {"compilebench", "floor", "plain"} <= trivial.keys():
            ours = trivial["compilebench"].overhead_ms(args.gpus)
            vs_floor = ours / trivial["floor"].overhead_ms(args.gpus)
            vs_plain = ours / trivial["plain"].overhead_ms(args.gpus)
            met = vs_floor <= TARGET_VS_FLOOR and vs_plain <= TARGET_VS_PLAIN
            print(
                f"\ntarget, whole processes, trivial, N={args.n} (<= {TARGET_VS_FLOOR}x floor, <= {TARGET_VS_PLAIN}x "
                f"plain tasks): {'met' if met else 'NOT met'}: {vs_floor:.2f}x floor, {vs_plain:.3f}x plain"
            )
    if in_process:
        print(f"\n### In process, from after ray.init: {WORKLOAD_LABELS['trivial']}\n")
        print(table(in_process, args.gpus))
        if text := each_round(in_rounds, args.gpus):
            print(f"\n{text}")


if __name__ == "__main__":
    main()
