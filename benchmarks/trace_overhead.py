"""What does ``trace: true`` add to the compile latency it measures?

    python benchmarks/trace_overhead.py                 # 5 rounds of 4 configurations (~3 min on 2 cores)
    python benchmarks/trace_overhead.py --rounds 9

Each round runs every configuration twice in this process (``tasks.procedure.run_experiment``, no
Ray), once traced and once not, in alternating order from round to round, so that drift and the
order hit both alike: seed.foo3 (1024x1024) and seed.my_module, each for inference and a training
step, compiled by inductor with ``compile.cache: warm`` (primed: the measured compile loads its
artifacts from the caches) and ``cold`` (an empty cache directory: every artifact compiled anew;
in this process, which has compiled before). The correctness check is off (its compile is apart
and untraced) and the timing short: only the compile matters.

Per configuration: the median compile latency untraced and traced, over the rounds, and their
ratio; the trace's size (its logs, uncompressed, and packed as the result carries it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tasks.metadata import cpu_model  # noqa: E402
from tasks.models import Experiment  # noqa: E402
from tasks.procedure import run_experiment  # noqa: E402

CONFIGS: list[dict[str, Any]] = [
    {"target": "seed.foo3", "params": {"shape": [1024, 1024]}, "phase": "inference"},
    {"target": "seed.my_module", "phase": "training"},
]
CACHES = ("warm", "cold")


def experiment(config: dict[str, Any], cache: str, trace: bool) -> Experiment:
    return Experiment(
        **config,
        device="cpu",
        compile={"backend": "inductor", "cache": cache},
        timing={"warmup": 1, "repeats": 3},
        check={"enabled": False},
        trace=trace,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"# python benchmarks/trace_overhead.py --rounds {args.rounds}   ({cpu_model()}, torch {torch.__version__})")
    cases = [(c, cache) for c in CONFIGS for cache in CACHES]
    seconds: dict[tuple[int, bool], list[float]] = {(i, t): [] for i in range(len(cases)) for t in (False, True)}
    sizes: dict[int, tuple[int, int]] = {}
    for round_ in range(args.rounds):
        for i, (config, cache) in enumerate(cases):
            for trace in (round_ % 2 == 0, round_ % 2 == 1):  # traced first every other round
                r = run_experiment(experiment(config, cache, trace))
                if r.status != "ok" or r.compile_latency_s is None:
                    raise SystemExit(f"{config['target']} {cache} trace={trace}: {r.status} {r.error}")
                seconds[(i, trace)].append(r.compile_latency_s)
                if trace and r.trace is not None:
                    sizes[i] = (r.trace.bytes, len(r.trace.archive or ""))
    head = ("target", "phase", "cache", "untraced s", "traced s", "+s", "ratio", "log KiB", "sent KiB")
    widths = (16, 11, 6, 11, 10, 8, 7, 9, 9)
    print("".join(f"{h:<{w}}" if j < 3 else f"{h:>{w}}" for j, (h, w) in enumerate(zip(head, widths, strict=True))))
    for i, (config, cache) in enumerate(cases):
        plain, traced = statistics.median(seconds[(i, False)]), statistics.median(seconds[(i, True)])
        log, sent = sizes.get(i, (0, 0))
        print(
            f"{config['target']:<16}{config['phase']:<11}{cache:<6}{plain:>11.3f}{traced:>10.3f}"
            f"{traced - plain:>+8.3f}{traced / plain:>7.2f}{log / 1024:>9.0f}{sent / 1024:>9.0f}"
        )


if __name__ == "__main__":
    main()
