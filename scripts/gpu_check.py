"""Every experiment of examples/seed.yaml on one GPU, in this process (no Ray needed).

    bash scripts/gpu_check.sh            # on a machine with a CUDA GPU
    python scripts/gpu_check.py --device cpu   # the same procedure on the CPU, to try it here

Prints a Markdown report: each experiment's outcome; foo3's eager and compiled medians,
speedup, and achieved bandwidth against the device's measured copy bandwidth; bar's
fullgraph error; bar_fixed's result. With $OUT set, the raw results go to $OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.spec import load_spec  # noqa: E402
from tasks.procedure import run_experiment  # noqa: E402

COPY_BYTES = 1 << 30  # 1 GiB copied device to device: far larger than any L2


def copy_bandwidth_gbs(device: torch.device) -> float:
    """Median bandwidth of a device-to-device copy (bytes read + written per second)."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
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
    return 2 * COPY_BYTES / sorted(times)[len(times) // 2] / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device visible")
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"# GPU check: examples/seed.yaml on {name}\n")
    print(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, command: `bash scripts/gpu_check.sh`\n")

    results = []
    for exp in load_spec(ROOT / "examples" / "seed.yaml").experiments:
        results.append(run_experiment(exp.model_copy(update={"device": args.device})))
    print("| target | config | status | eager ms | compiled ms | speedup | 95% CI | breaks | compile s |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for r in results:
        ci = f"{r.speedup_ci[0]:.2f}-{r.speedup_ci[1]:.2f}" if r.speedup_ci else "-"
        print(
            f"| {r.target} | {r.config_label} | {r.status} | {_ms(r.eager)} | {_ms(r.compiled)} "
            f"| {f'{r.speedup:.2f}x' if r.speedup else '-'} | {ci} | {r.graph_breaks} "
            f"| {f'{r.compile_latency_s:.2f}' if r.compile_latency_s else '-'} |"
        )

    copy_gbs = copy_bandwidth_gbs(device)
    print(f"\nMeasured copy bandwidth: {copy_gbs:.0f} GB/s (1 GiB device-to-device, read + write)\n")
    for r in (r for r in results if r.target == "seed.foo3" and r.compiled):
        elements = 1
        for dim in r.params.get("shape", [4096, 4096]):
            elements *= dim
        moved = 2 * elements * 4  # float32: x read once, the result written once
        achieved = moved / (r.compiled.median_ms / 1e3) / 1e9
        print(
            f"- foo3 {r.config_label}: eager {r.eager.median_ms:.4f} ms, compiled {r.compiled.median_ms:.4f} ms, "
            f"speedup {r.speedup:.2f}x; compiled moves {moved / 1e6:.0f} MB at {achieved:.0f} GB/s "
            f"= {achieved / copy_gbs:.0%} of copy bandwidth"
        )
    for r in results:
        if r.target == "seed.bar" and r.compile.fullgraph:
            message = r.error.message.splitlines()[0] if r.error else "no error"
            print(f"- bar with fullgraph: {r.status}, {r.error.type if r.error else ''}: {message}")
        if r.target == "seed.bar_fixed":
            outcome = f"graphs {r.graph_count}, breaks {r.graph_breaks}, correct {r.correct}"
            print(f"- bar_fixed with fullgraph: {r.status}, {outcome}")
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "results.json"
        path.write_text(json.dumps([r.model_dump(mode="json") for r in results], indent=1))


def _ms(side: object) -> str:
    return f"{side.median_ms:.4f}" if side is not None else "-"  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
