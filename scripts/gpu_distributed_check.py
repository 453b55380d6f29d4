"""The distributed path on one GPU, in this process (no Ray): a world-size-1 NCCL gang, DDP and FSDP2.

    python scripts/gpu_distributed_check.py                 # on a machine with a CUDA GPU
    python scripts/gpu_distributed_check.py --device cpu    # the same on the CPU, over gloo

One ``tasks.distributed.RankWorker`` is rank 0 of a gang of one: it takes its rendezvous address,
joins the process group (NCCL on CUDA, gloo on the CPU), runs each experiment of the sweep below as
the driver's gang would (the rank's recipe: build, wrap, eager and compiled steps, check), and the
gang's result is made by ``tasks.distributed.combine``, as the driver makes it. What a gang of one
proves on a GPU: the process group, the wrapping, compile and the check over NCCL; what it cannot:
collectives between GPUs.

A Markdown table goes to stdout and, with $OUT set, to $OUT/distributed.md; each result as a JSON line
to $OUT/distributed.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.distributed import RankWorker, combine  # noqa: E402
from tasks.models import Experiment, Result  # noqa: E402

GPT = {"batch": 8, "seq": 256, "layers": 4, "dim": 512, "heads": 8, "vocab": 8192}  # a small GPT-2-style model
GPT_CPU = {"batch": 4, "seq": 32, "layers": 2, "dim": 64, "heads": 4, "vocab": 256}  # to try the script on a CPU
TIMEOUT_S = 300.0  # the gang's collective timeout


def experiments(device: str) -> list[Experiment]:
    """DDP (each Dynamo optimize_ddp setting) and FSDP2 (per block and whole model), inductor against eager."""
    configs = [
        {"strategy": "ddp", "world_size": 1},
        {"strategy": "ddp", "world_size": 1, "optimize_ddp": "off"},
        {"strategy": "fsdp2", "world_size": 1},
        {"strategy": "fsdp2", "world_size": 1, "compile_per": "model"},
    ]
    return [
        Experiment(
            target="models.gpt",
            params=GPT if device == "cuda" else GPT_CPU,
            device=device,  # type: ignore[arg-type]
            phase="training",
            optimizer="adamw",
            precision="bf16" if device == "cuda" else "fp32",
            compile={"backend": "inductor"},
            distributed=config,  # type: ignore[arg-type]
        )
        for config in configs
    ]


def row(r: Result) -> str:
    d = r.distributed
    rank = d.ranks[0] if d and d.ranks else None
    ms = lambda side: f"{side.median_ms:.3f}" if side is not None else "-"  # noqa: E731
    return " | ".join(
        [
            d.config.label() if d else "-",
            d.backend if d else "-",
            r.status,
            ms(r.eager),
            ms(r.compiled),
            f"{r.speedup:.2f}x" if r.speedup else "-",
            f"{r.compile_latency_s:.1f}" if r.compile_latency_s is not None else "-",
            str(r.correct),
            str(rank.graph_count if rank else "-"),
            str(rank.ddp_splits if rank else "-"),
            (r.error.message.splitlines()[0][:80] if r.error else ""),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    placement = {"node_id": "local", "gpu_ids": ["0"] if args.device == "cuda" else [], "cpus": os.cpu_count()}
    worker = RankWorker(placement, rank=0, world_size=1)
    addr, port = worker.address()
    joined = worker.join(addr, port, TIMEOUT_S)
    lines = [
        f"# The distributed path on one {args.device} device, world size 1 ({joined.get('backend')})",
        "",
        "| config | backend | status | eager ms | compiled ms | speedup | compile s | correct | graphs | ddp splits "
        "| error |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    print("\n".join(lines), flush=True)
    for exp in experiments(args.device):
        started = time.time()
        outcome = worker.run(exp.model_dump(mode="json"))
        result = combine(exp, [outcome], started, time.time())
        line = "| " + row(result) + " |"
        lines.append(line)
        print(line, flush=True)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            with (out / "distributed.jsonl").open("a") as f:
                f.write(json.dumps(result.model_dump(mode="json")) + "\n")
            (out / "distributed.md").write_text("\n".join(lines) + "\n")
    worker.leave()


if __name__ == "__main__":
    main()
