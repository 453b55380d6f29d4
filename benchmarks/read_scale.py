"""Every read-side command on a big report, timed as a whole process through the command line.

    python benchmarks/read_scale.py [--results 10000,100000] [--year 365x1000] [--dir DIR] [--only report,compare]

Reports of N results are built from the results of committed reports (``tests/data``): each copy gets
a new experiment id, its own params (``copy``: one group per copy of a template) and 1% noise on every
timing (samples, then the figures derived from them, as ``tasks.stats`` derives them), and the summary
is rebuilt. Each is written by the code under test (``write_report``), under the name it recommends
(``REPORT_NAME``: ``report.json.gz`` where reports are compressed). Then, each as one process:

- ``validate`` of a spec that expands to N experiments;
- ``report`` (terminal) and ``report --html``;
- ``compare`` of two reports of N (the second with other noise);
- ``history`` over 3 reports of N;
- ``export -f pytorch-v3`` and ``export -f csv``;
- ``history`` over a year of nightlies: 365 reports of 1,000 results (``--year``).

Each command's wall time and peak resident memory (``os.wait4``'s ``ru_maxrss`` of the child) against
the goals, 10 s and 2 GB, and each report's size on disk against 100 MB at 100,000 results. Run with
another checkout's code first on ``PYTHONPATH`` for a before/after (the commands run with this
interpreter and inherit the environment). Nothing here touches Ray or a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # for benchmarks.big_spec; last, so that PYTHONPATH=OLD_CHECKOUT still picks the code

import orchestrator.report.io as report_io  # noqa: E402
from benchmarks.big_spec import spec_of  # noqa: E402
from orchestrator.report import read, summarize, write_report  # noqa: E402
from orchestrator.report.models import Report  # noqa: E402
from tasks.models import Result  # noqa: E402

TEMPLATES = [ROOT / "tests/data/seed-cpu.json", *sorted((ROOT / "tests/data/compile-cache").glob("local-*.json"))]
GOAL_S = 10.0  # issue 28: every read-side command, whole process, on the 2-core machine
GOAL_BYTES = 2 * 1024**3  # issue 28: peak resident memory of each command
FILE_GOAL_BYTES = 100 * 1000**2  # issue 28: the report on disk at 100,000 results
NOISE = 0.01  # relative standard deviation of the noise put on each copy's timings
CLI = [sys.executable, "-c", "from orchestrator.cli import main; main()"]


def report_name(stem: str) -> str:
    """The file name the code under test recommends for a report (compressed where it can be)."""
    return stem + getattr(report_io, "REPORT_SUFFIX", ".json")


def templates() -> list[dict[str, Any]]:
    """The committed reports' results, as JSON data."""
    out = []
    for path in TEMPLATES:
        out += [r.model_dump(mode="json") for r in read(path).results]
    return out


def _side(side: dict[str, Any] | None, rng: random.Random, scale: float) -> dict[str, Any] | None:
    if side is None:
        return None
    samples = [s * scale * (1 + rng.gauss(0, NOISE)) for s in side["samples_ms"]]
    ordered = sorted(samples)
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {
        **side,
        "samples_ms": samples,
        "median_ms": statistics.median(samples),
        "min_ms": ordered[0],
        "mean_ms": statistics.fmean(samples),
        "iqr_ms": q[2] - q[0],
        "first_call_ms": side["first_call_ms"] * scale,
    }


def copies(base: list[dict[str, Any]], n: int, seed: int, offset: int = 0) -> list[Result]:
    """``n`` results: copies of ``base`` with new ids, ``params.copy`` and 1% noise on their timings."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = base[i % len(base)]
        scale = 1 + rng.gauss(0, NOISE)
        eager, compiled = _side(r["eager"], rng, scale), _side(r["compiled"], rng, 1.0)
        speedup = r["speedup"]
        if eager and compiled and speedup is not None and r.get("replay") is None:
            speedup = eager["median_ms"] / compiled["median_ms"]
        ci = r["speedup_ci"]
        if ci is not None and speedup is not None and r["speedup"]:
            ci = [c * speedup / r["speedup"] for c in ci]
        latency = r["compile_latency_s"]
        data = {
            **r,
            "experiment_id": f"{offset + i:012x}",
            "params": {**r["params"], "copy": (offset + i) // len(base)},
            "eager": eager,
            "compiled": compiled,
            "speedup": speedup,
            "speedup_ci": ci,
            "compile_latency_s": None if latency is None else latency * (1 + rng.gauss(0, NOISE)),
        }
        out.append(Result.model_validate(data))
    return out


def build(path: Path, base: list[dict[str, Any]], n: int, seed: int, created: datetime) -> None:
    gc.disable()  # hundreds of thousands of objects made at once, none of them garbage until the report is written
    results = copies(base, n, seed)
    report = Report(
        created_at=created.isoformat(timespec="seconds"),
        name=path.name.split(".")[0],
        spec={"name": "read-scale"},
        environment={"python": "3.11", "torch": "2.13.0", "ray": "2.60.0", "platform": "linux"},
        results=results,
        summary=summarize(results),
    )
    write_report(report, path)
    del report, results
    gc.enable()


def timed(args: list[str], cwd: Path) -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds (user + system), peak RSS in bytes and exit status of one command run to its
    end, output discarded: measured by ``/usr/bin/time``, whose own child is the command (a child of this
    process would inherit its peak RSS, reports and all, through ``fork``). Run in ``cwd``, away from any
    checkout: ``python -c`` imports from its working directory first."""
    with tempfile.NamedTemporaryFile("r") as figures:
        proc = subprocess.run(
            ["/usr/bin/time", "-o", figures.name, "-f", "%e %U %S %M %x", *CLI, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
            cwd=cwd,
        )
        wall, user, system, kib, code = figures.read().split()[-5:]
    if int(code) not in (0, 1):
        print(f"  {' '.join(args)}: exit {code}: {proc.stderr.decode().strip()[-300:]}", file=sys.stderr)
    return float(wall), float(user) + float(system), int(kib) * 1024, int(code)


def row(label: str, size: str, wall: float, cpu: float, rss: int, code: int) -> str:
    ok = "yes" if wall <= GOAL_S and rss <= GOAL_BYTES and code in (0, 1) else "**no**"
    return f"| {label} | {size} | {wall:.1f} s | {cpu:.1f} s | {rss / 1024**2:,.0f} MB | {ok} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="10000,100000", help="report sizes, comma-separated")
    parser.add_argument("--year", default="365x1000", help="NIGHTSxRESULTS for history over a year ('' skips)")
    parser.add_argument("--dir", type=Path, help="where reports are built (default: a temporary folder)")
    parser.add_argument("--only", default="", help="commands to time, comma-separated (default: all)")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    work = args.dir or Path(tempfile.mkdtemp(prefix="read-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    base = templates()
    day = datetime(2026, 1, 1, tzinfo=UTC)
    table = ["| command, whole process | results | wall | CPU | peak RSS | within goal |", "|---|---|---|---|---|---|"]
    sizes = []

    def run(name: str, label: str, size: str, argv: list[str]) -> None:
        if only and name not in only:
            return
        table.append(row(label, size, *timed(argv, work)))
        print(table[-1], flush=True)

    try:
        for n in [int(x) for x in args.results.split(",") if x]:
            folder = work / f"n{n}"
            folder.mkdir(exist_ok=True)
            paths = [folder / report_name(f"r{k}") for k in range(3)]
            start = time.perf_counter()
            for k, path in enumerate(paths):
                if not path.exists():
                    build(path, base, n, seed=k, created=day + timedelta(days=k))
            print(f"built 3 reports of {n:,} results in {time.perf_counter() - start:.0f} s", file=sys.stderr)
            size = paths[0].stat().st_size
            sizes.append(f"| report file on disk ({paths[0].name}) | {n:,} | {size / 1000**2:,.1f} MB |")
            spec = folder / "spec.yaml"
            spec.write_text(yaml.safe_dump(spec_of(n, "read-scale", "auto")))
            label = f"{n:,}"
            run("validate", "`validate` of a spec that expands to N", label, ["validate", str(spec)])
            run("report", "`report` (terminal)", label, ["report", str(paths[0])])
            html = str(folder / "r0.html")
            run("html", "`report --html`", label, ["report", str(paths[0]), "--html", html])
            run("compare", "`compare` two reports", label, ["compare", str(paths[0]), str(paths[1])])
            run("history", "`history` over 3 reports", label, ["history", *map(str, paths)])
            out = str(folder / "export.out")
            run("export", "`export -f pytorch-v3`", label, ["export", str(paths[0]), "-f", "pytorch-v3", "-o", out])
            run("export", "`export -f csv`", label, ["export", str(paths[0]), "-f", "csv", "-o", out])
        if args.year and (not only or "year" in only):
            nights, n = (int(x) for x in args.year.split("x"))
            folder = work / f"year{nights}x{n}"
            folder.mkdir(exist_ok=True)
            start = time.perf_counter()
            for k in range(nights):
                path = folder / report_name(f"nightly-{k:03d}")
                if not path.exists():
                    build(path, base, n, seed=1000 + k, created=day + timedelta(days=k))
            print(f"built {nights} reports of {n:,} results in {time.perf_counter() - start:.0f} s", file=sys.stderr)
            run("year", f"`history` over {nights} nightly reports", f"{nights} x {n:,}", ["history", str(folder)])
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"    {' '.join(['python', 'benchmarks/read_scale.py', *sys.argv[1:]])}")
    print(f"    ({os.environ.get('PYTHONPATH') or 'this checkout'}; goals: <= {GOAL_S:.0f} s, <= 2 GB)")
    print()
    print("\n".join(table))
    print()
    print("| file | results | size |\n|---|---|---|")
    print("\n".join(sizes))
    print(json.dumps({"goal_file_bytes": FILE_GOAL_BYTES}))


if __name__ == "__main__":
    main()
