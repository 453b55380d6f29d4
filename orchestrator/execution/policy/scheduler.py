"""Dispatch, at the top of the policy: the ``Scheduler`` holds the state of one sweep (its queue, the
nodes, our workers, which devices and processes each experiment's runs went to), takes what the runner
reports, and makes the next ``Plan``: idle workers take waiting runs, what can never run is recorded,
workers are started where placement finds room and retired where another shape needs it.

Placement (``placement``) and the fault rules (``faults``) are pure functions it calls; the queue
(``queue``) and the data (``model``) sit below them. No Ray.

Its work per event does not grow with the cluster or the sweep: idle workers are found among those
that became idle (``_idle``), deadlines in a heap, placement's answers (free room, starting workers,
needs no node has room for, why a need fits no node) kept until a worker is added, removed or ready,
or the nodes change, and the capacity asked of the autoscaler worked out every ``BUNDLES_EVERY_S``.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.execution.policy.faults import (
    DEFAULT_START_TIMEOUT_S,
    after_death,
    broken_after,
    failed_result,
    final_result,
    start_timeout_error,
    timed_out,
    timeout_error,
    trusted_nodes,
    unschedulable_error,
    unstarted,
)
from orchestrator.execution.policy.model import (
    DeviceKey,
    Dispatch,
    Entry,
    Need,
    NodeShape,
    Plan,
    Run,
    Shape,
    Start,
    WorkerView,
    stamp_run,
)
from orchestrator.execution.policy.placement import (
    bundles,
    deficits,
    free_capacity,
    gpus_seen,
    making_way,
    place,
    why_unfit,
)
from orchestrator.execution.policy.queue import Queue
from orchestrator.execution.policy.reservation import (
    RESERVE_AFTER_S,
    Reserved,
    choose_node,
    held_back,
    kept,
    open_to,
    wanting,
)
from orchestrator.machines.calibration import slow_reasons
from orchestrator.machines.nodes import Node
from tasks.models import FRESH_PROCESS_CACHES, Calibration, ErrorInfo, Experiment, Result, Status

# How often the capacity asked of the autoscaler is worked out again: Ray's autoscaler reads its requests
# every 5 s (ray.autoscaler._private.constants.AUTOSCALER_UPDATE_INTERVAL_S), and the list holds a bundle
# per worker wanted, as long as the queue (100,000 of them at the start of a large sweep).
BUNDLES_EVERY_S = 5.0
_START, _RUN = 0, 1  # the kinds of deadline in the heap: a worker's start, its running experiment's timeout


class _Fleet(dict[int, WorkerView]):
    """The workers by id, counting every addition and removal (``version``): placement's answers hold
    until it changes."""

    version = 0

    def __setitem__(self, key: int, value: WorkerView) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: int) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, key: int, *default: Any) -> Any:
        self.version += 1
        return super().pop(key, *default)


@dataclass
class _Placement:
    """Placement's answers for one state of the workers and the nodes (``key``)."""

    key: tuple[int, int, frozenset[tuple[str, Need]]]
    free: dict[str, tuple[float, float]]  # what our workers leave free on each node
    starting: list[WorkerView]  # the workers not ready yet
    no_room: set[Need] = field(default_factory=set)  # needs no node has room for now
    unfit: dict[Need | None, str | None] = field(default_factory=dict)  # ``why_unfit`` of each need asked


class Scheduler:
    """The state of one sweep and the decisions about it. See ``orchestrator.execution.policy``."""

    def __init__(
        self,
        experiments: Sequence[Experiment | Run],
        *,
        pending_timeout_s: float = 0.0,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        exclude_slow: bool = False,
    ) -> None:
        self.queue = Queue(experiments)
        self.exclude_slow = exclude_slow
        self.calibrations: dict[str, Calibration] = {}  # every device probed in this sweep, by entry id
        self.pending_timeout_s = pending_timeout_s
        self.start_timeout_s = start_timeout_s
        self.nodes: dict[str, Node] = {}  # alive, and not lost under one of our workers
        self.lost: dict[str, Node] = {}  # nodes lost under a worker that Ray still listed as alive when last asked
        self.workers: dict[int, WorkerView] = _Fleet()
        self._next_worker = 0
        self._unfit_since: dict[Need | None, float] = {}
        self._start_failures: Counter[NodeShape] = Counter()  # consecutive, per node and shape
        self.broken: dict[NodeShape, str] = {}  # (node id, shape) -> why its workers could not start
        self.measured_on: dict[str, set[DeviceKey]] = {}  # experiment id -> devices its runs were dispatched to
        self.ran_in: dict[str, set[int]] = {}  # experiment id -> workers that ran one of its runs in their process
        self.reserved: Reserved = {}  # node id -> the gang need it is held back for (``reservation``)
        self.reserve_after_s = RESERVE_AFTER_S
        self._gang_unplaced_since: dict[Need, float] = {}
        self._idle: set[int] = set()  # every idle worker's id (and some that were: their state decides)
        self._deadlines: list[tuple[float, int, int]] = []  # heap of (deadline, worker id, kind); some stale
        self._changes = 0  # counts changes of the nodes, the broken pairs and the workers ready
        self._placement_cache: _Placement | None = None
        self._bundles: list[dict[str, float]] | None = None
        self._bundles_due = -math.inf

    @property
    def done(self) -> bool:
        return self.queue.remaining == 0

    # -- what the runner reports ---------------------------------------------------------

    def observe_nodes(self, nodes: Iterable[Node]) -> None:
        """The cluster's alive nodes now. A node that left takes its workers with it: the pool
        reports their deaths, which decide what happens to their experiments. A node lost under
        a worker stays out while Ray still lists it; once Ray has not, it is trusted again."""
        nodes_before, lost_before = self.nodes, self.lost
        self.nodes, self.lost = trusted_nodes(nodes, self.lost)
        if self.nodes != nodes_before or self.lost != lost_before:
            self._changes += 1
        if self.queue.unresolved:
            self.queue.resolve(gpus_seen(self.nodes.values()))

    def worker_ready(
        self, worker_id: int, hostname: str, pid: int, gpu_ids: Sequence[str], calibration: Calibration | None = None
    ) -> None:
        worker = self.workers.get(worker_id)
        if worker is None:
            return
        worker.state, worker.hostname, worker.pid, worker.gpu_ids = "idle", hostname, pid, list(gpu_ids)
        worker.start_deadline = None
        self._idle.add(worker_id)
        self._changes += 1  # one starting worker fewer
        self._start_failures[(worker.node.node_id, worker.shape)] = 0
        if calibration is not None:
            worker.calibration = self.calibrations[calibration.id] = calibration
            if self.exclude_slow:
                self._judge_workers()

    def _judge_workers(self) -> None:
        """Exclude the workers whose device is slow for its model, by every probe seen so far."""
        entries = list(self.calibrations.values())
        for worker in self.workers.values():
            if worker.calibration is not None:
                reasons = slow_reasons(worker.calibration, entries)
                worker.excluded = f"slow device: {'; '.join(reasons)}" if reasons else None

    def finished(self, worker_id: int, result: Result, *, retire: str | None = None) -> Result:
        """The worker returned a result (any status: a failing target is a result). With
        ``retire`` (why), the worker is forgotten here: the runner kills it, and a fresh one
        starts for the experiments still waiting."""
        worker = self.workers[worker_id]
        entry = worker.entry
        assert entry is not None
        self._free(worker)
        if retire is not None:
            del self.workers[worker_id]
        self.queue.done(entry)
        return stamp_run(result, entry, worker)

    def unreadable(self, worker_id: int, error: ErrorInfo, now: float, *, retire: str | None = None) -> Result:
        """The worker returned something that is not a result (a worker whose compilebench differs from
        the driver's): its experiment is recorded ``runtime_error`` with why; the worker stays."""
        worker = self.workers[worker_id]
        assert worker.entry is not None
        result = failed_result(
            worker.entry.exp, "runtime_error", error, started_at=worker.started_at or now, finished_at=now
        )
        return self.finished(worker_id, result, retire=retire)

    def died(
        self,
        worker_id: int,
        error: ErrorInfo,
        now: float,
        *,
        oom: bool = False,
        alive: bool = False,
        node_lost: bool = False,
        rank: int | None = None,
    ) -> Result | None:
        """The worker's process (or, with ``alive``, the fresh process it ran the experiment in)
        died; with ``node_lost``, because its node was lost; ``rank``: the gang's rank whose process
        died. The experiment is retried, or its final result returned (``faults.after_death``)."""
        worker = self.workers.get(worker_id)
        if worker is None:
            return None
        entry, started_at = worker.entry, worker.started_at
        if alive:
            self._free(worker)
        else:
            del self.workers[worker_id]
            if node_lost:
                self._lose(worker.node.node_id)
            elif worker.state == "starting":
                self._start_failed(worker, error)
        if entry is None:
            return None
        status = after_death(entry, oom=oom, node_lost=node_lost and not alive)
        if status is None:
            self.queue.requeue(entry)
            return None
        return self._final(entry, status, error, worker, now, started_at, rank=rank)

    def expired(self, now: float) -> list[tuple[int, Result | None]]:
        """Workers past a deadline, for the runner to kill; they are forgotten here (a
        replacement starts if needed). A running experiment past its ``timeout_s`` comes with
        its ``timeout`` result; a worker not started by its start deadline, with None (a failed
        start)."""
        out: list[tuple[int, Result | None]] = []
        due = self._due(now)
        for worker in unstarted(due, now):
            del self.workers[worker.id]
            self._start_failed(worker, start_timeout_error(worker, self.start_timeout_s))
            out.append((worker.id, None))
        for worker in timed_out([w for w in due if w.id in self.workers], now):
            entry = worker.entry
            assert entry is not None
            del self.workers[worker.id]
            out.append((worker.id, self._final(entry, "timeout", timeout_error(entry.exp), worker, now)))
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline of a running experiment or a starting worker."""
        heap = self._deadlines
        while heap and not self._live(*heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _live(self, deadline: float, worker_id: int, kind: int) -> bool:
        """Whether a deadline in the heap is still its worker's (not passed on by a start or a result)."""
        worker = self.workers.get(worker_id)
        return worker is not None and (worker.start_deadline if kind == _START else worker.deadline) == deadline

    def _due(self, now: float) -> list[WorkerView]:
        """The workers with a deadline at or before ``now``, in the order of ``workers``, taken off the heap."""
        heap, due = self._deadlines, dict[int, WorkerView]()
        while heap and heap[0][0] <= now:
            deadline, worker_id, kind = heapq.heappop(heap)
            if self._live(deadline, worker_id, kind):
                due[worker_id] = self.workers[worker_id]
        return [due[worker_id] for worker_id in sorted(due)]

    # -- what to do next -----------------------------------------------------------------

    def plan(self, now: float) -> Plan:
        """Dispatch to idle workers; record what can never run; start and retire workers."""
        plan = Plan()
        if self.reserved:
            self.reserved = kept(self.reserved, self.nodes, self.queue.demand(), self.workers.values(), self.broken)
        self._dispatch(plan, now)
        self._unschedulable(plan, now)
        demand = self.queue.demand()
        unplaced = self._start(plan, demand, now)
        if unplaced and (self._reserve(plan, unplaced, now) | self._retire(plan, unplaced, demand)):
            unplaced = self._start(plan, demand, now)  # starting workers, new ones included, are subtracted again
        if self.pending_timeout_s > 0:
            if self._bundles is None or now >= self._bundles_due:
                self._bundles = bundles(self.workers.values(), unplaced, len(self.queue.unresolved))
                self._bundles_due = now + BUNDLES_EVERY_S
            plan.bundles = self._bundles
        return plan

    def _dispatch(self, plan: Plan, now: float) -> None:
        """Idle workers take waiting runs: first those whose experiment has not used the worker's device,
        then those it has not run in the worker's process. A worker left idle with only runs it has
        already run one replicate of is retired: a fresh worker takes its place (``_start``)."""
        if not any(self.queue.waiting.values()):
            return  # nothing waits: no worker takes a run, and none is retired for one
        for tier in (self._new_device, self._new_process):
            for worker in self._idle_workers():
                if worker.state != "idle" or worker.excluded or self._peers_probing(worker):
                    continue
                if held_back(worker, self.reserved):
                    continue
                entry = self.queue.take_for(worker, functools.partial(tier, worker=worker))
                if entry is not None:
                    self._run(plan, worker, entry, now)
        for worker in [
            w
            for w in self._idle_workers()
            if w.state == "idle"
            and not w.excluded
            and not self._peers_probing(w)
            and not held_back(w, self.reserved)
            and self.queue.has_for(w)
        ]:
            del self.workers[worker.id]
            plan.retire.append(worker.id)

    def _idle_workers(self) -> list[WorkerView]:
        """The idle workers, in the order of ``workers`` (the order they were started); none on a node lost under
        another worker: its death, not yet seen, is on its way, and a run given to it would be lost again."""
        idle = []
        for worker_id in sorted(self._idle):
            worker = self.workers.get(worker_id)
            if worker is None or worker.state != "idle":
                self._idle.discard(worker_id)
            elif worker.node.node_id not in self.lost:
                idle.append(worker)
        return idle

    def _peers_probing(self, worker: WorkerView) -> bool:
        """With ``exclude_slow``: whether workers of the same device model are still starting (their
        probes not in yet): the worker's device is judged against theirs before it runs anything."""
        if not self.exclude_slow:
            return False
        return any(w.state == "starting" and w.device_model == worker.device_model for w in self.workers.values())

    def _new_device(self, entry: Entry, worker: WorkerView) -> bool:
        return worker.device_key not in self.measured_on.get(entry.exp_id, ())

    def _new_process(self, entry: Entry, worker: WorkerView) -> bool:
        return entry.exp.compile.cache in FRESH_PROCESS_CACHES or worker.id not in self.ran_in.get(entry.exp_id, ())

    def _run(self, plan: Plan, worker: WorkerView, entry: Entry, now: float) -> None:
        exp = entry.exp
        cold = exp.compile.cache in FRESH_PROCESS_CACHES  # the worker runs it in a fresh process of its own
        entry.state, entry.attempts = "running", entry.attempts + 1
        worker.state, worker.entry, worker.started_at = "busy", entry, now
        worker.deadline = now + exp.timeout_s
        heapq.heappush(self._deadlines, (worker.deadline, worker.id, _RUN))
        worker.experiments_before = 0 if cold else worker.experiments
        worker.experiments += not cold
        self.measured_on.setdefault(entry.exp_id, set()).add(worker.device_key)
        if not cold:
            self.ran_in.setdefault(entry.exp_id, set()).add(worker.id)
        plan.dispatch.append(Dispatch(worker.id, exp, entry.replicate))

    def _unschedulable(self, plan: Plan, now: float) -> None:
        """Waiting experiments that no node can hold: after ``pending_timeout_s``, recorded."""
        needs: list[Need | None] = [need for need, q in self.queue.waiting.items() if q]
        if self.queue.unresolved:
            needs.append(None)
        unfit = self._placement().unfit
        for need in needs:
            if need not in unfit:
                unfit[need] = why_unfit(need, self.nodes, self.lost.values(), self.broken)
            why = unfit[need]
            if why is None:
                self._unfit_since.pop(need, None)
                continue
            since = self._unfit_since.setdefault(need, now)
            if now - since < self.pending_timeout_s:
                continue
            self._unfit_since.pop(need, None)
            for entry in self.queue.drop(need):
                error = unschedulable_error(why, self.pending_timeout_s)
                plan.results.append(self._final(entry, "unschedulable", error, None, now))

    def _start(self, plan: Plan, demand: dict[Need, int], now: float) -> dict[Need, int]:
        """Start workers for the waiting experiments that starting workers will not take, where
        they fit; what could not be placed is returned."""
        unplaced: dict[Need, int] = {}
        known = self._placement()
        free = dict(known.free)
        for need, count in deficits(demand, known.starting).items():
            shape, model = need
            while count > 0:
                node = None
                if need not in known.no_room:
                    node = place(shape, model, open_to(need, self.nodes.values(), self.reserved), self.broken, free)
                if node is None:
                    known.no_room.add(need)  # holds while nothing changes (less room, after a start here)
                    unplaced[need] = count
                    break
                worker = self._new_worker(node, shape, now)
                free[node.node_id] = (free[node.node_id][0] - shape.held_gpus, free[node.node_id][1] - worker.cpus)
                plan.start.append(self._start_of(worker, need))
                count -= 1
        return unplaced

    def _start_of(self, worker: WorkerView, need: Need) -> Start:
        """How the pool starts ``worker``: a gang's ranks each hold one share, their collectives time out
        after the longest ``timeout_s`` of the runs waiting for its need."""
        shape = worker.shape
        if shape.ranks is None:
            return Start(worker.id, worker.node.node_id, shape.gpus, worker.cpus, worker.cores, worker.device_model)
        longest = max((e.exp.timeout_s for e in self.queue.waiting.get(need, ())), default=None)
        return Start(
            worker.id,
            worker.node.node_id,
            shape.gpus,
            shape.rank_cpus_on(worker.node),
            worker.cores,
            worker.device_model,
            ranks=shape.ranks,
            collective_timeout_s=longest,
        )

    def _reserve(self, plan: Plan, unplaced: dict[Need, int], now: float) -> bool:
        """Reserve a node for each gang need that has no gang and has not been placed for
        ``reserve_after_s`` (``reservation``), and retire the idle workers of other needs on every
        reserved node; whether any was retired."""
        if not self.reserved and not any(need[0].ranks is not None for need in unplaced):
            self._gang_unplaced_since.clear()
            return False  # no gang waits and no node is held back: nothing to reserve or retire
        waiting = self.queue.demand()
        wanted = wanting(unplaced, self.reserved, self.workers.values())
        self._gang_unplaced_since = {n: t for n, t in self._gang_unplaced_since.items() if n in wanted}
        for need in wanted:
            if now - self._gang_unplaced_since.setdefault(need, now) < self.reserve_after_s:
                continue
            node = choose_node(need, self.nodes.values(), self.workers.values(), self.broken, self.reserved, waiting)
            if node is not None:
                self.reserved[node.node_id] = need
                del self._gang_unplaced_since[need]
        idle = [w for w in self._idle_workers() if held_back(w, self.reserved)] if self.reserved else []
        for worker in idle:
            del self.workers[worker.id]
            plan.retire.append(worker.id)
        return bool(idle)

    def _retire(self, plan: Plan, unplaced: dict[Need, int], demand: dict[Need, int]) -> bool:
        """Retire idle workers no waiting experiment can use, on nodes where an unplaced need
        would fit; whether any was retired."""
        idle = self._idle_workers()
        retired = making_way(idle, self.nodes.values(), unplaced, demand) if idle else []
        for worker in retired:
            del self.workers[worker.id]
            plan.retire.append(worker.id)
        return bool(retired)

    # -- helpers -------------------------------------------------------------------------

    def _placement(self) -> _Placement:
        """Placement's answers for the workers and nodes as they are now: worked out again once either changed."""
        key = (
            self.workers.version if isinstance(self.workers, _Fleet) else -1,
            self._changes,
            frozenset(self.reserved.items()),  # a reservation opens and closes nodes to needs
        )
        known = self._placement_cache
        if known is None or known.key != key or key[0] < 0:
            starting = [w for w in self.workers.values() if w.state == "starting"]
            known = _Placement(key, free_capacity(self.nodes.values(), self.workers.values()), starting)
            self._placement_cache = known
        return known

    def _new_worker(self, node: Node, shape: Shape, now: float) -> WorkerView:
        worker = WorkerView(self._next_worker, node, shape, cpus=shape.cpus_on(node), cores=shape.cores_on(node))
        worker.start_deadline = now + self.start_timeout_s
        heapq.heappush(self._deadlines, (worker.start_deadline, worker.id, _START))
        self.workers[worker.id] = worker
        self._next_worker += 1
        return worker

    def _free(self, worker: WorkerView) -> None:
        worker.state, worker.entry, worker.deadline, worker.started_at = "idle", None, None, None
        self._idle.add(worker.id)

    def _start_failed(self, worker: WorkerView, error: ErrorInfo) -> None:
        key = (worker.node.node_id, worker.shape)
        self._start_failures[key] += 1
        why = broken_after(error, self._start_failures[key])
        if why is not None and key[0] in self.nodes:
            self.broken[key] = why
            self._changes += 1

    def _lose(self, node_id: str) -> None:
        """A node was lost under one of our workers: no new worker there until Ray stops listing it."""
        node = self.nodes.pop(node_id, None)
        if node is not None:
            self.lost[node_id] = node
            self._changes += 1

    def _final(
        self,
        entry: Entry,
        status: Status,
        error: ErrorInfo,
        worker: WorkerView | None,
        now: float,
        started_at: float | None = None,
        *,
        rank: int | None = None,
    ) -> Result:
        """A final result made here (the worker made none), its run done; ``rank``: the gang's rank whose
        fault ended it."""
        self.queue.done(entry)
        return final_result(entry, status, error, worker, now, started_at, failed_rank=rank)
