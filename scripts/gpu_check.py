"""The GPU checks of issue 9, in this process (no Ray needed), as one Markdown report.

    bash scripts/gpu_check.sh                    # on a machine with a CUDA GPU (this, then fidelity)
    python scripts/gpu_check.py --device cpu     # the same procedure on the CPU, to try it here

1. Every experiment of examples/seed.yaml on the device, counts chosen by the device.
2. A compile.mode sweep (default, reduce-overhead, max-autotune) on seed.foo3 (4096x4096, memory-
   bound) and on seed.foo at 10x10 (launch-bound), timed by both CUDA methods side by side:
   ``wall`` (what a user waits for; with each side's device time and host-bound flag) and
   ``events`` (device time, do_bench's way); whether CUDA graphs were really used.
3. foo3's achieved bandwidth (from device time) against the measured copy bandwidth.
4. bar's fullgraph error and bar_fixed's result.

Each section is printed (and flushed) as soon as it is done, so a run cut short still shows
what it measured. With $OUT set, the raw results go to $OUT/results.jsonl as they arrive and
the report to $OUT/gpu-results.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.plan.spec import load_spec  # noqa: E402
from tasks.models import Experiment, Result, SideTiming  # noqa: E402
from tasks.procedure import run_experiment  # noqa: E402

COPY_BYTES = {"cuda": 1 << 30, "cpu": 1 << 28}  # 1 GiB on a GPU (far beyond any L2), 256 MiB on the CPU
MODES = ["default", "reduce-overhead", "max-autotune"]
SWEEP_TARGETS = [("seed.foo3", {"shape": [4096, 4096]}), ("seed.foo", {"shape": [10, 10]})]
TUTORIAL_FOO3_SPEEDUP = 2.49  # the torch.compile tutorial's own figure for foo3 on its GPU


class Output:
    """Markdown to stdout (flushed line by line) and, with $OUT, to $OUT/gpu-results.md;
    each result as a JSON line to $OUT/results.jsonl."""

    def __init__(self) -> None:
        out = os.environ.get("OUT")
        self.folder = Path(out) if out else None
        if self.folder:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / "gpu-results.md").write_text("")
            (self.folder / "results.jsonl").write_text("")

    def line(self, text: str = "") -> None:
        print(text, flush=True)
        if self.folder:
            with (self.folder / "gpu-results.md").open("a") as f:
                f.write(text + "\n")

    def result(self, r: Result) -> None:
        if self.folder:
            with (self.folder / "results.jsonl").open("a") as f:
                f.write(r.model_dump_json() + "\n")


def copy_bandwidth_gbs(device: torch.device) -> float:
    """Median bandwidth of a copy within the device's memory (bytes read + written per second)."""
    size = COPY_BYTES[device.type]
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    return 2 * size / statistics.median(times) / 1e9


def seed_experiments(device: str) -> list[Experiment]:
    return [e.model_copy(update={"device": device}) for e in load_spec(ROOT / "examples" / "seed.yaml").experiments]


def sweep_experiments(device: str) -> Iterator[tuple[str, str, str, Experiment]]:
    """(target, mode, method, experiment) for the mode sweep; both methods on CUDA, one on the CPU."""
    methods = ["wall", "events"] if device == "cuda" else ["wall"]
    for target, params in SWEEP_TARGETS:
        for mode in MODES:
            for method in methods:
                exp = Experiment.model_validate(
                    {
                        "target": target,
                        "params": params,
                        "device": device,
                        "compile": {"mode": mode},
                        "timing": {"method": method},
                    }
                )
                yield target, mode, method, exp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--skip-seed", action="store_true", help="only the mode sweep and bandwidth")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device visible")
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    out = Output()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    command = "bash scripts/gpu_check.sh" if device.type == "cuda" else "python scripts/gpu_check.py --device cpu"
    out.line(f"# GPU check on {name}\n")
    cuda = f", CUDA {torch.version.cuda}" if device.type == "cuda" else ""
    out.line(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}{cuda}, command: `{command}`\n")

    seed: list[Result] = []
    if not args.skip_seed:
        out.line("## 1. Seed experiments (examples/seed.yaml), counts by device\n")
        out.line("| target | config | status | eager ms | compiled ms | speedup | 95% CI | host-bound e/c | breaks |")
        out.line("| --- | --- | --- | ---: | ---: | ---: | --- | --- | ---: |")
        for exp in seed_experiments(args.device):
            r = run_experiment(exp)
            out.result(r)
            seed.append(r)
            out.line(
                f"| {r.target} | {r.config_label} | {r.status} | {_ms(r.eager)} | {_ms(r.compiled)} "
                f"| {_x(r.speedup)} | {_ci(r)} | {_hb(r.eager)}/{_hb(r.compiled)} | {r.graph_breaks} |"
            )

    out.line("\n## 2. compile.mode on foo3 (memory-bound) and 10x10 foo (launch-bound), both CUDA timers\n")
    out.line(
        "wall: perf_counter between synchronisations (what a user waits for), with device ms from events "
        "behind a spin kernel; events: device time between events, no sync between calls (do_bench's way).\n"
    )
    out.line(
        "| target | mode | timer | eager ms | compiled ms | speedup | eager device ms | compiled device ms "
        "| host-bound e/c | CUDA graphs used | skips | status |"
    )
    out.line("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |")
    sweep: list[tuple[str, str, str, Result]] = []
    for target, mode, method, exp in sweep_experiments(args.device):
        r = run_experiment(exp)
        out.result(r)
        sweep.append((target, mode, method, r))
        m = r.measurement
        used = "-" if m is None or m.cudagraphs_used is None else ("yes" if m.cudagraphs_used else "no")
        skips = "; ".join(m.cudagraph_skips) if m and m.cudagraph_skips else "-"
        timer = m.timer if m else method
        out.line(
            f"| {target} | {mode} | {timer} | {_ms(r.eager)} | {_ms(r.compiled)} | {_x(r.speedup)} "
            f"| {_device_ms(r.eager)} | {_device_ms(r.compiled)} | {_hb(r.eager)}/{_hb(r.compiled)} "
            f"| {used} | {skips} | {r.status} |"
        )

    copy_gbs = copy_bandwidth_gbs(device)
    out.line(f"\n## 3. foo3's bandwidth against a copy\n\nMeasured copy bandwidth: {copy_gbs:.0f} GB/s ")
    out.line(f"({COPY_BYTES[device.type] >> 20} MiB within device memory, read + write, median of 10).\n")
    out.line("| mode | timer | eager GB/s (6 passes) | compiled GB/s (2 passes) | compiled / copy | speedup |")
    out.line("| --- | --- | ---: | ---: | ---: | ---: |")
    for target, mode, method, r in sweep:
        if target != "seed.foo3" or r.eager is None or r.compiled is None:
            continue
        elements = 4096 * 4096
        eager_gbs = 6 * elements * 4 / (_device_median(r.eager) / 1e3) / 1e9  # x+1, relu, *2: read + write each
        compiled_gbs = 2 * elements * 4 / (_device_median(r.compiled) / 1e3) / 1e9  # one fused read + write
        timer = r.measurement.timer if r.measurement else method
        out.line(
            f"| {mode} | {timer} | {eager_gbs:.0f} | {compiled_gbs:.0f} | {compiled_gbs / copy_gbs:.0%} "
            f"| {_x(r.speedup)} |"
        )
    out.line(f"\nThe torch.compile tutorial reports {TUTORIAL_FOO3_SPEEDUP:.2f}x for foo3 on its own GPU.")

    if seed:
        out.line("\n## 4. Graph breaks\n")
        for r in seed:
            if r.target == "seed.bar" and r.compile.fullgraph:
                message = r.error.message.splitlines()[0] if r.error else "no error"
                out.line(f"- bar with fullgraph: {r.status}, {r.error.type if r.error else ''}: {message}")
            if r.target == "seed.bar_fixed":
                out.line(f"- bar_fixed with fullgraph: {r.status}, graphs {r.graph_count}, breaks {r.graph_breaks}")


def _device_median(side: SideTiming) -> float:
    """Device time where the timer took it (CUDA), else the samples (the CPU)."""
    return statistics.median(side.device_samples_ms) if side.device_samples_ms else side.median_ms


def _ms(side: SideTiming | None) -> str:
    return f"{side.median_ms:.4f}" if side is not None else "-"


def _device_ms(side: SideTiming | None) -> str:
    return f"{statistics.median(side.device_samples_ms):.4f}" if side and side.device_samples_ms else "-"


def _hb(side: SideTiming | None) -> str:
    return "-" if side is None or side.host_bound is None else ("yes" if side.host_bound else "no")


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def _ci(r: Any) -> str:
    return f"{r.speedup_ci[0]:.2f}-{r.speedup_ci[1]:.2f}" if r.speedup_ci else "-"


if __name__ == "__main__":
    main()
