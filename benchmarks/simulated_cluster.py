"""A GPU cluster simulated on a simulated clock, behind the runner's pool seam
(``orchestrator.execution.pool.WorkerPool``), so that the real driver (the policy, the runner's loop,
the journal, the progress line) runs a sweep of any size with nothing but its own work to do.

Method: every event the pool will report is put in a heap at its simulated time; ``wait`` moves the
clock to the earliest one (or by its timeout, whichever is first) and hands back every event due
then, as Ray's ``ray.wait`` hands back everything ready once something is. Nothing sleeps.

- **Nodes**: ``nodes`` nodes sharing ``gpus`` GPUs (model ``H100``, ``CORES_PER_GPU`` cores each);
  ``late_nodes`` of them join ``late_join_s`` into the run (an autoscaler's), and one node is lost
  once ``lose_after`` results have come back: its workers die with it (``Died.node_lost``) and the
  node is listed no more.
- **Workers** are ready ``START_S`` after they were started (Ray placing the actor, torch's import).
- **An experiment** takes a compile (``COMPILE_S``, log-uniform) and its timing (``TIMING_S``,
  uniform), or ``duration_s`` each when set; ``COMPILE_ERROR_RATE`` of them end as ``compile_error``
  results and ``DEATH_RATE`` with the death of their worker's process (retried by the policy).
- **A result** is a real run's (the first of ``tests/data/seed-cpu.json``, about 4 KB of JSON with its
  raw samples), given the experiment's identity, its times and samples scaled by a random factor:
  the driver validates, journals and reports what a real worker sends.

The pool counts the CPU time spent in its own methods (``cpu_s``, this thread's), so that a benchmark
can take it out of the process's and keep the driver's alone.
"""

from __future__ import annotations

import copy
import heapq
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.execution.events import Died, Event, Finished, Ready
from orchestrator.execution.policy import Start
from orchestrator.machines.nodes import Node
from tasks.models import ErrorInfo, Experiment, result_identity

TEMPLATE = Path(__file__).resolve().parents[1] / "tests" / "data" / "seed-cpu.json"  # a real run's report
GPU_MODEL = "H100"
CORES_PER_GPU = 12  # cores per GPU of an 8-GPU node of 96 cores (AWS p5: 192 vCPUs for 8 H100)
START_S = (5.0, 30.0)  # a worker's start: Ray placing the actor and its process importing torch
COMPILE_S = (1.0, 60.0)  # log-uniform: most compiles are short, a few take a minute
TIMING_S = (1.0, 10.0)  # uniform: the warmup and timed repeats of both sides
COMPILE_ERROR_RATE = 0.015  # experiments whose compile fails: a result with status compile_error
DEATH_RATE = 0.005  # experiments whose worker process dies (a segfault): the policy retries them
NODE_GONE_S = 0.5  # how long Ray takes to fail a call on a lost node, or a start placed on one


class SimClock:
    """Simulated seconds since the run began; the runner's ``clock``."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass
class Scenario:
    """What the simulated cluster does: its size, when nodes join and leave, how long experiments take."""

    nodes: int = 32
    gpus: int = 256
    late_nodes: int = 4  # of ``nodes``: they join ``late_join_s`` after the start
    late_join_s: float = 600.0
    lose_after: int | None = None  # results back before one node is lost (None: never)
    duration_s: float | None = None  # every experiment's compile and timing, each (None: drawn)
    compile_error_rate: float = COMPILE_ERROR_RATE
    death_rate: float = DEATH_RATE
    seed: int = 0

    def node_list(self) -> list[tuple[Node, float]]:
        """Each node and the simulated time it joins; GPUs spread as evenly as they go."""
        per, extra = divmod(self.gpus, self.nodes)
        out = []
        for i in range(self.nodes):
            gpus = per + (i < extra)
            node = Node(
                node_id=f"{i:04d}" + "0" * 52,
                hostname=f"gpu-{i:03d}",
                address=f"10.0.{i // 250}.{i % 250}",
                cpus=gpus * CORES_PER_GPU,
                gpus=gpus,
                gpu_models=[GPU_MODEL],
            )
            out.append((node, self.late_join_s if i >= self.nodes - self.late_nodes else 0.0))
        return out


@dataclass
class _Worker:
    node_id: str
    ready: bool = False
    call: int = 0  # the token of its pending call; 0: none
    dead: bool = False  # its node was lost while it held no call


@dataclass
class SimPool:
    """The pool of a simulated cluster (see the module); carries out what the runner asks on ``clock``."""

    scenario: Scenario
    clock: SimClock = field(default_factory=SimClock)
    cpu_s: float = 0.0  # CPU time spent in this pool's own methods
    results_sent: int = 0
    deaths: int = 0
    node_lost_deaths: int = 0
    requests: int = 0  # calls to the autoscaler
    first_dispatch_wall: float | None = None  # time.time() at the first submit
    first_dispatch_cpu: float | None = None  # time.process_time() then
    lost_node: str | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.scenario.seed)
        self.joins = self.scenario.node_list()
        self.workers: dict[int, _Worker] = {}
        self.heap: list[tuple[float, int, int, str, Any]] = []  # (time, seq, worker, kind, payload)
        self.seq = 0
        self.template = _template()

    # -- the seam -----------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        with self._timed():
            return [n for n, at in self.joins if at <= self.clock.now and n.node_id != self.lost_node]

    def start(self, start: Start) -> None:
        with self._timed():
            worker = self.workers[start.worker_id] = _Worker(start.node_id)
            worker.call = self._token()
            if start.node_id == self.lost_node:
                self._push(NODE_GONE_S, start.worker_id, "lost", worker.call)
            else:
                self._push(self.rng.uniform(*START_S), start.worker_id, "ready", worker.call)

    def submit(self, worker_id: int, payload: dict[str, Any]) -> None:
        with self._timed():
            if self.first_dispatch_wall is None:
                self.first_dispatch_wall, self.first_dispatch_cpu = time.time(), time.process_time()
            worker = self.workers[worker_id]
            worker.call = self._token()
            if worker.dead:
                self._push(NODE_GONE_S, worker_id, "lost", worker.call)
                return
            s = self.scenario
            if s.duration_s is not None:
                compile_s = timing_s = s.duration_s
            else:
                compile_s = math.exp(self.rng.uniform(math.log(COMPILE_S[0]), math.log(COMPILE_S[1])))
                timing_s = self.rng.uniform(*TIMING_S)
            fate = self.rng.random()
            if fate < s.death_rate:
                self._push(self.rng.uniform(0.1, compile_s), worker_id, "died", worker.call)
            elif fate < s.death_rate + s.compile_error_rate:
                self._push(compile_s, worker_id, "compile_error", (worker.call, payload, compile_s))
            else:
                self._push(compile_s + timing_s, worker_id, "ok", (worker.call, payload, compile_s))

    def wait(self, timeout_s: float) -> list[Event]:
        with self._timed():
            until = self.clock.now + max(0.0, timeout_s)
            self._lose_node_if_due()
            if self.heap and self.heap[0][0] <= until:
                until = self.heap[0][0]
            self.clock.now = max(self.clock.now, until)
            events: list[Event] = []
            while self.heap and self.heap[0][0] <= self.clock.now:
                _, _, worker_id, kind, payload = heapq.heappop(self.heap)
                event = self._event(worker_id, kind, payload)
                if event is not None:
                    events.append(event)
            return events

    def silent_ranks(self, worker_id: int) -> list[int]:
        """A gang's ranks that had not answered: the simulated cluster runs one-process workers only."""
        return []

    def kill(self, worker_id: int) -> None:
        with self._timed():
            self.workers.pop(worker_id, None)

    def request(self, bundles: Sequence[dict[str, float]]) -> None:
        self.requests += 1

    def shutdown(self) -> None:
        self.workers.clear()
        self.heap.clear()

    # -- what happens -------------------------------------------------------------------

    def _event(self, worker_id: int, kind: str, payload: Any) -> Event | None:
        worker = self.workers.get(worker_id)
        token = payload[0] if isinstance(payload, tuple) else payload
        if worker is None or worker.call != token:
            return None  # killed since, or its node lost: that call's end was reported already
        worker.call = 0
        if kind == "ready":
            worker.ready = True
            gpu = str(worker_id % 8)
            return Ready(worker_id, f"host-{worker.node_id[:4]}", 10_000 + worker_id, [gpu])
        if kind == "died":
            del self.workers[worker_id]
            self.deaths += 1
            message = "The actor died unexpectedly before finishing this task (Worker exit: SIGSEGV)"
            return Died(worker_id, ErrorInfo(type="ray.exceptions.ActorDiedError", message=message))
        if kind == "lost":
            del self.workers[worker_id]
            self.node_lost_deaths += 1
            return Died(worker_id, _node_lost_error(), node_lost=True)
        _, experiment, compile_s = payload
        self.results_sent += 1
        return Finished(worker_id, self._result(worker_id, worker, experiment, kind, compile_s))

    def _lose_node_if_due(self) -> None:
        """Once ``lose_after`` results are back, the most loaded node is lost with every worker on it."""
        lose_after = self.scenario.lose_after
        if self.lost_node is not None or lose_after is None or self.results_sent < lose_after:
            return
        on_node: dict[str, int] = {}
        for w in self.workers.values():
            on_node[w.node_id] = on_node.get(w.node_id, 0) + 1
        self.lost_node = max(on_node, key=lambda n: on_node[n]) if on_node else self.joins[0][0].node_id
        for worker_id, worker in self.workers.items():
            if worker.node_id != self.lost_node:
                continue
            if worker.call:
                worker.call = self._token()
                self._push(NODE_GONE_S, worker_id, "lost", worker.call)
            else:
                worker.dead = True

    def _result(self, worker_id: int, worker: _Worker, payload: dict[str, Any], kind: str, compile_s: float) -> dict:
        exp = Experiment.model_validate(payload)
        result = dict(self.template)
        for key, value in result_identity(exp).items():
            result[key] = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
        now = self.clock.now
        result["started_at"], result["finished_at"] = now - compile_s, now
        result["worker"] = {
            **self.template["worker"],
            "node_id": worker.node_id,
            "pid": 10_000 + worker_id,
            "gpu_ids": [str(worker_id % 8)],
            "gpu_model": GPU_MODEL,
        }
        if kind == "compile_error":
            result.update(
                status="compile_error",
                error={"type": "torch._dynamo.exc.BackendCompilerFailed", "message": "backend='inductor' raised"},
                compiled=None,
                speedup=None,
                speedup_ci=None,
            )
            return result
        scale = self.rng.uniform(0.5, 2.0)
        for side in ("eager", "compiled"):
            timing = dict(self.template[side])
            timing["samples_ms"] = [s * scale for s in timing["samples_ms"]]
            for key in ("median_ms", "min_ms", "mean_ms", "first_call_ms"):
                timing[key] = timing[key] * scale
            result[side] = timing
        result["compile_latency_s"] = compile_s
        return result

    # -- helpers ------------------------------------------------------------------------

    def _token(self) -> int:
        self.seq += 1
        return self.seq

    def _push(self, after_s: float, worker_id: int, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (self.clock.now + after_s, self.seq, worker_id, kind, payload))

    def _timed(self) -> _Timed:
        return _Timed(self)


class _Timed:
    """Adds the CPU time of a block (this thread's) to the pool's ``cpu_s``."""

    def __init__(self, pool: SimPool) -> None:
        self.pool = pool

    def __enter__(self) -> None:
        self.start = time.thread_time()

    def __exit__(self, *exc: object) -> None:
        self.pool.cpu_s += time.thread_time() - self.start


def _node_lost_error() -> ErrorInfo:
    return ErrorInfo(
        type="ray.exceptions.ActorDiedError",
        message="The actor died because its node has died. Node Id: lost",
    )


def _template() -> dict[str, Any]:
    """The first result of a real run's report, as a worker sends it (no ``replicate`` or ``attempts``: the
    driver stamps those)."""
    result = copy.deepcopy(json.loads(TEMPLATE.read_text())["results"][0])
    for key in ("replicate", "attempts", "lost_nodes", "requested", "reserved"):
        result.pop(key, None)
    return result
