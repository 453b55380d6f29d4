"""The pool of long-lived workers: Ray actors, each holding one GPU (or a set of cores) for life.

The only module of the scheduler that calls Ray. It starts an actor where the policy says
(``NodeAffinitySchedulingStrategy(soft=False)``: that node or nowhere), with ``num_gpus`` and
``num_cpus`` held for the actor's life, so Ray sets ``CUDA_VISIBLE_DEVICES`` once, before
anything in the process touches CUDA. It sends experiments to actors, waits for what comes
back (``ray.wait`` with a timeout, so that deadlines can be enforced), kills actors, lists the
cluster's nodes and passes requests for capacity to the autoscaler. What comes back is told
to the runner as plain events: ``Ready``, ``Finished``, ``Died``.

How a death shows up: an actor whose process died (segfault, ``os._exit``, SIGKILL, the kernel's
OOM killer) or whose node was lost fails its pending call with an ``ActorDiedError`` (a node
that vanishes before its actor starts: ``ActorUnschedulableError``); one killed by Ray's memory
monitor fails it with ``ray.exceptions.OutOfMemoryError`` (``Died.oom``). A death is a node loss
(``Died.node_lost``) when Ray's message says the node died, was terminated or preempted, or
when Ray no longer lists the actor's node as alive. An exception raised by the worker's own
code (not the target's: the procedure never raises) is treated as a death too, and the actor
is killed: its state cannot be trusted. A result that comes back with ``RETIRE`` beside it is
a result (``Finished.retire``): the runner records it, then kills the worker.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.execution.cluster import describe
from orchestrator.execution.policy import Start
from orchestrator.machines.nodes import Node
from tasks.models import Calibration, ErrorInfo, WorkerLimits
from tasks.worker import DIED, RETIRE  # keys in what a worker returns: its experiment's process died; replace it

# What Ray's errors say when an actor or task died with its node (Ray 2.60's GCS and core worker messages).
NODE_LOST_SIGNS = (
    "its node has died",
    "the actor's node was",  # ... terminated, preempted
    "node it was running on is dead",
    "NodeAffinitySchedulingStrategy doesn't exist",  # the node left before the actor was placed
)


class Runs(Protocol):
    def run(self, payload: dict[str, Any]) -> dict[str, Any]: ...


# What a worker runs experiments with: built once per actor from its placement (``node_id``,
# ``gpu_ids``, ``cpus``, ``gpu_model``, ``limits``, ``calibrate``, ``compile_cache``: the run's shared
# compile cache, for ``compile.cache: shared``). The default is ``tasks.worker.Worker`` (the benchmark
# procedure, reset between experiments); tests of the scheduler itself inject a stub that needs
# no torch.
Executor = Callable[[dict[str, Any]], Runs]


def _default_executor(placement: dict[str, Any]) -> Runs:
    from tasks.worker import Worker

    return Worker(placement)


@ray.remote(max_restarts=0, max_task_retries=0)
class WorkerActor:
    """One long-lived worker: runs the experiments it is sent, one at a time."""

    def __init__(
        self,
        cores: int,
        gpu_model: str | None,
        executor: Executor | None,
        limits: dict[str, Any] | None = None,
        calibrate: bool = False,
        compile_cache: str | None = None,
    ) -> None:
        ctx = ray.get_runtime_context()
        self.placement = {
            "node_id": ctx.get_node_id(),
            "gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
            "cpus": cores,
            "gpu_model": gpu_model,
            "limits": limits or {},
            "calibrate": calibrate,
            "compile_cache": compile_cache,
        }
        self.worker = (executor or _default_executor)(self.placement)

    def ready(self) -> dict[str, Any]:
        return {
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "gpu_ids": self.placement["gpu_ids"],
            "calibration": getattr(self.worker, "calibration", None),  # its device's probe, with calibrate
        }

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self.worker.run(payload)


@dataclass(frozen=True)
class Ready:
    worker_id: int
    hostname: str
    pid: int
    gpu_ids: list[str]
    calibration: Calibration | None = None  # what its device's probe measured (run --calibrate)


@dataclass(frozen=True)
class Finished:
    worker_id: int
    result: dict[str, Any]  # a Result as plain data
    retire: str | None = None  # why the worker must be replaced after this result (it stands)


@dataclass(frozen=True)
class Died:
    worker_id: int
    error: ErrorInfo
    oom: bool = False  # killed by Ray's memory monitor
    alive: bool = False  # only the experiment's own process died; the worker lives on
    node_lost: bool = False  # it died with its node


Event = Ready | Finished | Died


class WorkerPool(Protocol):
    """What the runner asks of a pool of workers: Ray's (``Pool``), or one simulated on a simulated
    clock (``benchmarks/simulated_cluster.py``) that measures the driver without a cluster."""

    def nodes(self) -> list[Node]: ...
    def start(self, start: Start) -> None: ...
    def submit(self, worker_id: int, payload: dict[str, Any]) -> None: ...
    def wait(self, timeout_s: float) -> list[Event]: ...
    def kill(self, worker_id: int) -> None: ...
    def request(self, bundles: Sequence[dict[str, float]]) -> None: ...
    def shutdown(self) -> None: ...


class Pool:
    def __init__(
        self,
        executor: Executor | None = None,
        limits: WorkerLimits | None = None,
        calibrate: bool = False,
        compile_cache: str | None = None,
    ) -> None:
        self.executor = executor
        self.calibrate = calibrate  # every worker probes its device before its first experiment
        self.compile_cache = compile_cache  # the run's shared compile cache: every worker gets it
        self.limits = (limits or WorkerLimits()).model_dump(exclude_none=True)  # the run's; each worker gets them
        self.actors: dict[int, Any] = {}  # worker id -> actor handle
        self.node_of: dict[int, str] = {}  # worker id -> the node it was started on
        self.calls: dict[ray.ObjectRef, tuple[int, str]] = {}  # pending call -> (worker id, method)

    def nodes(self) -> list[Node]:
        """The cluster's alive nodes now."""
        return describe().nodes

    def start(self, start: Start) -> None:
        actor = WorkerActor.options(  # type: ignore[attr-defined]
            num_gpus=start.gpus,
            num_cpus=start.cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(start.node_id, soft=False),
        ).remote(start.cores, start.gpu_model, self.executor, self.limits, self.calibrate, self.compile_cache)
        self.actors[start.worker_id] = actor
        self.node_of[start.worker_id] = start.node_id
        self.calls[actor.ready.remote()] = (start.worker_id, "ready")

    def submit(self, worker_id: int, payload: dict[str, Any]) -> None:
        self.calls[self.actors[worker_id].run.remote(payload)] = (worker_id, "run")

    def wait(self, timeout_s: float) -> list[Event]:
        """What came back within ``timeout_s`` (everything that is ready once something is)."""
        if not self.calls:
            time.sleep(max(0.0, timeout_s))  # nothing to wait for but the clock (nodes joining)
            return []
        refs = list(self.calls)
        ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, timeout_s))
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return [self._event(ref) for ref in ready if ref in self.calls]

    def _event(self, ref: ray.ObjectRef) -> Event:
        worker_id, method = self.calls.pop(ref)
        try:
            value = ray.get(ref)
        except ray.exceptions.OutOfMemoryError as e:
            self.kill(worker_id)
            return Died(worker_id, ErrorInfo.from_exception(e), oom=True)
        except Exception as e:  # the actor died, its node was lost, or the worker's own code raised
            node_id = self.node_of.get(worker_id)
            self.kill(worker_id)
            lost = not isinstance(e, ray.exceptions.RayTaskError) and self._node_lost(e, node_id)
            return Died(worker_id, ErrorInfo.from_exception(e), node_lost=lost)
        if method == "ready":
            calibration = value.get("calibration")
            probe = Calibration.model_validate(calibration) if calibration else None
            return Ready(worker_id, value["hostname"], value["pid"], value["gpu_ids"], probe)
        if DIED in value:
            return Died(worker_id, ErrorInfo.model_validate(value[DIED]), alive=True)
        retire = value.pop(RETIRE, None)
        return Finished(worker_id, value, retire=retire)

    @staticmethod
    def _node_lost(error: Exception, node_id: str | None) -> bool:
        """Whether a worker died with its node: Ray says so, or no longer lists the node as alive."""
        if getattr(error, "preempted", False) or any(sign in str(error) for sign in NODE_LOST_SIGNS):
            return True
        if node_id is None:
            return False
        return not any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())

    def kill(self, worker_id: int) -> None:
        """Kill a worker now (its process and any fresh process it started), forgetting its calls."""
        actor = self._forget(worker_id)
        self.node_of.pop(worker_id, None)
        if actor is not None:
            ray.kill(actor, no_restart=True)

    def _forget(self, worker_id: int) -> Any:
        for ref in [r for r, (w, _) in self.calls.items() if w == worker_id]:
            del self.calls[ref]
        return self.actors.pop(worker_id, None)

    def request(self, bundles: Sequence[dict[str, float]]) -> None:
        """Ask the autoscaler for this much capacity in all (a floor it scales up to; [] clears)."""
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=list(bundles))

    def shutdown(self) -> None:
        for worker_id in list(self.actors):
            self.kill(worker_id)
