"""What the fidelity sections time: the end-to-end experiments' workloads and their spec, and the
calls timed in this process. Plain data and factories; nothing here times anything.

``gelu_mlp`` is a target of its own (``benchmarks.fidelity_sections.workloads:gelu_mlp``): the
workers import this module to build it, so it imports no more than torch and the spec loader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

E2E_TIMING = {"warmup_ms": 50, "repeats_ms": 300}  # per side in each run; the reference's budget in reference.py
E2E_QUICK = 2  # --quick: the first workloads only, one run


def gelu_mlp(device: torch.device, rows: int = 512, dim: int = 256) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """``gelu(x @ w + b) + x`` on ``x`` of ``rows x dim``: one GEMM and a fused pointwise tail (a target)."""

    def block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w + b) + x

    x, w, b = (
        torch.randn(rows, dim, device=device),
        torch.randn(dim, dim, device=device),
        torch.randn(dim, device=device),
    )
    return block, (x, w, b)


GELU_MLP = "benchmarks.fidelity_sections.workloads:gelu_mlp"  # the target that names gelu_mlp

# (label, target, params): calls from ~10 us to milliseconds on one core.
E2E_WORKLOADS: list[tuple[str, str, dict[str, Any]]] = [
    ("gelu(x @ w + b) + x, x 512x256", GELU_MLP, {"rows": 512, "dim": 256}),
    ("gelu(x @ w + b) + x, x 64x64", GELU_MLP, {"rows": 64, "dim": 64}),
    ("seed.foo3 1024x1024", "seed.foo3", {"shape": [1024, 1024]}),
    ("blocks.mlp 8x64x256", "blocks.mlp", {}),
    ("blocks.layernorm_gelu 8x32x256", "blocks.layernorm_gelu", {"seq": 32, "dim": 256}),
    ("seed.foo 16x16", "seed.foo", {"shape": [16, 16]}),
]


def e2e_spec(workloads: list[tuple[str, str, dict[str, Any]]], seed: int) -> str:
    """A spec of one CPU experiment per workload, inductor's defaults, the e2e timing budget."""
    spec: dict[str, Any] = {
        "name": "fidelity-e2e",
        "defaults": {"device": "cpu", "seed": seed, "timing": E2E_TIMING},
        "experiments": [{"target": target, "params": params} for _, target, params in workloads],
    }
    return json.dumps(spec)  # JSON is YAML


def e2e_payload(workload: tuple[str, str, dict[str, Any]], tmp: Path, seed: int) -> dict[str, Any]:
    """The e2e experiment of one workload as a worker receives it: validated by the spec loader, as plain data."""
    from orchestrator.plan.spec import load_spec

    spec = tmp / "inprocess.yaml"
    spec.write_text(e2e_spec([workload], seed))
    return load_spec(spec).experiments[0].model_dump(mode="json")


def workloads(device: torch.device) -> list[tuple[str, Callable[[], Any]]]:
    """Calls from a few microseconds to tens of milliseconds (single-threaded on the CPU)."""

    def t(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device)

    a16, b16, a4k, b4k, r64k, s1m, o1m = t(16), t(16), t(4096), t(4096), t(65536), t(2**20), t(2**20)
    f256, f1k, m256, m512, m1k = t(256, 256), t(1024, 1024), t(256, 256), t(512, 512), t(1024, 1024)

    def foo3(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(x + 1) * 2

    return [
        ("add, 16 elements", lambda: torch.add(a16, b16)),
        ("add, 4096 elements", lambda: torch.add(a4k, b4k)),
        ("relu, 64k elements", lambda: torch.relu(r64k)),
        ("foo3, 256x256", lambda: foo3(f256)),
        ("matmul, 256x256", lambda: m256 @ m256),
        ("foo3, 1024x1024 (allocates 12 MB a call)", lambda: foo3(f1k)),
        ("sin into a preallocated output, 1M elements", lambda: torch.sin(s1m, out=o1m)),
        ("matmul, 512x512", lambda: m512 @ m512),
        ("matmul, 1024x1024", lambda: m1k @ m1k),
    ]


def gpu_workloads(device: torch.device) -> list[tuple[str, Callable[[], Any]]]:
    """The GPU check's workloads: foo3 at 4096x4096 (memory-bound) and foo at 10x10 (launch-bound),
    eager and compiled (default mode), beside the calls of ``workloads``."""
    from tasks.targets import seed

    seed._import_torch()  # the tutorial's functions read torch from their module's globals, bound by a factory
    foo, foo3 = seed.foo, seed.foo3
    big = torch.randn(4096, 4096, device=device)
    x, y = torch.randn(10, 10, device=device), torch.randn(10, 10, device=device)
    foo3_c, foo_c = torch.compile(foo3), torch.compile(foo)
    return [
        ("seed foo3 4096x4096, eager", lambda: foo3(big)),
        ("seed foo3 4096x4096, compiled", lambda: foo3_c(big)),
        ("seed foo 10x10, eager", lambda: foo(x, y)),
        ("seed foo 10x10, compiled", lambda: foo_c(x, y)),
    ]
