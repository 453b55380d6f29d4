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


def make_replay_result(
    target: str = "blocks.transformer_layer",
    *,
    dynamic: bool | None = None,
    mark_dynamic: list[tuple[int, int]] | None = None,
    values: tuple[int, ...] = (16, 32, 64),
    weights: tuple[float, ...] = (0.5, 0.3, 0.2),
    eager_ms: tuple[float, ...] = (1.0, 2.0, 4.0),
    compiled_ms: tuple[float, ...] = (0.5, 1.0, 2.0),
    compile_s: float = 2.0,
    compiles: int = 1,
    calls: int = 1000,
    total_ms: dict[str, float] | None = None,
    calls_asked: int | None = None,
    cache: str = "warm",
    ci: tuple[float, float] | None = None,
) -> Result:
    """A replay of ``calls`` calls over ``values`` (weights normalised here) under one dynamic-shape policy.

    Per value: steady eager and compiled medians as given. ``total_ms`` (first pass) defaults to what the
    steady times and the compile make of the traffic; the cumulative curves run from the first call's
    compile to that total. ``calls_asked`` sets ``decision.calls``; ``ci`` the weighted speedup's interval
    (None: none, as replays stored before it had)."""
    from tasks.models import DecisionConfig, ReplayConfig, ReplayResult, ShapeTiming

    norm = [w / sum(weights) for w in weights]
    mean_eager = sum(w * e for w, e in zip(norm, eager_ms, strict=True))
    mean_compiled = sum(w * c for w, c in zip(norm, compiled_ms, strict=True))
    totals = total_ms or {"eager": calls * mean_eager, "compiled": compile_s * 1e3 + calls * mean_compiled}
    compile_cfg: dict[str, Any] = {"dynamic": dynamic, "mark_dynamic": mark_dynamic or [], "cache": cache}
    replay = ReplayConfig(param="seq", values=list(values), weights=list(weights), calls=calls)
    decision = DecisionConfig(calls=calls_asked) if calls_asked else None
    exp = Experiment(
        target=target, params={"batch": 2}, device="cpu", compile=compile_cfg, replay=replay, decision=decision
    )
    at = sorted({1, *range(10, calls + 1, max(1, calls // 20)), calls})
    first_ms = compile_s * 1e3 / compiles
    eager_curve = [totals["eager"] * n / calls for n in at]
    rest = totals["compiled"] - first_ms
    compiled_curve = [first_ms + rest * (n - 1) / max(1, calls - 1) for n in at]
    return Result(
        **{**exp.model_dump(include={"target", "params", "compile", "timing", "seed"}), "decision": decision},
        experiment_id=exp.id,
        device="cpu",
        status="ok",
        compile_latency_s=first_ms / 1e3,
        compile_cache=CompileCache(state=cache, primed=cache == "warm", fxgraph_hit=int(cache == "warm")),
        speedup=mean_eager / mean_compiled,
        speedup_ci=ci,
        correct=True,
        started_at=1_700_000_000.0,
        finished_at=1_700_000_060.0,
        worker=WorkerInfo(hostname="node-1", pid=1, threads=2, cpu_model="Xeon", versions={"torch": "2.13.0"}),
        replay=ReplayResult(
            param="seq",
            calls=calls,
            total_ms=totals,
            compile_s=compile_s,
            compiles=compiles,
            recompiles=compiles - 1,
            per_shape=[
                ShapeTiming(value=v, weight=w, drawn=round(w * calls), eager_ms=e, compiled_ms=c)
                for v, w, e, c in zip(values, norm, eager_ms, compiled_ms, strict=True)
            ],
            weighted_speedup=mean_eager / mean_compiled,
            weighted_speedup_ci=ci,
            break_even_calls=compile_s * 1e3 / (mean_eager - mean_compiled) if mean_eager > mean_compiled else None,
            cumulative_at=at,
            cumulative_ms={"eager": eager_curve, "compiled": compiled_curve},
        ),
    )


def replay_report() -> Report:
    """Shape traffic under the four dynamic-shape policies: static recompiles per length and loses the
    1,000 calls; dynamic, marked and torch's choice compile once or twice and win them."""
    eager = (2.0, 4.0, 8.0)
    policies = [
        make_replay_result(dynamic=False, compile_s=9.0, compiles=3, eager_ms=eager, compiled_ms=(0.4, 0.8, 1.6)),
        make_replay_result(dynamic=True, compile_s=1.5, eager_ms=eager, compiled_ms=(0.6, 1.1, 2.2)),
        make_replay_result(dynamic=None, compile_s=2.5, compiles=2, eager_ms=eager, compiled_ms=(0.5, 1.0, 2.1)),
        make_replay_result(mark_dynamic=[(0, 1)], compile_s=1.2, eager_ms=eager, compiled_ms=(0.6, 1.1, 2.2)),
    ]
    return make_report(policies, name="replay")
