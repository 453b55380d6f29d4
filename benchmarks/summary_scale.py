"""How long the report side takes on a large sweep: summarise, render, compare 10,000 crafted results.

    python benchmarks/summary_scale.py [--results 10000]

Results are crafted (20 samples a side, 50 targets x 100 shapes x 2 configurations, 3% failures, two
device models); nothing runs torch. Prints a Markdown table of the median of 5 runs of each step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.report import markdown, summarize
from orchestrator.report.compare import compare
from tests.report_data import make_report, make_result


def crafted(n: int) -> list:
    templates = {
        (backend, gpu, failed): make_result(
            "seed.foo3",
            backend=backend,
            gpu=gpu,
            status="compile_error" if failed else "ok",
            speedup=None if failed else 2.0,
        )
        for backend in ("inductor", "aot_eager")
        for gpu in ("A100", "H100")
        for failed in (False, True)
    }
    out = []
    for i in range(n):
        backend = ("inductor", "aot_eager")[i % 2]
        gpu = ("A100", "H100")[(i // 2) % 2]
        failed = i % 33 == 0
        t = templates[(backend, gpu, failed)]
        out.append(
            t.model_copy(
                update={"experiment_id": f"{i:012x}", "target": f"t{(i // 4) % 50}", "params": {"shape": i // 200}}
            )
        )
    return out


def timed(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=10_000)
    n = parser.parse_args().results
    results = crafted(n)
    report = make_report(results)
    rows = [
        ("summarize", timed(lambda: summarize(results))),
        ("markdown (summary and every result)", timed(lambda: markdown(report))),
        ("compare with itself", timed(lambda: compare(report, report))),
    ]
    print(f"`python benchmarks/summary_scale.py --results {n}` ({len(report.summary.groups)} groups)\n")
    print("| step | median of 5, s |\n| --- | ---: |")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
