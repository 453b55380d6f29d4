"""What the test command's set-up costs, and what it costs the suite to write the bytecode it skipped.

    python benchmarks/setup_cost.py [--suite]

Two new virtual environments, each in a temporary clone of this repository, set up as the README's test command
does, once compiling every installed module's bytecode at install (pip's default and uv's ``--compile-bytecode``)
and once compiling none (``pip install --no-compile``, uv without the flag: the test command). Each step is timed,
and the modules installed are counted. Package downloads come from uv's and pip's caches where they hold them, so a
first run on a new machine takes longer in both variants alike.

``--suite`` then runs the test suite as the test command does, in the environment with no bytecode, and counts what
its processes compile as they import (an audit hook on ``compile``, installed in that environment only): every
module compiled, as many times as processes compiled it before another had written its bytecode. The cost is the
CPU time this process takes to compile those sources again, once for each time the suite did.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOOK = """import os, sys
def _compiled(event, args):
    if event == "compile" and len(args) > 1 and isinstance(args[1], str) and args[1].endswith(".py"):
        with open(os.path.join({log!r}, str(os.getpid())), "a") as f:
            f.write(args[1] + "\\n")
sys.addaudithook(_compiled)
"""


def timed(cmd: str, cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["bash", "-c", cmd], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3*/site-packages")
    return found


def set_up(repo: Path, venv: str, compile_bytecode: bool) -> dict[str, float]:
    activate = f". {venv}/bin/activate && "
    return {
        "venv": timed(f"python3 -m venv {venv}", repo),
        "pip": timed(activate + f"pip install -q {'' if compile_bytecode else '--no-compile '}torch==2.13.0 uv", repo),
        "uv": timed(
            activate + f"uv pip install -q {'--compile-bytecode ' if compile_bytecode else ''}-e '.[dev,docs]'", repo
        ),
    }


def counts(venv: Path) -> tuple[int, int]:
    modules = list(site_packages(venv).rglob("*.py"))
    compiled = [p for p in modules if any(p.parent.glob(f"__pycache__/{p.stem}.cpython-*.pyc"))]
    return len(modules), len(compiled)


def suite(repo: Path, venv: Path, log: Path) -> None:
    log.mkdir()
    site = site_packages(venv)
    (site / "zz_count_compiles.py").write_text(HOOK.format(log=str(log)))
    (site / "zz_count_compiles.pth").write_text("import zz_count_compiles\n")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "COMPILEBENCH_SITE": "site", "CI": "1"}
    bin_ = venv / "bin"
    started = time.perf_counter()
    modules = ["orchestrator", "tasks", "benchmarks", "tests"]
    subprocess.run([bin_ / "python", "-m", "compileall", "-q", *modules], cwd=repo, env=env, check=True)
    subprocess.run([bin_ / "mkdocs", "build", "--strict", "-q"], cwd=repo, env=env, check=True)
    done = subprocess.run(
        [
            bin_ / "python",
            "-m",
            "pytest",
            "-n",
            "3",
            "--dist",
            "loadfile",
            "--no-loadscope-reorder",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    print(f"suite: {done.stdout.strip().splitlines()[-1]} ({wall:.0f} s with the hook)")
    for line in done.stdout.splitlines():
        if line.startswith(("FAILED", "ERROR")):
            print("  " + line)
    times: collections.Counter[str] = collections.Counter()
    for per_process in log.iterdir():
        times.update(per_process.read_text().splitlines())
    cost: dict[str, float] = {}
    for path in times:
        try:
            source = Path(path).read_bytes()
            started_cpu = time.process_time()
            compile(source, path, "exec", dont_inherit=True)
            cost[path] = time.process_time() - started_cpu
        except (OSError, SyntaxError):  # a test's own broken or deleted file
            continue
    once, every = sum(cost.values()), sum(cost[p] * times[p] for p in cost)
    by_package: dict[str, float] = collections.defaultdict(float)
    for path in cost:
        by_package[path.split("site-packages/")[1].split("/")[0] if "site-packages/" in path else "(project)"] += (
            cost[path] * times[path]
        )
    print(
        f"compiled in the suite's processes: {len(cost):,} modules, {sum(times[p] for p in cost):,} compilations "
        f"by {len(list(log.iterdir()))} processes: {every:.1f} s of CPU ({once:.1f} s had each been compiled once)"
    )
    print(
        "  most: " + ", ".join(f"{name} {s:.1f} s" for name, s in sorted(by_package.items(), key=lambda kv: -kv[1])[:6])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--suite", action="store_true", help="also run the suite without bytecode and count its compiles"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="setup-cost-"))
    try:
        rows = {}
        for name, flag in (("compiled", True), ("none", False)):  # a clone each: its venv is .venv, as the README's
            repo = tmp / name
            subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
            steps = set_up(repo, ".venv", flag)
            rows[name] = (steps, *counts(repo / ".venv"))
        print(f"{'bytecode':10} {'venv s':>7} {'pip s':>7} {'uv s':>7} {'set-up s':>9} {'modules':>8} {'compiled':>9}")
        for name, (s, modules, compiled) in rows.items():
            total = s["venv"] + s["pip"] + s["uv"]
            print(f"{name:10} {s['venv']:7.1f} {s['pip']:7.1f} {s['uv']:7.1f} {total:9.1f} {modules:8,} {compiled:9,}")
        if args.suite:
            suite(tmp / "none", tmp / "none" / ".venv", tmp / "compiles")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
