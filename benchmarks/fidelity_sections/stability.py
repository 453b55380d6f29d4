"""The stability section (``fidelity.py stability``): run-to-run stability of one speedup through
the real CLI, its coefficient of variation over runs against the 5% target."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks.fidelity_sections.cli_runs import FOO3_SPEC, run_cli


def section_stability(runs: int = 5) -> None:
    """seed.foo3 2048x2048 through the full CLI ``runs`` times: each run's speedup, their mean and CV."""
    with tempfile.TemporaryDirectory() as tmp:
        speedups = []
        for i in range(runs):
            report = run_cli(FOO3_SPEC.format(name=f"stability-{i}", resources="", neighbours=""), Path(tmp), f"s{i}")
            speedups.append(report["results"][0]["speedup"])
    cv = statistics.stdev(speedups) / statistics.mean(speedups)
    print(f"\n## Stability: seed.foo3 2048x2048, inductor, {runs} runs of the full CLI\n")
    print("| run | " + " | ".join(str(i + 1) for i in range(runs)) + " | mean | CV | target |")
    print("| --- |" + " ---: |" * (runs + 3))
    print(
        "| speedup | "
        + " | ".join(f"{s:.2f}x" for s in speedups)
        + f" | {statistics.mean(speedups):.2f}x | {cv:.1%} | {'ok' if cv <= 0.05 else 'OUT (<= 5%)'} |"
    )
