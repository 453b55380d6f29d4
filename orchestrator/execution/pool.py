"""The pool of long-lived workers: Ray actors, each holding one GPU (or a set of cores) for life.

The only module of the scheduler that calls Ray. It starts an actor (``orchestrator.execution.actors``)
where the policy says (``NodeAffinitySchedulingStrategy(soft=False)``: that node or nowhere), with ``num_gpus`` and
``num_cpus`` held for the actor's life, so Ray sets ``CUDA_VISIBLE_DEVICES`` once, before
anything in the process touches CUDA. It sends experiments to actors, waits for what comes
back (``ray.wait`` with a timeout, so that deadlines can be enforced), kills actors, lists the
cluster's nodes and passes requests for capacity to the autoscaler. What comes back is told
to the runner as plain events: ``Ready``, ``Finished``, ``Died`` (``orchestrator.execution.events``).
A gang (a ``Start`` with ``ranks``: a distributed experiment's k rank processes) is one worker to the
policy and to the runner; its placement group, rank actors and outcomes are kept by a ``Gang``
(``orchestrator.execution.gang``), whose calls the pool waits on with the rest.

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
from collections.abc import Sequence
from typing import Any, Protocol

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.execution.actors import Executor, RankExecutor, WorkerActor
from orchestrator.execution.cluster import describe
from orchestrator.execution.events import Died, Event, Finished, Ready, death
from orchestrator.execution.gang import Call, Combine, Gang
from orchestrator.execution.policy import Start
from orchestrator.machines.nodes import Node
from tasks.models import Calibration, ErrorInfo, WorkerLimits
from tasks.worker import DIED, RETIRE  # keys in what a worker returns: its experiment's process died; replace it


class WorkerPool(Protocol):
    """What the runner asks of a pool of workers: Ray's (``Pool``), or one simulated on a simulated
    clock (``benchmarks/simulated_cluster.py``) that measures the driver without a cluster."""

    def nodes(self) -> list[Node]: ...
    def start(self, start: Start) -> None: ...
    def submit(self, worker_id: int, payload: dict[str, Any]) -> None: ...
    def wait(self, timeout_s: float) -> list[Event]: ...
    def silent_ranks(self, worker_id: int) -> list[int]: ...
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
        rank_executor: RankExecutor | None = None,
        combine: Combine | None = None,
    ) -> None:
        self.executor = executor
        self.rank_executor, self.combine = rank_executor, combine  # what a gang's ranks run, and how they combine
        self.calibrate = calibrate  # every worker probes its device before its first experiment
        self.compile_cache = compile_cache  # the run's shared compile cache: every worker gets it
        self.limits = (limits or WorkerLimits()).model_dump(exclude_none=True)  # the run's; each worker gets them
        self.actors: dict[int, Any] = {}  # worker id -> actor handle
        self.node_of: dict[int, str] = {}  # worker id -> the node it was started on
        self.calls: dict[ray.ObjectRef, tuple[int, str, int]] = {}  # pending call -> (worker id, method, rank)
        self.gangs: dict[int, Gang] = {}  # worker id -> the gang it is (``orchestrator.execution.gang``)
        self.pids: dict[int, int] = {}  # worker id -> its process, where it runs on this host (``shutdown`` waits)
        # processes of this host killed by this pool, maybe not gone yet: those that may still hold their cores'
        # locks, by node (``start`` waits for them), and all of them (``shutdown`` waits for them)
        self.exiting: dict[str, list[int]] = {}
        self.killed: list[int] = []
        self.released: set[int] = set()  # workers that handed their cores back with a result that retired them

    def nodes(self) -> list[Node]:
        """The cluster's alive nodes now."""
        return describe().nodes

    def start(self, start: Start) -> None:
        """Start a worker where ``start`` says, once the workers this pool killed on that node (those of this
        host) have exited, for at most ``START_EXIT_WAIT_S``: a killed worker holds its cores' locks until its
        process is gone, and a worker started meanwhile would find them taken and run without exclusive cores."""
        wait_exited(self.exiting.pop(start.node_id, []), START_EXIT_WAIT_S)
        if start.ranks is not None:
            gang = Gang(start.worker_id, start, self.rank_executor, self.combine, self.limits, self.compile_cache)
            self.gangs[start.worker_id] = gang
            self.node_of[start.worker_id] = start.node_id
            self._expect(start.worker_id, gang.begin())
            return
        actor = WorkerActor.options(  # type: ignore[attr-defined]
            num_gpus=start.gpus,
            num_cpus=start.cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(start.node_id, soft=False),
        ).remote(start.cores, start.gpu_model, self.executor, self.limits, self.calibrate, self.compile_cache)
        self.actors[start.worker_id] = actor
        self.node_of[start.worker_id] = start.node_id
        self.calls[actor.ready.remote()] = (start.worker_id, "ready", 0)

    def _expect(self, worker_id: int, calls: Sequence[Call]) -> None:
        for ref, method, rank in calls:
            self.calls[ref] = (worker_id, method, rank)

    def submit(self, worker_id: int, payload: dict[str, Any]) -> None:
        gang = self.gangs.get(worker_id)
        if gang is not None:
            self._expect(worker_id, gang.submit(payload, time.time()))
            return
        self.calls[self.actors[worker_id].run.remote(payload)] = (worker_id, "run", 0)

    def wait(self, timeout_s: float) -> list[Event]:
        """What came back within ``timeout_s`` (everything that is ready once something is), and the gangs
        whose ranks had their grace after another rank's failure (``orchestrator.execution.gang``)."""
        graces = [d for g in self.gangs.values() if (d := g.grace_deadline()) is not None]
        if graces:
            timeout_s = min(timeout_s, min(graces) - time.time())
        events: list[Event] = []
        if not self.calls:
            time.sleep(max(0.0, timeout_s))  # nothing to wait for but the clock (nodes joining)
        else:
            refs = list(self.calls)
            ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, timeout_s))
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            events = [e for ref in ready if ref in self.calls and (e := self._event(ref)) is not None]
        now = time.time()
        for worker_id, gang in list(self.gangs.items()):
            deadline = gang.grace_deadline()
            if deadline is not None and now >= deadline and gang.payload is not None:
                self._forget(worker_id)  # the silent ranks' calls: the gang is retired with this result
                events.append(gang.finish(now))
        return events

    def _event(self, ref: ray.ObjectRef) -> Event | None:
        worker_id, method, rank = self.calls.pop(ref)
        gang = self.gangs.get(worker_id)
        try:
            value = ray.get(ref)
        except Exception as e:  # the actor died, its node was lost, Ray's memory monitor, or the worker's own code
            node_id = self.node_of.get(worker_id)
            self.kill(worker_id)
            return death(worker_id, e, node_id, rank=rank if gang is not None else None)
        if gang is not None:
            calls, event = gang.answer(method, rank, value, time.time())
            self._expect(worker_id, calls)
            return event
        if method == "ready":
            if value["hostname"] == socket.gethostname():
                self.pids[worker_id] = value["pid"]
            calibration = value.get("calibration")
            probe = Calibration.model_validate(calibration) if calibration else None
            return Ready(worker_id, value["hostname"], value["pid"], value["gpu_ids"], probe)
        if DIED in value:
            return Died(worker_id, ErrorInfo.model_validate(value[DIED]), alive=True)
        retire = value.pop(RETIRE, None)
        if retire is not None:  # it handed its cores back with this result (``tasks.worker``)
            self.released.add(worker_id)
        return Finished(worker_id, value, retire=retire)

    def silent_ranks(self, worker_id: int) -> list[int]:
        """A gang's ranks that have not answered its running experiment ([] for a worker of one process)."""
        gang = self.gangs.get(worker_id)
        return gang.silent() if gang is not None else []

    def kill(self, worker_id: int) -> None:
        """Kill a worker now (its process and any fresh process it started; a gang's every rank and its
        placement group), forgetting its calls."""
        pid, node_id = self.pids.get(worker_id), self.node_of.get(worker_id)
        if pid is not None:
            self.killed.append(pid)
            if node_id is not None and worker_id not in self.released:
                self.exiting.setdefault(node_id, []).append(pid)
        self.released.discard(worker_id)
        actor = self._forget(worker_id)
        self.node_of.pop(worker_id, None)
        gang = self.gangs.pop(worker_id, None)
        if gang is not None:
            gang.kill()
        if actor is not None:
            ray.kill(actor, no_restart=True)

    def _forget(self, worker_id: int) -> Any:
        for ref in [r for r, (w, _, _) in self.calls.items() if w == worker_id]:
            del self.calls[ref]
        self.pids.pop(worker_id, None)
        return self.actors.pop(worker_id, None)

    def request(self, bundles: Sequence[dict[str, float]]) -> None:
        """Ask the autoscaler for this much capacity in all (a floor it scales up to; [] clears)."""
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=list(bundles))

    def shutdown(self) -> None:
        """Kill every worker, then wait (up to ``EXIT_WAIT_S``) until those on this host have exited: a worker
        holds its cores' locks until its process is gone (``tasks.isolation``), and ``ray.kill`` returns before
        it is, so a sweep started right after this one (a library user's next call, the next test) would find
        those cores taken and run without exclusive cores."""
        for worker_id in [*self.actors, *self.gangs]:
            self.kill(worker_id)
        wait_exited(self.killed, EXIT_WAIT_S)
        self.exiting.clear()
        self.killed.clear()


EXIT_WAIT_S = 10.0  # the most ``Pool.shutdown`` waits for its killed workers' processes to exit
# the most ``Pool.start`` waits for a node's killed workers to exit (it holds up the dispatch loop): a worker killed
# by ``ray.kill`` (SIGKILL) is gone within milliseconds; one that is not by then is left, and the new one shares
START_EXIT_WAIT_S = 2.0


def wait_exited(pids: Sequence[int], timeout_s: float) -> list[int]:
    """Wait until each of these processes of this host has exited (gone, or a zombie: its files, and so its
    locks, are released), at most ``timeout_s``; those still running then."""
    deadline = time.monotonic() + timeout_s
    running = [pid for pid in pids if _running(pid)]
    while running and time.monotonic() < deadline:
        time.sleep(0.02)
        running = [pid for pid in running if _running(pid)]
    return running


def _running(pid: int) -> bool:
    """Whether a process of this host runs (not a zombie): from ``/proc`` where there is one, else a signal 0."""
    if os.path.isdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
        except OSError:
            return False  # gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
