"""Does a compile done once serve the next run? examples/models.yaml with compile.cache: shared, run twice.

    python benchmarks/compile_cache.py                      # models.gpt: 4 experiments (~15 min on 2 cores)
    python benchmarks/compile_cache.py --targets all        # every target of models.yaml (28 experiments)
    python benchmarks/compile_cache.py --targets blocks.mlp,models.gpt
    python benchmarks/compile_cache.py --quick              # one blocks.softmax experiment

The experiments of ``examples/models.yaml`` (the targets picked: the whole file runs 28 cold-start
compiles, each in a fresh process, three times over, which takes over an hour on a 2-core CPU) with
``compile.cache: shared`` and the correctness check off (the check compiles again, apart, and is not
what is measured here), through the real CLI (``compilebench run``, one subprocess per run):

1. **Local, twice**: ``compilebench run SPEC --compile-cache DIR``, each run on a new local Ray
   instance with a new, empty state directory (core locks and local compile caches): the first run
   finds DIR empty and stores; the second loads what the first stored.
2. **Across two nodes**: a ``ray.cluster_utils.Cluster`` of two nodes on this machine, each with its
   own state directory (``COMPILEBENCH_STATE_DIR`` in the node's environment, so every local cache is
   the node's own), and a new shared directory; ``compilebench run --address`` pinned to the first
   node (its ``accelerator_type``, through ``gpu_model``), then the same compiles pinned to the second.

Per target: the first run's compile time (the sum of ``compile_latency_s``, the measured compile's
first call, over the target's experiments), the second run's, and the fraction second/first (goal:
15% or less); beside them how the second run was served (experiments that loaded, FX graph and
AOTAutograd cache hits and misses) and the time the loads took (``load_s``, before the compile).
Every shared compile runs in a fresh process with empty local caches. On a CPU the artifacts do not
carry inductor's C++ kernels, which are built again: the C++ builds waited for (``compile_breakdown``'s
``async_compile.wait``) are shown for both runs, and the fraction without them is what the portable
artifacts save of the rest. Inductor's probe of the CPU's vector instructions runs in every fresh
process before the measured compile and is not part of it (``compile_cache.isa_probe_s``, shown apart).

3. **Where the time goes** (the first target, default params, inductor's default mode, fp32): the
   same compile in two fresh Python processes with empty local caches, at the workers' thread
   count, without compilebench around it: the first compiles and saves the mega-cache, the second
   loads it, then compiles. Each times inductor's probe of the CPU's vector instructions
   (``pick_vec_isa``, run first and alone), the first call of the compiled target (the rest of
   the compile), and within it the wall time during which a C++ build ran (``CppBuilder.build``;
   inductor runs several at once on its compile threads: the union of their spans).
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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "examples" / "models.yaml"
DEFAULT_TARGETS = ("models.gpt",)  # inference and a training step, fp32 and bf16: 4 experiments, 16 compiles
QUICK_EXPERIMENTS: list[dict[str, Any]] = [{"target": "blocks.softmax"}]
GOAL = 0.15  # the second run's compile time as a fraction of the first's
NODE_MODELS = ("NODE_A", "NODE_B")  # accelerator_type of the two nodes: what pins a run to one of them
NODE_CPUS = 2  # each node of the cluster: the cores a worker claims (both nodes share this machine)
RUN_TIMEOUT_S = 3600  # one compilebench run


@dataclass(frozen=True)
class Served:
    """One run's results of one target, as the figures need them."""

    experiments: int
    compile_s: float
    loaded: int
    fx_hit: int
    fx_miss: int
    ag_hit: int
    ag_miss: int
    load_s: float
    stored_bytes: int
    failed: int
    cpp_s: float  # C++ builds waited for during the measured compiles (compile_breakdown's async_compile.wait)
    probe_s: float  # inductor's CPU probe, run before each measured compile and not counted in it


def spec_of(targets: Sequence[str] | None, quick: bool, gpu_model: str | None = None) -> dict[str, Any]:
    """``models.yaml`` reduced to ``targets`` (None: all), every compile shared and unchecked; pinned to
    the nodes of ``gpu_model`` when given."""
    source = yaml.safe_load(MODELS.read_text())
    entries = QUICK_EXPERIMENTS if quick else source["experiments"]
    if targets is not None:
        entries = [e for e in entries if e["target"] in targets]
    defaults = {**source.get("defaults", {}), "compile": {"cache": "shared"}, "check": {"enabled": False}}
    if gpu_model is not None:
        defaults["gpu_model"] = gpu_model
    return {"name": f"{source['name']}-shared", "defaults": defaults, "experiments": entries}


def compilebench(args: list[str], env: dict[str, str]) -> None:
    """``compilebench ARGS`` in a subprocess (the console script, else ``python -m orchestrator``)."""
    script = shutil.which("compilebench", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "orchestrator"]
    proc = subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if proc.returncode != 0:
        raise SystemExit(f"compilebench {shlex.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")


def per_target(report: Path) -> dict[str, Served]:
    """Each target's results in a report, summed: compile time, loads, cache hits and misses."""
    results = json.loads(report.read_text())["results"]
    out: dict[str, Served] = {}
    for target in dict.fromkeys(r["target"] for r in results):
        mine = [r for r in results if r["target"] == target]
        caches = [r.get("compile_cache") or {} for r in mine]
        out[target] = Served(
            experiments=len(mine),
            compile_s=sum(r.get("compile_latency_s") or 0.0 for r in mine),
            loaded=sum(bool(c.get("loaded")) for c in caches),
            fx_hit=sum(c.get("fxgraph_hit", 0) for c in caches),
            fx_miss=sum(c.get("fxgraph_miss", 0) for c in caches),
            ag_hit=sum(c.get("autograd_hit", 0) for c in caches),
            ag_miss=sum(c.get("autograd_miss", 0) for c in caches),
            load_s=sum(c.get("load_s") or 0.0 for c in caches),
            stored_bytes=sum(c.get("stored_bytes", 0) for c in caches),
            failed=sum(r["status"] != "ok" for r in mine),
            cpp_s=sum((r.get("compile_breakdown") or {}).get("async_compile.wait", 0.0) for r in mine),
            probe_s=sum(c.get("isa_probe_s") or 0.0 for c in caches),
        )
    return out


def not_ok(report: Path, run: str) -> list[str]:
    """One line per result of ``report`` that is not ok: where, which experiment, its status and error."""
    lines = []
    for r in json.loads(report.read_text())["results"]:
        if r["status"] != "ok":
            error = r.get("error") or {}
            message = (error.get("message") or "").strip().splitlines()[:1]
            lines.append(
                f"{run}: {r['target']} {r['precision']} {r['phase']} ({r['experiment_id']}): {r['status']}"
                + (f", {error.get('type')}: {message[0] if message else ''}" if error else "")
            )
    return lines


def table(first: dict[str, Served], second: dict[str, Served]) -> list[str]:
    """The markdown table: per target and in all, first and second compile time, their fraction, the
    same without the C++ builds (what torch's portable artifacts do not carry on a CPU), how the
    second run was served, and the CPU probe run apart."""
    rows = [
        "| target | experiments | first run compile s | second run compile s | second / first | goal | "
        "C++ builds s, first / second | second / first without them | second run: loaded | FX graph hit/miss | "
        "AOTAutograd hit/miss | load s | CPU probe s, apart |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for target in [*first, "all"]:
        a = first[target] if target != "all" else _total(first.values())
        b = second.get(target) if target != "all" else _total(second.values())
        if b is None:
            rows.append(f"| {target} | {a.experiments} | {a.compile_s:.1f} |" + " - |" * 10)
            continue
        fraction = b.compile_s / a.compile_s if a.compile_s else float("nan")
        rest = (b.compile_s - b.cpp_s) / (a.compile_s - a.cpp_s) if a.compile_s > a.cpp_s else float("nan")
        met = "met" if fraction <= GOAL else "NOT met"
        failed = f" ({a.failed + b.failed} not ok)" if a.failed or b.failed else ""
        name = f"**{target}**" if target == "all" else target
        rows.append(
            f"| {name}{failed} | {a.experiments} | {a.compile_s:.1f} | {b.compile_s:.1f} | {fraction:.0%} | {met} | "
            f"{a.cpp_s:.1f} / {b.cpp_s:.1f} | {rest:.0%} | {b.loaded}/{b.experiments} | {b.fx_hit}/{b.fx_miss} | "
            f"{b.ag_hit}/{b.ag_miss} | {b.load_s:.1f} | {a.probe_s:.1f} / {b.probe_s:.1f} |"
        )
    return rows


def _total(served: Any) -> Served:
    items = list(served)
    return Served(*(sum(getattr(s, f) for s in items) for f in Served.__dataclass_fields__))


Runs = tuple[dict[str, Served], dict[str, Served], list[str]]  # first, second, what was not ok in either


def local_runs(spec: Path, tmp: Path, env: dict[str, str]) -> Runs:
    """The spec run twice through the CLI on local Ray instances, each with empty local caches of its own."""
    shared = tmp / "local-shared"
    served, failed = [], []
    for n in (1, 2):
        report = tmp / f"local-{n}.json"
        state = tempfile.mkdtemp(prefix=f"state-{n}-", dir=tmp)
        _say(f"local run {n}: compilebench run --compile-cache {shared} (local state {state})")
        compilebench(
            ["run", str(spec), "--out", str(report), "--compile-cache", str(shared)],
            {**env, "COMPILEBENCH_STATE_DIR": state},
        )
        served.append(per_target(report))
        failed += not_ok(report, f"local run {n}")
    return served[0], served[1], failed


def cluster_runs(targets: Sequence[str] | None, quick: bool, tmp: Path, env: dict[str, str]) -> Runs:
    """Two nodes with state directories of their own; the compiles pinned to the first, then to the second."""
    import logging

    import ray
    from ray.cluster_utils import Cluster

    shared = tmp / "cluster-shared"
    from orchestrator.execution.cluster import LOCAL_SYSTEM_CONFIG

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": LOCAL_SYSTEM_CONFIG})
    served, failed = [], []
    try:
        for model in NODE_MODELS:
            state = tmp / f"node-{model}"
            cluster.add_node(
                num_cpus=NODE_CPUS,
                num_gpus=1,
                resources={f"accelerator_type:{model}": 1},
                env_vars={"COMPILEBENCH_STATE_DIR": str(state), "RAY_AUTH_MODE": env["RAY_AUTH_MODE"]},
            )
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        cluster.wait_for_nodes()
        ray.shutdown()  # the CLI joins the cluster itself
        for model in NODE_MODELS:
            spec = tmp / f"spec-{model}.json"
            spec.write_text(json.dumps(spec_of(targets, quick, gpu_model=model)))
            report = tmp / f"cluster-{model}.json"
            _say(f"cluster: compilebench run --address {cluster.address} pinned to node {model}")
            compilebench(
                ["run", str(spec), "--out", str(report), "--address", cluster.address, "--compile-cache", str(shared)],
                env,
            )
            served.append(per_target(report))
            failed += not_ok(report, f"cluster, node {model}")
    finally:
        cluster.shutdown()
    return served[0], served[1], failed


# A compile in a fresh process with an empty local cache, timed in parts; argv: target, threads, blob path, and the
# process's own empty cache directory.
BREAKDOWN = """
import json, os, sys, time
os.environ["TORCHINDUCTOR_CACHE_DIR"] = sys.argv[4]
import torch
from torch._dynamo.utils import counters
from torch._inductor import cpp_builder
from torch._inductor.cpu_vec_isa import pick_vec_isa
from tasks.targets import build
target, threads, blob = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(threads)
loaded = os.path.exists(blob) and torch.compiler.load_cache_artifacts(open(blob, "rb").read()) is not None
started = time.perf_counter()
pick_vec_isa()
isa_s = time.perf_counter() - started
spans = []  # (start, end) of each C++ build; inductor runs several at once on its compile threads
plain = cpp_builder.CppBuilder.build
def timed(self, *args, **kwargs):
    started = time.perf_counter()
    try:
        return plain(self, *args, **kwargs)
    finally:
        spans.append((started, time.perf_counter()))
cpp_builder.CppBuilder.build = timed
work = build(target, torch.device("cpu"), {})
compiled = torch.compile(work.fn)
counters.clear()
started = time.perf_counter()
compiled(*work.inputs)
compile_s = time.perf_counter() - started
if not loaded:
    open(blob, "wb").write(torch.compiler.save_cache_artifacts()[0])
hits = counters["inductor"]["fxgraph_cache_hit"]
building, end = 0.0, 0.0  # wall time during which some build ran: the union of the spans
for a, b in sorted(spans):
    building += max(0.0, b - max(a, end))
    end = max(end, b)
print(json.dumps({"loaded": loaded, "isa_s": isa_s, "compile_s": compile_s, "cpp_build_s": building, "hits": hits}))
"""


def breakdown(target: str, threads: int, tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """``BREAKDOWN`` twice in fresh processes: a miss that saves the mega-cache, then a load and a hit."""
    blob = tmp / "breakdown.bin"
    runs = []
    for n in range(2):
        cache = tmp / f"breakdown-{target}-{n}"  # empty: the caller's temporary folder goes with it
        cache.mkdir()
        proc = subprocess.run(
            [sys.executable, "-c", BREAKDOWN, target, str(threads), str(blob), str(cache)],
            cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise SystemExit(f"the breakdown of {target} failed:\n{proc.stderr[-4000:]}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return runs


def breakdown_table(runs: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| process | FX graph hits | ISA probe s | first call s | of which C++ builds s | the rest s | total s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        name = "second: loads the mega-cache" if run["loaded"] else "first: compiles, saves the mega-cache"
        rest = run["compile_s"] - run["cpp_build_s"]
        rows.append(
            f"| {name} | {run['hits']} | {run['isa_s']:.1f} | {run['compile_s']:.1f} | {run['cpp_build_s']:.1f} | "
            f"{rest:.1f} | {run['isa_s'] + run['compile_s']:.1f} |"
        )
    return rows


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help=f"comma-separated targets of models.yaml, or 'all' (default: {','.join(DEFAULT_TARGETS)})",
    )
    parser.add_argument("--quick", action="store_true", help="one blocks.softmax experiment, both parts")
    parser.add_argument("--no-cluster", action="store_true", help="only the two local runs")
    args = parser.parse_args()
    targets = None if args.targets == "all" or args.quick else [t.strip() for t in args.targets.split(",")]
    os.chdir(ROOT)  # Ray's local workers start in the driver's directory
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster needs no token
    env = dict(os.environ)
    load = os.getloadavg()[0]
    started = time.time()

    import ray
    import torch

    with tempfile.TemporaryDirectory(prefix="compilebench-compile-cache-") as tmp_name:
        tmp = Path(tmp_name)
        spec = tmp / "spec.json"
        spec.write_text(json.dumps(spec_of(targets, args.quick)))
        local = local_runs(spec, tmp, env)
        cluster = None if args.no_cluster else cluster_runs(targets, args.quick, tmp, env)
        first_target = spec_of(targets, args.quick)["experiments"][0]["target"]
        _say(f"breakdown: {first_target} in two fresh processes")
        parts = breakdown(first_target, min(NODE_CPUS, os.cpu_count() or 1), tmp, env)

    print(f"\n`python benchmarks/compile_cache.py {shlex.join(sys.argv[1:])}`".replace(" `", "`"))
    picked = "blocks.softmax (one experiment)" if args.quick else ", ".join(targets) if targets else "all"
    print(
        f"\nexamples/models.yaml, targets: {picked}; compile.cache: shared, check off. {os.cpu_count()} cores, "
        f"load average {load:.1f} at start; torch {torch.__version__}, Ray {ray.__version__}, "
        f"Python {platform.python_version()}; {time.time() - started:.0f} s in all.\n"
    )
    print(
        "Local: two `compilebench run --compile-cache DIR`, each on a new local Ray instance with empty local caches\n"
    )
    print("\n".join([*table(local[0], local[1]), *(f"\nnot ok: {line}" for line in local[2])]))
    if cluster is not None:
        print(
            f"\nTwo nodes of a ray.cluster_utils.Cluster ({NODE_CPUS} CPUs and a state directory each): first run "
            "pinned to one node, second to the other, one shared directory\n"
        )
        print("\n".join([*table(cluster[0], cluster[1]), *(f"\nnot ok: {line}" for line in cluster[2])]))
    print(f"\ngoal: the second run's compile time at most {GOAL:.0%} of the first's, per target")
    print(
        f"\nWhere the time goes: {first_target} (default params, inductor, fp32) compiled in a fresh process with "
        "an empty local cache, twice, without compilebench around it\n"
    )
    print("\n".join(breakdown_table(parts)))


if __name__ == "__main__":
    main()
