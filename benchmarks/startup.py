"""Start-up of each command, as a person at a terminal feels it: the median of 5 runs.

    python benchmarks/startup.py           # about a minute on 2 cores

Each command runs once untimed (disk caches), then 5 times; the table shows the median wall
time of the whole process, the median CPU time it used (user + system: what a busy machine
inflates less), and whether it imported torch and Ray (read from the process itself).
Targets, from issue 9: under 0.5 s for --help, tasks and the report-reading commands;
validate pays for torch only to check backends, modes and options, never for Ray.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5
REPORT = ROOT / "tests" / "data" / "seed-v1.json"  # a checked-in report, read by report and compare
TARGET_S = 0.5

# Runs a command and, at exit, writes which heavy modules it had imported to $STARTUP_PROBE.
PROBE = """
import atexit, json, os, sys
def _probe():
    with open(os.environ["STARTUP_PROBE"], "w") as f:
        json.dump({m: m in sys.modules for m in ("torch", "ray")}, f)
atexit.register(_probe)
sys.argv = ["compilebench", *sys.argv[1:]]
from orchestrator.cli import main
main()
"""

COMMANDS: list[tuple[str, list[str], bool]] = [  # (shown as, arguments, held to the 0.5 s target)
    ("compilebench --help", ["--help"], True),
    ("compilebench tasks", ["tasks"], True),
    ("compilebench report REPORT", ["report", str(REPORT)], True),
    ("compilebench report REPORT -f markdown", ["report", str(REPORT), "-f", "markdown"], True),
    ("compilebench compare REPORT REPORT", ["compare", str(REPORT), str(REPORT)], True),
    ("compilebench schema", ["schema"], True),
    ("compilebench validate examples/seed.yaml", ["validate", str(ROOT / "examples" / "seed.yaml")], False),
]


def timed(argv: list[str], probe: Path | None = None) -> tuple[float, float]:
    """Wall time of one run of ``argv`` and the CPU time (user + system) its process used."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if probe is not None:
        env["STARTUP_PROBE"] = str(probe)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(argv: list[str]) -> tuple[float, float]:
    """Medians of wall and CPU time over ``RUNS`` runs, after one untimed run (page cache, .pyc files)."""
    timed(argv)
    runs = [timed(argv) for _ in range(RUNS)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def main() -> None:
    script = shutil.which("compilebench", path=str(Path(sys.executable).parent))
    print("$ python benchmarks/startup.py")
    print(
        f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, {os.cpu_count()} CPUs; "
        f"median of {RUNS} runs after one untimed run\n"
    )
    print("| command | start-up, wall | CPU time | imports torch | imports Ray | target |")
    print("| --- | ---: | ---: | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.json"
        for shown, args, held in COMMANDS:
            seconds, cpu = measure([script, *args] if script else [sys.executable, "-m", "orchestrator", *args])
            timed([sys.executable, "-c", PROBE, *args], probe)  # once more, to read what it imported
            imported = json.loads(probe.read_text())
            target = (
                ("ok" if seconds < TARGET_S else f"OUT (< {TARGET_S} s)")
                if held
                else ("ok" if not imported["ray"] else "OUT (no Ray)")
            )
            print(
                f"| `{shown}` | {seconds:.2f} s | {cpu:.2f} s | {'yes' if imported['torch'] else 'no'} "
                f"| {'yes' if imported['ray'] else 'no'} | {target} |"
            )
        baseline, baseline_cpu = measure([sys.executable, "-c", "import torch"])
        print(f"| `python -c 'import torch'` (for scale) | {baseline:.2f} s | {baseline_cpu:.2f} s | yes | no | |")
    load = os.getloadavg()[0]
    print(f"\nLoad average at the end: {load:.1f} on {os.cpu_count()} CPUs (it inflates wall times; CPU times less).")


if __name__ == "__main__":
    main()
