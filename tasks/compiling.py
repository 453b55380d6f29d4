"""Compiling the target: the compiled and eager callables, the graph analysis, the compile
caches as torch counts their use, and the randomness the check compiles with.

Three compiles can happen in one experiment, each from a reset of Dynamo:

1. **Priming** (``compile.cache: warm``): the same compile as the measured one, run once and
   thrown away, so that the on-disk caches (inductor's FX graph cache, AOTAutograd's cache, and
   on GPUs Triton's and the autotuner's) hold this experiment's artifacts; then every in-memory
   cache is cleared (``forget_compiled``). The measured compile then loads from disk from a
   worker's first experiment on, whatever the worker ran before: "warm" means primed.
2. **The measured compile**: exactly what the user configured. Its first call is the compile
   latency; its counters say which cache layers hit and which missed (``cache_use``); it is the
   code that is timed. ``compile.cache: cold`` runs it in a fresh process with empty cache
   directories (``tasks.worker``), so every layer misses. Inductor's once-per-process probe of
   the CPU's vector instructions is run before it and timed apart (``probe_cpu_isa``): it is a
   property of the machine, not of the graph, and would otherwise be most of a small graph's
   cold compile on a CPU.
3. **The check's compile** (inductor with checking on): the same compile with inductor's
   ``fallback_random`` (its random ops call eager's RNG, so a seed reset gives both sides the same
   dropout masks), as the harness's accuracy runs do. ``fallback_random`` also changes inductor's
   pattern matching (``compile_fx.py``): code compiled with it is not the code a user ships, so it
   is judged and never timed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.utils import counters

from tasks.isolation import INDUCTOR_CACHE_ENV, restore_environment
from tasks.models import CacheState, CompileCache, CompileConfig
from tasks.text import first_line

if TYPE_CHECKING:
    from tasks.phases import PhaseRun
    from tasks.targets import Workload

# Counter names torch 2.13 keeps for its cache layers (torch/_dynamo/utils.py ``counters``):
# inductor's FX graph cache and AOTAutograd's cache, each per compiled graph.
FXGRAPH = {"hit": "fxgraph_cache_hit", "miss": "fxgraph_cache_miss", "bypass": "fxgraph_cache_bypass"}
AUTOGRAD = {"hit": "autograd_cache_hit", "miss": "autograd_cache_miss", "bypass": "autograd_cache_bypass"}
CACHE_GROUPS = ("inductor", "aot_autograd")  # counter groups whose "*cache*" entries are recorded


def compile_callable(fn: Callable[..., Any], cfg: CompileConfig) -> Callable[..., Any]:
    """``torch.compile(fn, ...)``, or ``fn.compile(...)`` in place for ``method: module_compile``."""
    kwargs: dict[str, Any] = {"backend": cfg.backend, "fullgraph": cfg.fullgraph, "dynamic": cfg.dynamic}
    if cfg.mode is not None:
        kwargs["mode"] = cfg.mode
    if cfg.options:
        kwargs["options"] = dict(cfg.options)
    if cfg.method == "module_compile":
        if not isinstance(fn, torch.nn.Module):
            raise TypeError(f"compile.method 'module_compile' needs an nn.Module target, got {type(fn).__name__}")
        fn.compile(**kwargs)
        return fn
    return torch.compile(fn, **kwargs)


def eager_callable(fn: Callable[..., Any], cfg: CompileConfig) -> Callable[..., Any]:
    """The uncompiled call of ``fn``: ``mod.compile()`` compiles ``mod.__call__`` in place, so
    for ``module_compile`` the eager side calls the module's own ``_call_impl`` (the path
    ``__call__`` takes when nothing is compiled: hooks, then ``forward``)."""
    if cfg.method == "module_compile" and isinstance(fn, torch.nn.Module):
        return fn._call_impl
    return fn


def check_scope(cfg: CompileConfig) -> None:
    """Raise for a scope and method that cannot go together, before anything compiles."""
    if cfg.scope == "step" and cfg.method == "module_compile":
        raise TypeError("compile.scope 'step' compiles a step function; it cannot go with method 'module_compile'")


def compiled_target(work: Workload, run: PhaseRun, cfg: CompileConfig) -> Callable[..., Any]:
    """What ``torch.compile`` is applied to: the target (``scope: model``), or the phase's whole
    step (``scope: step``: forward, loss, backward, optimizer). The graph analysis traces this."""
    return run.side(work.fn) if cfg.scope == "step" else work.fn


def compiled_callable(work: Workload, run: PhaseRun, cfg: CompileConfig) -> Callable[..., Any]:
    """The compiled side's call: the phase's step around the compiled target (``scope: model``),
    or the whole step compiled (``scope: step``; for inference the step is the forward)."""
    check_scope(cfg)
    if cfg.scope == "step":
        return compile_callable(compiled_target(work, run, cfg), cfg)
    return run.side(compile_callable(work.fn, cfg))


def needs_own_check_compile(cfg: CompileConfig, check_enabled: bool) -> bool:
    """Whether the check compiles apart, with ``fallback_random``: only inductor has the setting,
    and a user who set it in ``compile.options`` times that code anyway."""
    return check_enabled and cfg.backend == "inductor" and "fallback_random" not in cfg.options


@contextmanager
def check_randomness() -> Iterator[None]:
    """Inductor's random ops fall back to eager's RNG for the check's compile (harness accuracy runs)."""
    with torch._inductor.config.patch(fallback_random=True):
        yield


def forget_compiled() -> None:
    """Clear every in-memory compile cache of this process: Dynamo's caches and compiled code,
    inductor's registered caches and its loaded generated modules, and torch's counters. The
    on-disk caches stay: a compile after this one loads from them or compiles anew, and its
    counters say which."""
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.utils import clear_caches

    torch._dynamo.reset()
    clear_caches()
    PyCodeCache.cache_clear()
    counters.clear()


def probe_cpu_isa(device: torch.device, cfg: CompileConfig) -> float | None:
    """Run inductor's probe of the CPU's vector instructions (``pick_vec_isa``) now, and return
    the seconds it took; None where inductor would not run it (a GPU, another backend).

    Inductor probes once per process, on its first CPU compile: it builds a test program for each
    instruction set the CPU reports and loads each in a subprocess. In a process whose cache
    directory is empty that took 8-10 s on our 2-core machine (1.4 s with the test programs
    already built), against 2 s for compiling a softmax. A fresh process's measured compile
    (``cache: cold``, ``shared``) would carry it whatever the graph, so it runs before, and the
    result records it as ``compile_cache.isa_probe_s``. A warm experiment calls it too, before
    its priming compile, and records nothing: its measured compile never paid it.

    The test programs are a fact of the machine, not of any compile: they are built where
    inductor builds them in a process nothing isolates (``isa_probe_dir``), once a machine, and a
    cold cache directory holds only what the measured compile makes. Every later process on the
    machine only loads them (the 1.4 s above, not 8-10 s).
    """
    if device.type != "cpu" or cfg.backend != "inductor":
        return None
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    start = time.perf_counter()
    try:
        with _inductor_cache_dir(isa_probe_dir()):
            pick_vec_isa()
    except Exception:  # the measured compile meets the same fault and records it
        return None
    return time.perf_counter() - start


def isa_probe_dir() -> Path:
    """Where inductor's CPU probe programs are built and kept: inductor's own default cache directory
    (``/tmp/torchinductor_<user>``), shared by every process of the user on the machine, as when nothing
    sets ``TORCHINDUCTOR_CACHE_DIR``; each program is named by the hash of its source and flags."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(default_cache_dir())


@contextmanager
def _inductor_cache_dir(path: Path) -> Iterator[None]:
    """Inductor's cache directory set to ``path`` (read at each use) for the ``with`` body, then back."""
    saved = {INDUCTOR_CACHE_ENV: os.environ.get(INDUCTOR_CACHE_ENV)}
    os.environ[INDUCTOR_CACHE_ENV] = str(path)
    try:
        yield
    finally:
        restore_environment(saved)


def cache_counters() -> dict[str, int]:
    """The cache counters torch kept since they were last cleared, as ``group.name: count``."""
    return {
        f"{group}.{name}": int(count)
        for group in CACHE_GROUPS
        for name, count in counters[group].items()
        if "cache" in name and count
    }


def cache_use(state: CacheState, primed: bool, seen: dict[str, int]) -> CompileCache:
    """What the measured compile took from the caches, from the counters it left (``cache_counters``)."""
    fx = {k: seen.get(f"inductor.{name}", 0) for k, name in FXGRAPH.items()}
    ag = {k: seen.get(f"aot_autograd.{name}", 0) for k, name in AUTOGRAD.items()}
    known = {f"inductor.{n}" for n in FXGRAPH.values()} | {f"aot_autograd.{n}" for n in AUTOGRAD.values()}
    return CompileCache(
        state=state,
        primed=primed,
        fxgraph_hit=fx["hit"],
        fxgraph_miss=fx["miss"],
        fxgraph_bypass=fx["bypass"],
        autograd_hit=ag["hit"],
        autograd_miss=ag["miss"],
        autograd_bypass=ag["bypass"],
        other={k: v for k, v in sorted(seen.items()) if k not in known},
    )


def analyse_graphs(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[int | None, int | None, list[str]]:
    """Graph count, graph breaks and their reasons, from ``torch._dynamo.explain`` of the callable
    that is compiled (``compiled_target``: a training step under ``scope: step``, so breaks in the
    loss, backward and optimizer count) on ``inputs`` (a copy: the trace runs the target).

    ``explain`` resets Dynamo before and after its own trace. Some reasons it gives are
    internal (``generic_jump TensorVariable()``); the user-facing message Dynamo logged
    for the same source line replaces them.
    """
    counters.clear()
    try:
        explained = torch._dynamo.explain(fn)(*inputs)
    except Exception:
        return None, None, []
    logged = [*counters["unimplemented"], *counters["graph_break"]]
    reasons = [_describe_break(r, logged) for r in explained.break_reasons if r.graph_break]
    counters.clear()
    return explained.graph_count, len(reasons), reasons


def _describe_break(reason: Any, logged: list[str]) -> str:
    text = first_line(str(reason.reason))
    frame = reason.user_stack[-1] if reason.user_stack else None
    if frame is None:
        return text
    where = f'File "{frame.filename}", line {frame.lineno}'
    if text.startswith("generic_jump"):
        text = next((m.splitlines()[0] for m in logged if where in m), text)
    return f"{text} ({Path(frame.filename).name}:{frame.lineno})"
