"""Whole-process time of a sweep of 2-rank DDP experiments: compilebench against a plain torch.multiprocessing script.

    python benchmarks/distributed.py                  # N=10 experiments at world size 2, 3 rounds
    python benchmarks/distributed.py -n 4 --rounds 1  # quicker

Both ways run the same N experiments (``models.gpt``, tiny, ``distributed: {strategy: ddp, world_size: 2}``,
``phase: training``, eager against ``aot_eager``, each with a seed of its own) on this machine's CPU, a
core per rank over gloo, and each rank does its part by the same recipe (``tasks.distributed.RankWorker``:
build, wrap, eager steps, compile, compiled steps, check; the process reset after each):

- **compilebench**: ``compilebench run SPEC --out ...``: a local Ray instance, the gang (two rank actors in a
  ``STRICT_PACK`` placement group, joined once at rank 0's address, reused for every experiment), the
  journal, each experiment's outcomes combined into one result, the summary and the report;
- **plain script** (the floor, ``SPAWN_SCRIPT``): ``torch.multiprocessing.spawn`` of two processes, each a
  ``RankWorker`` joining one gloo group on a free port, running the N payloads in turn; then each
  experiment's outcomes combined (``tasks.distributed.combine``). No Ray, no journal, no report.
  ``OMP_NUM_THREADS=1``, as ``torchrun`` sets it for several processes on a node (and Ray sets it to
  an actor's ``num_cpus``): without it each rank's OpenMP pool spans every core, and on a loaded
  machine the floor ran 1.7x slower than compilebench.

Each is a process of its own timed from interpreter start to exit, as a user waits for it; they run
``--rounds`` times alternately (the machine's load moves) and the table shows each one's median round.
Goal: compilebench <= 1.2x the plain script at N=10.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.own_state import in_own_state  # noqa: E402
from tasks.models import Experiment  # noqa: E402

GOAL = 1.2  # compilebench's whole-process time over the plain script's, N=10, world size 2
GPT = {"batch": 4, "seq": 16, "layers": 2, "dim": 32, "heads": 2, "vocab": 64}  # tiny: 2 samples a rank
TIMING = {"warmup": 2, "repeats": 10}

SPAWN_SCRIPT = textwrap.dedent(
    """
    import json, os, sys

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for several processes a node (Ray: num_cpus)
    import torch.multiprocessing as mp


    def rank_main(rank, world, port, payloads, out_dir):
        from tasks.distributed import RankWorker

        worker = RankWorker({"cpus": 1}, rank, world)
        worker.join("127.0.0.1", port, timeout_s=1800)
        outcomes = [worker.run(payload) for payload in payloads]
        worker.leave()
        json.dump(outcomes, open(f"{out_dir}/rank{rank}.json", "w"))


    if __name__ == "__main__":
        payloads, world, out_dir = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
        from tasks.distributed.group import free_port

        mp.spawn(rank_main, args=(world, free_port(), payloads, out_dir), nprocs=world, join=True)
        from tasks.distributed import combine
        from tasks.models import Experiment

        outcomes = [json.load(open(f"{out_dir}/rank{r}.json")) for r in range(world)]
        results = [
            combine(Experiment.model_validate(p), [outcomes[r][i] for r in range(world)], 0.0, 0.0)
            for i, p in enumerate(payloads)
        ]
        json.dump([{"status": r.status} for r in results], open(f"{out_dir}/results.json", "w"))
    """
)


def spec_entries(n: int, world_size: int) -> list[dict[str, Any]]:
    """The experiments as a user writes them in a spec."""
    return [
        {
            "target": "models.gpt",
            "params": GPT,
            "phase": "training",
            "device": "cpu",
            "compile": {"backend": "aot_eager"},
            "timing": TIMING,
            "distributed": {"strategy": "ddp", "world_size": world_size},
            "seed": i,
        }
        for i in range(n)
    ]


def run_compilebench(n: int, world_size: int, tmp: Path) -> tuple[float, int]:
    """``compilebench run`` as a process of its own: its wall time and how many results are ok."""
    spec, out = tmp / "distributed.spec.json", tmp / "compilebench.json"
    spec.write_text(json.dumps({"name": "distributed-benchmark", "experiments": spec_entries(n, world_size)}))
    cli = shutil.which("compilebench", path=str(Path(sys.executable).parent))
    cmd = [cli] if cli else [sys.executable, "-m", "orchestrator"]
    cmd += ["run", str(spec), "--out", str(out), "--num-cpus", str(world_size), "--overwrite"]
    wall = _timed(cmd)
    return wall, sum(r["status"] == "ok" for r in json.loads(out.read_text())["results"])


def run_spawn(n: int, world_size: int, tmp: Path) -> tuple[float, int]:
    """The plain script as a process of its own: its wall time and how many results are ok."""
    script, payloads, out = tmp / "spawn.py", tmp / "payloads.json", tmp / "spawn"
    script.write_text(SPAWN_SCRIPT)
    payloads.write_text(
        json.dumps([Experiment.model_validate(e).model_dump(mode="json") for e in spec_entries(n, world_size)])
    )
    out.mkdir(exist_ok=True)
    wall = _timed([sys.executable, str(script), str(payloads), str(world_size), str(out)])
    return wall, sum(r["status"] == "ok" for r in json.loads((out / "results.json").read_text()))


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{cmd[0]} exited with {done.returncode}: {' / '.join(tail)}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="experiments in the sweep")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="each way this many times, alternately")
    args = parser.parse_args()
    in_own_state("distributed")
    walls: dict[str, list[float]] = {"compilebench": [], "plain script": []}
    oks: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="compilebench-distributed-") as tmp:
        for _ in range(args.rounds):
            for name, run in (("compilebench", run_compilebench), ("plain script", run_spawn)):
                wall, ok = run(args.n, args.world_size, Path(tmp))
                walls[name].append(wall)
                oks[name] = ok
    floor = statistics.median(walls["plain script"])
    print(f"$ python benchmarks/distributed.py -n {args.n} --world-size {args.world_size} --rounds {args.rounds}")
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    print("| way | N | world size | wall (s), median | rounds (s) | ok | x plain script |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for name, ws in walls.items():
        median = statistics.median(ws)
        rounds = ", ".join(f"{w:.1f}" for w in ws)
        print(
            f"| {name} | {args.n} | {args.world_size} | {median:.1f} | {rounds} | {oks[name]} | {median / floor:.2f}x |"
        )
    ratio = statistics.median(walls["compilebench"]) / floor
    print(f"\ngoal: compilebench <= {GOAL}x the plain script: {'met' if ratio <= GOAL else 'NOT met'} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
