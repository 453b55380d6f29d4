"""Crafted results and reports for the report, compare and HTML tests: known samples, no torch run."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from orchestrator.report import Environment, Report, build_report
from tasks.models import Calibration, CompileCache, ErrorInfo, Experiment, Result, WorkerInfo, WorkInfo
from tasks.stats import side_timing, speedup_ci


def make_result(
    target: str = "seed.foo",
    speedup: float | None = 2.0,
    *,
    status: str = "ok",
    backend: str = "inductor",
    mode: str | None = None,
    params: dict[str, Any] | None = None,
    gpu: str | None = None,
    cpu: str = "Xeon",
    compiled_ms: float = 1.0,
    noise: float = 0.01,
    n: int = 20,
    seed: int = 0,
    compile_s: float | None = 1.0,
    cache: str = "warm",
    memory_ratio: float | None = None,
    graph_breaks: int | None = 0,
    recompiled: bool = False,
    message: str = "Data-dependent branching\nat foo.py:3",
    work: WorkInfo | None = None,
    torch: str = "2.13.0",
    sample_seed: int | None = None,
    cache_outcome: str | None = None,
) -> Result:
    """One result whose samples scatter by ``noise`` (relative) around the given medians.

    A failed result (``status`` other than ok and incorrect) has no compiled side and no speedup.
    """
    params = params or {}
    compile_cfg: dict[str, Any] = {"backend": backend, "mode": mode, "cache": cache}
    exp = Experiment(target=target, params=params, compile=compile_cfg, gpu_model=gpu, seed=seed)
    timed = status in ("ok", "incorrect") and speedup is not None
    rng = np.random.default_rng(sample_seed if sample_seed is not None else zlib.crc32(exp.id.encode()))
    compiled = compiled_ms * (1 + noise * rng.standard_normal(n))
    eager = (speedup or 1.0) * compiled_ms * (1 + noise * rng.standard_normal(n))
    eager_side = side_timing(eager[0] * 2, eager.tolist(), warmup=3)
    compiled_side = side_timing(compiled[0] * 50, compiled.tolist(), warmup=3) if timed else None
    return Result(
        experiment_id=exp.id,
        target=target,
        params=params,
        device="cuda" if gpu else "cpu",
        compile=exp.compile,
        timing=exp.timing,
        seed=seed,
        gpu_model=gpu,
        status=status,
        error=None
        if status in ("ok", "incorrect")
        else ErrorInfo(type="torch._dynamo.exc.Unsupported", message=message),
        eager=eager_side,
        compiled=compiled_side,
        compile_latency_s=compile_s if timed else None,
        compile_cache=CompileCache(
            state=cache,
            primed=cache == "warm",
            fxgraph_hit=int(cache_outcome == "hit"),
            fxgraph_miss=int(cache_outcome == "miss"),
        )
        if timed and cache_outcome
        else None,
        speedup=eager_side.median_ms / compiled_side.median_ms if compiled_side else None,
        speedup_ci=speedup_ci(eager.tolist(), compiled.tolist()) if compiled_side else None,
        memory_ratio=memory_ratio,
        recompiled=recompiled,
        recompile_reasons=["1 compilation(s) inside the timed window"] if recompiled else [],
        graph_count=1 if graph_breaks is not None else None,
        graph_breaks=graph_breaks,
        correct=status == "ok" if timed else None,
        work=work,
        started_at=1_700_000_000.0,
        finished_at=1_700_000_010.0,
        worker=WorkerInfo(
            hostname="node-1",
            pid=1,
            threads=1,
            gpu_name=f"NVIDIA {gpu}" if gpu else None,
            gpu_model=gpu,
            cpu_model=cpu,
            versions={"torch": torch},
        ),
    )


def make_report(
    results: list[Result],
    name: str = "crafted",
    torch: str = "2.13.0",
    complete: bool = True,
    warnings: list[str] | None = None,
) -> Report:
    env = Environment(python="3.11.7", torch=torch, ray="2.60.0", platform="Linux", warnings=warnings or [])
    return build_report(name, {"name": name}, results, env, complete=complete)


def mixed_report() -> Report:
    """Two device models, two shapes, several configurations, every kind of outcome."""
    results = []
    for gpu in ("A100", "H100"):
        scale = 1.0 if gpu == "A100" else 1.6
        for shape in (256, 4096):
            params = {"shape": [shape, shape]}
            results.append(make_result("seed.foo3", 2.0 * scale, params=params, gpu=gpu, compile_s=8.0))
            results.append(
                make_result("seed.foo3", 2.1 * scale, params=params, gpu=gpu, mode="max-autotune", compile_s=30.0)
            )
            results.append(make_result("seed.foo3", 2.4 * scale, params=params, gpu=gpu, cache="cold", compile_s=20.0))
        results.append(make_result("seed.bar", 0.5, gpu=gpu, graph_breaks=1))
        results.append(make_result("seed.bar", None, gpu=gpu, status="compile_error", mode="max-autotune"))
        results.append(make_result("seed.bar", None, gpu=gpu, status="compile_error", cache="cold"))
    results.append(
        make_result("seed.outer", 3.0, gpu="A100", recompiled=True, work=WorkInfo(flops=2 * 10**12, bytes=10**9))
    )
    results.append(make_result("seed.foo", None, gpu="H100", status="oom", message="CUDA out of memory"))
    return make_report(results, name="mixed", warnings=["nodes disagree on triton: 3.1.0, 3.2.0"])


def make_runs(
    target: str = "seed.foo",
    compiled_ms: list[float] | tuple[float, ...] = (1.0,),
    eager_ms: list[float] | tuple[float, ...] | None = None,
    *,
    seed: int = 0,
    **kwargs: Any,
) -> list[Result]:
    """One result per run of one experiment (``replicate`` 0, 1, ...; each in its own worker process),
    run i centred on ``compiled_ms[i]`` and ``eager_ms[i]`` (default: 2.0 ms in every run).
    ``seed`` varies the per-call samples between calls of this helper; other arguments go to ``make_result``."""
    eager = list(eager_ms) if eager_ms is not None else [2.0] * len(compiled_ms)
    runs = []
    for i, (c, e) in enumerate(zip(compiled_ms, eager, strict=True)):
        r = make_result(target, e / c, compiled_ms=c, sample_seed=seed * 1000 + i, **kwargs)
        r.replicate = i
        if r.worker:
            r.worker.pid = 1 + i
        runs.append(r)
    return runs


def make_replicates(
    speedups: list[float], *, gpu_ids: list[str] | None = None, node: str = "node-1", **kwargs: Any
) -> list[Result]:
    """One experiment run once per speedup: replicate i has ``speedups[i]`` and its own samples, and ran on
    ``gpu_ids[i]`` of ``node`` where given (a GPU model is needed for that: ``gpu=``)."""
    results = []
    for i, speedup in enumerate(speedups):
        r = make_result(speedup=speedup, sample_seed=1000 + i, **kwargs)
        r.replicate = i
        if gpu_ids is not None and r.worker is not None:
            r.worker.node_id = node
            r.worker.gpu_ids = [gpu_ids[i]]
        results.append(r)
    return results


def make_calibration(
    id: str = "node-1/gpu0", model: str = "H100", *, slow: bool = False, figures: dict[str, float] | None = None
) -> Calibration:
    """A GPU's calibration entry; a slow one says which figure fell short."""
    return Calibration(
        id=id,
        node_id="node-1",
        hostname="node-1",
        device="cuda",
        gpu_id=id.rsplit("gpu", 1)[-1],
        model=model,
        figures=figures or {"fp32_tflops": 51.2, "bf16_tflops": 740.0, "copy_gbps": 2890.0},
        slow=slow,
        slow_reasons=["fp32_tflops 46.1 is 10.0% below the H100 median 51.2 (of 1 other)"] if slow else [],
    )


def replicated_report() -> Report:
    """seed.foo3 under two configurations, three replicates each on two GPUs of one node; seed.bar once."""
    results = [
        *make_replicates([2.0, 2.2, 2.1], noise=0.002, target="seed.foo3", gpu="H100", gpu_ids=["0", "1", "0"]),
        *make_replicates(
            [1.9, 2.05, 2.0], noise=0.002, target="seed.foo3", backend="aot_eager", gpu="H100", gpu_ids=["1", "0", "1"]
        ),
        make_result("seed.bar", 0.5, gpu="H100"),
        make_result("seed.bar", 0.6, gpu="H100", backend="aot_eager"),
    ]
    return make_report(results, name="replicated")


def calibrated_report() -> Report:
    """Two H100s calibrated, GPU 1 slow (the report's list says so; the result's own copy was taken before)."""
    fast = make_calibration("node-1/gpu0")
    slow = make_calibration(
        "node-1/gpu1", slow=True, figures={"fp32_tflops": 46.1, "bf16_tflops": 731.0, "copy_gbps": 2875.0}
    )
    on_fast, on_slow = make_result("seed.foo3", 2.0, gpu="H100"), make_result("seed.bar", 0.5, gpu="H100")
    on_fast.worker.calibration = fast
    on_slow.worker.calibration = slow.model_copy(update={"slow": False, "slow_reasons": []})
    report = make_report([on_fast, on_slow], name="calibrated")
    report.environment.calibration = [fast, slow]
    return report
