"""The interleaving section (``fidelity.py interleaving``): what interleaving the sides costs each.

In this process, the same eager and compiled callables timed by ``blocked_autorange`` (a loop of
one side), by compilebench's CPU timer alone, interleaved as the procedure interleaves them, and
interleaved one call per block; and the time of a side's calls just after the other side's, call
by call. A side's first calls after the other's are slower than its steady state; a sample taken
right after a switch measures the switch."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from benchmarks.fidelity_sections.reference import REFERENCE_MIN_RUN_S, ROUNDS, measure
from benchmarks.fidelity_sections.tables import fmt_ms
from benchmarks.fidelity_sections.workloads import gelu_mlp
from tasks.models import TimingConfig
from tasks.targets import build
from tasks.timers import CpuTimer, plan

SWITCH_WORKLOADS = ("gelu 512x256", "gelu 64x64", "seed.foo3 1024x1024")  # ~1 ms, ~25 us, ~0.2 ms compiled
SWITCH_SAMPLES = 40  # timed blocks per side in each way of interleaving
SWITCH_STRETCH_MS, SWITCH_MIN_CALLS, SWITCH_MAX_CALLS = 10.0, 20, 400  # one side's stretch before the switch
SWITCH_STRETCHES = 60  # stretches per direction; the profile is the median at each position
SWITCH_POSITIONS = (0, 1, 2, 3, 5, 10, 20, 50, 100)  # calls after the switch that the profile shows


def switch_profile(first: Callable[[], Any], then: Callable[[], Any]) -> list[float | None]:
    """How slow ``then`` is just after ``first``: the median time of ``then``'s k-th call after a
    stretch of ``first``'s calls (``SWITCH_STRETCH_MS`` long, within the call bounds), over
    ``SWITCH_STRETCHES`` stretches, for each k of ``SWITCH_POSITIONS``, divided by its steady time
    (the median over the second half of the stretch); None past the stretch's length."""
    import gc

    start = time.perf_counter()
    for _ in range(SWITCH_MIN_CALLS):
        then()
    per_call_ms = (time.perf_counter() - start) * 1e3 / SWITCH_MIN_CALLS
    length = min(SWITCH_MAX_CALLS, max(SWITCH_MIN_CALLS, int(SWITCH_STRETCH_MS / per_call_ms)))
    times: list[list[float]] = [[] for _ in range(length)]
    gc.disable()
    try:
        for _ in range(SWITCH_STRETCHES):
            for _ in range(length):
                first()
            for position in range(length):
                start = time.perf_counter()
                then()
                times[position].append(time.perf_counter() - start)
    finally:
        gc.enable()
    medians = [statistics.median(t) for t in times]
    steady = statistics.median(medians[length // 2 :])
    return [medians[k] / steady if k < length else None for k in SWITCH_POSITIONS]


def switch_workload(name: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """One of ``SWITCH_WORKLOADS``: its function and inputs, on the CPU."""
    cpu = torch.device("cpu")
    if name.startswith("gelu "):
        rows, dim = (int(n) for n in name.split()[1].split("x"))
        return gelu_mlp(cpu, rows, dim)
    target, shape = name.split()
    work = build(target, cpu, {"shape": [int(n) for n in shape.split("x")]})
    return work.fn, work.inputs


def interleavings(calls: Sequence[Callable[[], Any]], clock: Callable[[], float]) -> dict[str, list[float]]:
    """Each side's median (ms) by compilebench's CpuTimer: alone, interleaved one call per block
    (one untimed call, then one timed, side by side), and interleaved as the procedure does it
    (blocks of ``BLOCK_TARGET_MS``, each timed block after an untimed one of the same side)."""
    timer = CpuTimer(clock)
    estimates = [timer.estimate(c) for c in calls]
    block = max(plan(e, TimingConfig(), True).block_size for e in estimates)
    plans = [plan(e, TimingConfig(repeats=SWITCH_SAMPLES), True, block_size=block) for e in estimates]
    singles = [plan(e, TimingConfig(repeats=SWITCH_SAMPLES), True, block_size=1) for e in estimates]
    for call, p in zip(calls, plans, strict=True):
        timer.warm(call, p.warmup)

    def medians(sides: Any) -> list[float]:
        return [statistics.median(side.samples_ms) for side in sides]

    return {
        "alone": [medians(timer.interleaved([c], [p], SWITCH_SAMPLES))[0] for c, p in zip(calls, plans, strict=True)],
        "interleaved, one call per block": medians(timer.interleaved(calls, singles, SWITCH_SAMPLES)),
        "interleaved (the procedure)": medians(timer.interleaved(calls, plans, SWITCH_SAMPLES)),
    }


def section_interleaving() -> None:
    """What interleaving the sides costs each of them, in this process on one thread: the same
    eager and compiled callables timed by blocked_autorange (a loop of one side: the reference),
    by compilebench's CpuTimer alone, interleaved one call per block, and interleaved as the
    procedure does it; then how slow a side's calls are just after the other side's. CPU time of
    this thread (``thread_time``) as well as wall time: preemption by other processes does not
    enter the former."""
    torch.set_num_threads(1)
    print("\n## Interleaving eager and compiled: what a switch between sides costs (this process, 1 thread)\n")
    print(
        f"gelu(x @ w + b) + x and seed.foo3, inductor, under no_grad. {ROUNDS} rounds; each ratio is the median "
        "over rounds of (compilebench's CpuTimer / blocked_autorange on the same callable in the same round).\n"
    )
    print("| workload | clock | way | eager / reference | compiled / reference | reference eager, compiled |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    profiles = []
    for name in SWITCH_WORKLOADS:
        fn, inputs = switch_workload(name)
        with torch.no_grad():
            compiled = torch.compile(fn)
            compiled(*inputs)
            calls = [functools.partial(fn, *inputs), functools.partial(compiled, *inputs)]
            for clock_name, clock in (("thread", time.thread_time), ("wall", time.perf_counter)):
                ratios: dict[str, list[list[float]]] = {}
                refs: list[list[float]] = []
                for _ in range(ROUNDS):
                    ref = [measure(c, REFERENCE_MIN_RUN_S, timer=clock).median * 1e3 for c in calls]
                    refs.append(ref)
                    for way, ms in interleavings(calls, clock).items():
                        ratios.setdefault(way, []).append([m / r for m, r in zip(ms, ref, strict=True)])
                shown_ref = ", ".join(fmt_ms(statistics.median(r[i] for r in refs)) for i in range(2))
                for way, per_round in ratios.items():
                    e, c = (statistics.median(r[i] for r in per_round) for i in range(2))
                    print(f"| {name} | {clock_name} | {way} | {e:.3f} | {c:.3f} | {shown_ref} |")
            profiles.append((name, "compiled after eager", switch_profile(calls[0], calls[1])))
            profiles.append((name, "eager after compiled", switch_profile(calls[1], calls[0])))
    print(f"\nA side's k-th call after {SWITCH_STRETCH_MS:g} ms of the other's, / its steady time (wall, medians):\n")
    print("| workload | calls | " + " | ".join(f"k={k}" for k in SWITCH_POSITIONS) + " |")
    print("| --- | --- |" + " ---: |" * len(SWITCH_POSITIONS))
    for shape, what, profile in profiles:
        print(f"| {shape} | {what} | " + " | ".join("-" if x is None else f"{x:.2f}" for x in profile) + " |")
