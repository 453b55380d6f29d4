"""The reference timer every section measures against, and the turn-taking that pairs it.

The reference is ``torch.utils.benchmark.Timer.blocked_autorange`` (``measure``), either in this
process or in a process of its own (``Reference``, whose other end is ``reference_child``: a fresh
process that has run nothing else). Two measurements compared are taken in turns, which goes first
alternating (``take_turns``), so that a machine drifting between them favours neither. It imports
``tasks/`` and nothing of the sections: every section may import it."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.utils.benchmark as tbench

from tasks.targets import build

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "benchmarks" / "fidelity.py"  # started with --reference-child: the reference process
REFERENCE_MIN_RUN_S = 0.15  # blocked_autorange's measuring time per workload and round
ROUNDS = 7  # ours, reference, ours, reference...: each ratio pairs neighbours in time; the median is kept
E2E_REFERENCE_MIN_RUN_S = 0.3  # blocked_autorange's measuring time per side and round in the reference
E2E_REFERENCE_ROUNDS = 5  # eager, compiled, eager, compiled...: the median of each side's rounds
DRIFT_WINDOW_S = 0.5  # blocked_autorange's measuring time per side and window
HEAP_SIZES = (256, 4096, 65536, 300_000, 1_000_000, 2_100_000)  # bytes: the sizes fragment_heap mixes


def measure(
    fn: Callable[..., Any],
    min_run_time: float,
    inputs: tuple[Any, ...] | None = None,
    timer: Callable[[], float] | None = None,
) -> tbench.Measurement:
    """``blocked_autorange`` of ``fn()`` (or ``fn(*inputs)``), ``min_run_time`` seconds of it, by
    ``timer`` (torch's default, ``perf_counter``, unless given)."""
    stmt, env = ("fn()", {"fn": fn}) if inputs is None else ("fn(*inputs)", {"fn": fn, "inputs": inputs})
    clock: dict[str, Any] = {} if timer is None else {"timer": timer}  # torch's default syncs an accelerator
    return tbench.Timer(stmt=stmt, globals=env, **clock).blocked_autorange(min_run_time=min_run_time)


def take_turns(sides: Mapping[str, Callable[[], dict[str, float]]], turns: int) -> dict[str, list[dict[str, float]]]:
    """``turns`` answers of each side, one side after the other, which goes first alternating (in
    the mapping's order on even turns, reversed on odd ones); each side's answers in order."""
    series: dict[str, list[dict[str, float]]] = {who: [] for who in sides}
    order = list(sides.items())
    for k in range(turns):
        for who, answer in order if k % 2 == 0 else order[::-1]:
            series[who].append(answer())
    return series


def windows(a: Reference, b: Reference, pairs: int) -> dict[str, list[dict[str, float]]]:
    """``pairs`` windows of ``DRIFT_WINDOW_S`` of each reference, taking turns (``take_turns``)."""
    return take_turns({"a": lambda: a.time(1, DRIFT_WINDOW_S), "b": lambda: b.time(1, DRIFT_WINDOW_S)}, pairs)


class Reference:
    """A long-lived reference process for one workload (``--reference-child``): it builds the target
    as the worker does (seeded), compiles it with ``torch.compile``'s defaults, under ``no_grad``
    with modules in ``eval()``, at ``threads`` threads, pinned to ``cores`` (the worker's) and with
    the C allocator set as the worker sets it (``timing.allocator: steady``, the default); then, each
    time it is asked, times both sides by ``blocked_autorange`` in alternating rounds. It has run
    nothing else: a fresh process, whose build and compile are paid once."""

    def __init__(self, target: str, params: dict[str, Any], threads: int, seed: int, cores: list[int] | None) -> None:
        request = json.dumps({"target": target, "params": params, "threads": threads, "seed": seed, "cores": cores})
        cmd = [sys.executable, str(ENTRY), "--reference-child", request]
        self.target = target
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def time(self, rounds: int, window_s: float) -> dict[str, float]:
        """Each side's median (ms) over ``rounds`` rounds of eager then compiled, ``window_s`` each."""
        return self.ask({"rounds": rounds, "window_s": window_s})

    def ask(self, request: dict[str, Any]) -> dict[str, float]:
        """Send one request (``reference_child``'s); its answer."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the reference process of {self.target} exited with code {self.proc.wait()}")
        medians: dict[str, float] = json.loads(line)
        return medians

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the child's loop ends
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def reference_child(request: dict[str, Any]) -> None:
    """In a fresh process: prepare the workload as ``Reference`` says, then answer each request on
    stdin (``{"rounds": n, "window_s": s}``) with both sides' medians (ms) as one JSON line;
    ``{"fragment": true}`` by ``fragment_heap`` (its tensors kept for the process's life) and ``{}``;
    and ``{"experiment": payload}`` by running it here through compilebench's whole procedure
    (``tasks.worker.run_payload``, one core) and answering its two medians, after which the
    reference's own compiled callable is called once, untimed (the procedure resets Dynamo)."""
    from tasks.isolation import pin, set_allocator

    if request.get("cores"):
        pin(request["cores"])  # every thread of this process, as a worker pins itself
    set_allocator("steady")  # as the worker times: glibc heap-only, never trimmed
    torch.set_num_threads(request["threads"])
    torch.manual_seed(request["seed"])
    work = build(request["target"], torch.device("cpu"), request["params"])
    fn, inputs = work.fn, work.inputs
    if isinstance(fn, torch.nn.Module):
        fn.eval()
    with torch.no_grad():
        compiled = torch.compile(fn)
        compiled(*inputs)  # compiles
        kept: list[torch.Tensor] = []  # what fragment_heap leaves alive, for the process's life
        for line in sys.stdin:
            ask = json.loads(line)
            if ask.get("fragment"):
                kept += fragment_heap()
                print(json.dumps({}), flush=True)
                continue
            if "experiment" in ask:
                print(json.dumps(procedure_medians(ask["experiment"])), flush=True)
                compiled(*inputs)  # compiled again, outside any timing, if the procedure's reset dropped it
                continue
            rounds: dict[str, list[float]] = {"eager": [], "compiled": []}
            for _ in range(ask["rounds"]):
                for side, call in (("eager", fn), ("compiled", compiled)):
                    rounds[side].append(measure(call, ask["window_s"], inputs).median * 1e3)
            print(json.dumps({side: statistics.median(ms) for side, ms in rounds.items()}), flush=True)


def procedure_medians(payload: dict[str, Any]) -> dict[str, float]:
    """Each side's median (ms) of one experiment through compilebench's whole procedure in this process
    (build, compile, warm-up, interleaved timing), as a worker runs it on one core; NaN if it failed."""
    from tasks.worker import run_payload

    with torch.enable_grad():  # the procedure sets the phase's grad mode itself, as in a worker
        result = run_payload(payload, {"cpus": 1})
    return {side: (result.get(side) or {}).get("median_ms", float("nan")) for side in ("eager", "compiled")}


def fragment_heap(count: int = 3000, passing: int = 500, seed: int = 0) -> list[torch.Tensor]:
    """Leave this process's heap as varied experiments leave a long-lived worker's: ``count`` tensors
    of mixed sizes (``HEAP_SIZES``) written once, every other one freed, then ``passing`` more of
    random sizes made and freed. Returns the half that stays alive (the caller keeps it, as a worker
    keeps modules and caches)."""
    rng = random.Random(seed)
    tensors = [torch.ones(rng.choice(HEAP_SIZES) // 4) for _ in range(count)]
    del tensors[::2]
    through = [torch.ones(rng.randint(1000, 3_000_000) // 4) for _ in range(passing)]
    del through
    return tensors
