"""The neighbours section (``fidelity.py neighbours``): an experiment timed alone vs beside a
compiling neighbour, through the real CLI, in alternating pairs, with and without a CPU reservation."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks.fidelity_sections.cli_runs import FOO3_SPEC, run_cli

NEIGHBOURS = """
      - target: seed.foo      # a cold inductor compile in a fresh process: seconds of g++ per seed
        compile: {cache: cold}
        params: {shape: [512, 512]}
        sweep: {seed: [1, 2, 3]}
        %s
"""


def section_neighbours(pairs: int = 3) -> None:
    """seed.foo3 alone, then beside three cold compiles, ``pairs`` times per reservation: the
    compiled medians and speedups alone / beside, and whether a neighbour ran while foo3 did."""
    cases = [
        ("default (a CPU experiment owns the node)", "", ""),
        ("cpus: 1 each (pinned to separate cores)", "resources: {cpus: 1}", "resources: {cpus: 1}"),
    ]
    print(f"\n## Alone vs beside a compiling neighbour: seed.foo3 2048x2048, inductor, {pairs} alternating pairs\n")
    print("Medians over the pairs; 'overlapped' says whether a neighbour ran while foo3 did.\n")
    print("| reservation | compiled ms alone / beside | ratio | speedup alone / beside | ratio | overlapped | target |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for label, resources, neighbour_resources in cases:
            alone, beside, overlapped = [], [], False
            for i in range(pairs):
                report = run_cli(FOO3_SPEC.format(name="alone", resources=resources, neighbours=""), Path(tmp), f"a{i}")
                alone.append(report["results"][0])
                spec = FOO3_SPEC.format(name="beside", resources=resources, neighbours=NEIGHBOURS % neighbour_resources)
                report = run_cli(spec, Path(tmp), f"b{i}")
                b, others = report["results"][0], report["results"][1:]
                beside.append(b)
                overlapped |= any(
                    n["started_at"] < b["finished_at"] and b["started_at"] < n["finished_at"] for n in others
                )
            ms_a = statistics.median(r["compiled"]["median_ms"] for r in alone)
            ms_b = statistics.median(r["compiled"]["median_ms"] for r in beside)
            sp_a = statistics.median(r["speedup"] for r in alone)
            sp_b = statistics.median(r["speedup"] for r in beside)
            verdict = "ok" if abs(ms_b / ms_a - 1) <= 0.05 else "OUT (±5%)"
            print(
                f"| {label} | {ms_a:.3f} / {ms_b:.3f} | {ms_b / ms_a:.3f} | {sp_a:.2f}x / {sp_b:.2f}x "
                f"| {sp_b / sp_a:.3f} | {'yes' if overlapped else 'no'} | {verdict} |"
            )
