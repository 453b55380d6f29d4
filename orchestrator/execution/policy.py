"""The scheduling policy: which worker each experiment runs on, and what a fault does to it.

Plain code over plain data, no Ray: the runner tells a ``Scheduler`` what happened (the nodes
it sees, a worker ready, a result, a death, the clock) and carries out the ``Plan`` it returns
(start or retire workers, dispatch experiments, record results, ask the autoscaler for
capacity). Tests drive it with made-up nodes and events.

- **Workers** are long-lived, one per GPU by default, each holding a ``Shape`` (GPUs and cores)
  on one node for life. A worker runs experiments of its shape one after another; one asking
  for a ``gpu_model`` runs only on a worker whose node has that model.
- **Placement** fills the nodes: while experiments of a shape wait, start workers of that shape
  wherever one fits in what our workers leave free. An idle worker that no waiting experiment
  can use is retired when another shape needs its room (GPU workers make way for CPU ones).
- **Replicates.** An experiment with ``replicates: k`` is k runs (``Run``: the experiment and its
  replicate), queued replicate by replicate (every experiment's run 0 first). Each run of an
  experiment goes to another worker process: first to an idle worker whose device (its GPUs, or
  for a CPU worker the worker itself) no run of that experiment has used, so that replicates land
  on different GPUs of the same model where one is free; else to a worker that has not run it in
  its own process. A worker left idle with only runs of experiments it has run is retired, and a
  fresh worker (a new process on the same GPU) takes its place and its queue.
- **Calibration.** A worker started with ``calibrate`` reports its device's probe when ready. With
  ``exclude_slow``, a worker whose device is slow for its model (``orchestrator.machines.calibration``: more
  than 5% below the median of the model's other devices on a figure, judged again as each worker
  reports in) runs nothing more: it stays idle and keeps its GPU, so that no new worker lands on
  that device, and the others run its queue. No worker runs anything while workers of its device
  model are still starting: each device is judged against the probes of all its peers first.
- **Recycling.** A worker that returns its result with a reason to retire (it ran
  ``max_experiments``, its memory grew past its limit, or its reset raised: see
  ``tasks.worker.Worker``) is replaced; the result stands as the worker made it.
- **Faults.** A worker that dies mid-experiment (segfault, ``os._exit``, SIGKILL, the kernel's
  OOM killer) sends the experiment back to the front of the queue, up to ``retries`` times,
  then records it ``crashed``; each try counts in ``attempts``. An experiment past
  ``timeout_s`` (counted from its dispatch to an idle, ready worker) is recorded ``timeout``
  and its worker replaced; never retried. Ray's memory monitor killing the worker (host memory
  exhausted) is recorded ``oom``, not retried: the next try would exhaust it again.
  Exceptions raised by the target are results of the worker, not faults.
- **Lost nodes** are not the experiment's fault: an experiment whose worker died with its node
  goes back to the front of the queue without spending a retry (``attempts`` counts the try,
  ``lost_nodes`` says it was lost; past ``MAX_NODE_LOSSES`` a loss is charged as a death), and
  the node takes no new worker until Ray has stopped listing it as alive: until then Ray may
  still show a dying node alive, and a retry placed there would die with it.
- **Starting.** A worker not ready ``start_timeout_s`` after it was asked for (Ray could not
  place it: the resources it holds for life are held by someone else, or never free) is
  killed and counts as a failed start; ``MAX_START_FAILURES`` failed starts in a row of one
  shape on a node, and that node takes no more workers of that shape.
- **Unschedulable**: an experiment that no node could hold even empty (too many GPUs or cores,
  a GPU model no node has, or only nodes where workers of its shape repeatedly failed to
  start) waits up to ``pending_timeout_s`` for a node that fits to join (0: recorded at once),
  then is recorded ``unschedulable``.
"""

from __future__ import annotations

import functools
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.machines.calibration import slow_reasons
from orchestrator.machines.nodes import Node
from tasks.models import (
    FRESH_PROCESS_CACHES,
    Calibration,
    ErrorInfo,
    Experiment,
    Resources,
    Result,
    Status,
    WorkerInfo,
    result_identity,
)

MAX_START_FAILURES = 3  # consecutive failed starts of one shape on a node, after which it takes none of that shape
MAX_NODE_LOSSES = 3  # node losses an experiment may see free of charge; past them each spends a retry
DEFAULT_START_TIMEOUT_S = 600.0  # a worker Ray has not placed and started by then counts as a failed start
MODEL_RESOURCE_SHARE = 0.001  # what a task asks of a node's ``accelerator_type:<MODEL>`` resource (Ray's convention)


@dataclass(frozen=True)
class Shape:
    """What a worker holds for life: ``gpus`` devices and ``cpus`` cores (None: the node's share).

    The node's share is, for a GPU worker, the node's cores divided by its GPUs (rounded down;
    an equal fraction when a node declares fewer cores than GPUs, as a local instance with
    logical GPUs may), times its GPUs; for a CPU worker, every core of the node, so that CPU
    experiments on a node are timed one at a time.
    """

    gpus: int
    cpus: int | None = None

    def cpus_on(self, node: Node) -> float:
        """The CPUs a worker of this shape reserves on ``node`` (Ray's ``num_cpus``)."""
        if self.cpus is not None:
            return float(self.cpus)
        if self.gpus == 0:
            return float(node.cpus)
        if node.gpus == 0:
            return 0.0
        share = node.cpus / node.gpus
        return self.gpus * (float(int(share)) if share >= 1 else int(share * 1e4) / 1e4)  # Ray counts in 1e-4

    def cores_on(self, node: Node) -> int:
        """The cores such a worker claims and pins to (at least one)."""
        return max(1, int(self.cpus_on(node)))

    def describe_on(self, node: Node) -> str:
        """What a worker of this shape asks Ray for on ``node``, in words: ``1 GPU and 4 CPUs``."""
        cpus = self.cpus_on(node)
        held = [f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"] if self.gpus else []
        held.append(f"{cpus:g} CPU{'s' if cpus != 1 else ''}")
        return " and ".join(held)

    def fits(self, node: Node) -> bool:
        """Whether an empty ``node`` can hold a worker of this shape."""
        cpus = self.cpus_on(node)
        return self.gpus <= node.gpus and cpus <= node.cpus and (self.gpus > 0 or cpus > 0)

    def bundle(self, gpu_model: str | None) -> dict[str, float]:
        """The resources to ask the autoscaler for, to hold one such worker."""
        bundle: dict[str, float] = {"CPU": float(self.cpus or 1)}
        if self.gpus:
            bundle["GPU"] = float(self.gpus)
        if gpu_model:
            bundle[f"accelerator_type:{gpu_model}"] = MODEL_RESOURCE_SHARE
        return bundle


def node_model(node: Node) -> str | None:
    """The node's GPU model (its ``accelerator_type``), or None."""
    return node.gpu_models[0] if node.gpu_models else None


def shape_of(exp: Experiment, gpus_seen: bool | None) -> Shape | None:
    """The worker shape ``exp`` runs on. ``device: auto`` means a GPU when the cluster has one;
    ``gpus_seen`` is None while no node has any CPU or GPU to judge by (the shape is then None:
    decided once nodes join)."""
    gpus = exp.resources.gpus
    if gpus is None:
        if exp.device == "cuda" or exp.gpu_model is not None:
            gpus = 1
        elif exp.device == "cpu":
            gpus = 0
        elif gpus_seen is None:
            return None
        else:
            gpus = 1 if gpus_seen else 0
    return Shape(gpus=gpus, cpus=exp.resources.cpus)


Need = tuple[Shape, str | None]  # a worker shape and the GPU model asked for (None: any)


@dataclass(frozen=True)
class Run:
    """One run of an experiment: its ``replicate`` (0 .. ``experiment.replicates`` - 1)."""

    experiment: Experiment
    replicate: int = 0


def runs_of(experiments: Sequence[Experiment | Run]) -> list[Run]:
    """Every run, replicate by replicate: each experiment's run 0 in spec order, then each run 1, ...
    A ``Run`` given as such stays as it is, in its place among the runs 0 (a resumed sweep's rest)."""
    given = [e if isinstance(e, Run) else None for e in experiments]
    if all(g is not None for g in given):
        return [g for g in given if g is not None]
    deepest = max((e.replicates for e in experiments if isinstance(e, Experiment)), default=1)
    out: list[Run] = [e if isinstance(e, Run) else Run(e, 0) for e in experiments]
    for replicate in range(1, deepest):
        out += [Run(e, replicate) for e in experiments if isinstance(e, Experiment) and replicate < e.replicates]
    return out


DeviceKey = tuple[str, ...]  # a GPU worker's node and GPU ids; a CPU worker's own id: where a run measured


@dataclass(eq=False)
class Entry:
    """One run of an experiment in the queue and where it stands."""

    index: int  # position among the runs (replicate by replicate, spec order inside)
    exp: Experiment
    replicate: int = 0
    shape: Shape | None = None  # None until ``device: auto`` can be decided
    attempts: int = 0  # dispatches so far
    lost_nodes: int = 0  # dispatches that ended with the loss of the worker's node
    state: Literal["pending", "running", "done"] = "pending"

    @property
    def need(self) -> Need:
        assert self.shape is not None
        return (self.shape, self.exp.gpu_model)


@dataclass(eq=False)
class WorkerView:
    """A worker as the policy sees it: where it is, what it holds, what it is doing."""

    id: int
    node: Node
    shape: Shape
    cpus: float  # reserved (Ray's num_cpus)
    cores: int  # claimed and pinned by each experiment it runs
    state: Literal["starting", "idle", "busy"] = "starting"
    entry: Entry | None = None
    deadline: float | None = None  # the running experiment's timeout
    start_deadline: float | None = None  # while starting: when it counts as a failed start
    started_at: float | None = None
    experiments: int = 0  # dispatched to run in its own process (``compile.cache: cold`` ones run in a fresh one)
    experiments_before: int = 0  # what ``experiments`` was when the running experiment was dispatched
    hostname: str | None = None
    pid: int | None = None
    gpu_ids: list[str] = field(default_factory=list)
    calibration: Calibration | None = None  # its device's probe, when the run calibrates
    excluded: str | None = None  # why it runs nothing more: its device is slow (exclude_slow)

    @property
    def gpu_model(self) -> str | None:
        """The model of its node's GPUs (what experiments asking for a model are matched on)."""
        return node_model(self.node)

    @property
    def device_model(self) -> str | None:
        """The model of the GPUs it holds: None for a CPU worker."""
        return self.gpu_model if self.shape.gpus else None

    def serves(self, need: Need) -> bool:
        shape, model = need
        return shape == self.shape and (model is None or model == self.gpu_model)

    @property
    def device_key(self) -> DeviceKey:
        """What runs on this worker share with runs on another: its GPUs on its node (a replacement
        worker holding them again measures on the same device); a CPU worker is its own."""
        if self.shape.gpus and self.gpu_ids:
            return ("gpu", self.node.node_id, *self.gpu_ids)
        return ("worker", str(self.id))


@dataclass(frozen=True)
class Start:
    """Start a worker on a node, holding ``gpus`` GPUs and ``cpus`` CPUs for life."""

    worker_id: int
    node_id: str
    gpus: int
    cpus: float
    cores: int
    gpu_model: str | None


@dataclass(frozen=True)
class Dispatch:
    """Run ``experiment`` (its run ``replicate``) on an idle worker."""

    worker_id: int
    experiment: Experiment
    replicate: int = 0


@dataclass
class Plan:
    start: list[Start] = field(default_factory=list)
    retire: list[int] = field(default_factory=list)
    dispatch: list[Dispatch] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)  # final: unschedulable experiments
    bundles: list[dict[str, float]] = field(default_factory=list)  # the capacity the sweep wants, for the autoscaler


class Queue:
    """The experiments of a sweep with their state; waiting ones by what they need, in spec order."""

    def __init__(self, experiments: Sequence[Experiment | Run]) -> None:
        self.entries = [Entry(i, run.experiment, run.replicate) for i, run in enumerate(runs_of(experiments))]
        self.unresolved: deque[Entry] = deque(self.entries)  # shape not decided yet
        self.waiting: dict[Need, deque[Entry]] = {}
        self.remaining = len(self.entries)

    def resolve(self, gpus_seen: bool | None) -> None:
        """Decide the shape of every entry that can now be decided."""
        still: deque[Entry] = deque()
        for entry in self.unresolved:
            entry.shape = shape_of(entry.exp, gpus_seen)
            if entry.shape is None:
                still.append(entry)
            else:
                self.waiting.setdefault(entry.need, deque()).append(entry)
        self.unresolved = still

    def requeue(self, entry: Entry) -> None:
        """Back to the front: a retry runs before experiments that have not started."""
        entry.state = "pending"
        self.waiting.setdefault(entry.need, deque()).appendleft(entry)

    def has_for(self, worker: WorkerView) -> bool:
        """Whether any waiting entry is one this worker could run."""
        return any(queue and worker.serves(need) for need, queue in self.waiting.items())

    def take_for(self, worker: WorkerView, allowed: Callable[[Entry], bool] | None = None) -> Entry | None:
        """The earliest waiting entry this worker can run (a retry first), among those ``allowed``."""
        best: tuple[bool, int] | None = None
        found: tuple[deque[Entry], Entry] | None = None
        for need, queue in self.waiting.items():
            if not queue or not worker.serves(need):
                continue
            entry = next((e for e in queue if allowed is None or allowed(e)), None)
            if entry is not None and (best is None or (entry.attempts == 0, entry.index) < best):
                best, found = (entry.attempts == 0, entry.index), (queue, entry)
        if found is None:
            return None
        queue, entry = found
        queue.remove(entry)
        return entry

    def demand(self) -> dict[Need, int]:
        """How many entries wait per need, the need with the earliest waiting entry first."""
        queues = sorted((q[0].attempts == 0, q[0].index, need, len(q)) for need, q in self.waiting.items() if q)
        return {need: count for _, _, need, count in queues}

    def drop(self, need: Need | None) -> list[Entry]:
        """Remove and return every waiting entry of ``need`` (None: the unresolved ones)."""
        if need is None:
            dropped, self.unresolved = list(self.unresolved), deque()
        else:
            dropped = list(self.waiting.pop(need, ()))
        return dropped

    def done(self, entry: Entry) -> None:
        entry.state = "done"
        self.remaining -= 1


class Scheduler:
    """The state of one sweep and the decisions about it. See the module docstring."""

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
        self.workers: dict[int, WorkerView] = {}
        self._next_worker = 0
        self._unfit_since: dict[Need | None, float] = {}
        self._start_failures: Counter[tuple[str, Shape]] = Counter()  # consecutive, per node and shape
        self.broken: dict[tuple[str, Shape], str] = {}  # (node id, shape) -> why its workers could not start
        self.measured_on: dict[str, set[DeviceKey]] = {}  # experiment id -> devices its runs were dispatched to
        self.ran_in: dict[str, set[int]] = {}  # experiment id -> workers that ran one of its runs in their process

    @property
    def done(self) -> bool:
        return self.queue.remaining == 0

    # -- what the runner reports ---------------------------------------------------------

    def observe_nodes(self, nodes: Iterable[Node]) -> None:
        """The cluster's alive nodes now. A node that left takes its workers with it: the pool
        reports their deaths, which decide what happens to their experiments. A node lost under
        a worker stays out while Ray still lists it; once Ray has not, it is trusted again."""
        listed = {n.node_id: n for n in nodes}
        self.lost = {node_id: n for node_id, n in listed.items() if node_id in self.lost}
        self.nodes = {node_id: n for node_id, n in listed.items() if node_id not in self.lost}
        if self.queue.unresolved:
            self.queue.resolve(self._gpus_seen())

    def worker_ready(
        self, worker_id: int, hostname: str, pid: int, gpu_ids: Sequence[str], calibration: Calibration | None = None
    ) -> None:
        worker = self.workers.get(worker_id)
        if worker is None:
            return
        worker.state, worker.hostname, worker.pid, worker.gpu_ids = "idle", hostname, pid, list(gpu_ids)
        worker.start_deadline = None
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
        result.replicate = entry.replicate
        result.attempts = entry.attempts
        result.lost_nodes = entry.lost_nodes
        result.requested = entry.exp.resources
        result.reserved = Resources(gpus=worker.shape.gpus, cpus=worker.cores)
        return result

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
    ) -> Result | None:
        """The worker's process (or, with ``alive``, the fresh process it ran the experiment in)
        died; with ``node_lost``, because its node was lost. The experiment is retried, or its
        final result returned."""
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
        if oom:
            return self._final(entry, "oom", error, worker, now, started_at)
        if node_lost and not alive:
            entry.lost_nodes += 1
        if entry.attempts - min(entry.lost_nodes, MAX_NODE_LOSSES) <= entry.exp.retries:
            self.queue.requeue(entry)
            return None
        return self._final(entry, "crashed", error, worker, now, started_at)

    def expired(self, now: float) -> list[tuple[int, Result | None]]:
        """Workers past a deadline, for the runner to kill; they are forgotten here (a
        replacement starts if needed). A running experiment past its ``timeout_s`` comes with
        its ``timeout`` result; a worker not started by its start deadline, with None (a failed
        start)."""
        out: list[tuple[int, Result | None]] = []
        for worker in [w for w in self.workers.values() if w.start_deadline is not None and now >= w.start_deadline]:
            del self.workers[worker.id]
            placed = f"{worker.shape.describe_on(worker.node)} on node {worker.node.node_id[:8]}"
            message = f"Ray did not place and start a worker holding {placed} within {self.start_timeout_s:g} s"
            self._start_failed(worker, ErrorInfo(type="WorkerStartTimeout", message=message))
            out.append((worker.id, None))
        for worker in [w for w in self.workers.values() if w.deadline is not None and now >= w.deadline]:
            entry = worker.entry
            assert entry is not None
            del self.workers[worker.id]
            message = f"passed timeout_s={entry.exp.timeout_s:g} s; its worker was killed and replaced"
            error = ErrorInfo(type="Timeout", message=message)
            out.append((worker.id, self._final(entry, "timeout", error, worker, now)))
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline of a running experiment or a starting worker."""
        deadlines = [d for w in self.workers.values() for d in (w.deadline, w.start_deadline) if d is not None]
        return min(deadlines, default=None)

    # -- what to do next -----------------------------------------------------------------

    def plan(self, now: float) -> Plan:
        """Dispatch to idle workers; record what can never run; start and retire workers."""
        plan = Plan()
        self._dispatch(plan, now)
        self._unschedulable(plan, now)
        demand = self.queue.demand()
        unplaced = self._start(plan, demand, now)
        if unplaced and self._retire(plan, unplaced, demand):
            unplaced = self._start(plan, demand, now)  # starting workers, new ones included, are subtracted again
        if self.pending_timeout_s > 0:
            plan.bundles = self._bundles(unplaced)
        return plan

    def _dispatch(self, plan: Plan, now: float) -> None:
        """Idle workers take waiting runs: first those whose experiment has not used the worker's device,
        then those it has not run in the worker's process. A worker left idle with only runs it has
        already run one replicate of is retired: a fresh worker takes its place (``_start``)."""
        for tier in (self._new_device, self._new_process):
            for worker in self.workers.values():
                if worker.state != "idle" or worker.excluded or self._peers_probing(worker):
                    continue
                entry = self.queue.take_for(worker, functools.partial(tier, worker=worker))
                if entry is not None:
                    self._run(plan, worker, entry, now)
        for worker in [
            w
            for w in self.workers.values()
            if w.state == "idle" and not w.excluded and not self._peers_probing(w) and self.queue.has_for(w)
        ]:
            del self.workers[worker.id]
            plan.retire.append(worker.id)

    def _peers_probing(self, worker: WorkerView) -> bool:
        """With ``exclude_slow``: whether workers of the same device model are still starting (their
        probes not in yet): the worker's device is judged against theirs before it runs anything."""
        if not self.exclude_slow:
            return False
        return any(w.state == "starting" and w.device_model == worker.device_model for w in self.workers.values())

    def _new_device(self, entry: Entry, worker: WorkerView) -> bool:
        return worker.device_key not in self.measured_on.get(entry.exp.id, ())

    def _new_process(self, entry: Entry, worker: WorkerView) -> bool:
        return entry.exp.compile.cache in FRESH_PROCESS_CACHES or worker.id not in self.ran_in.get(entry.exp.id, ())

    def _run(self, plan: Plan, worker: WorkerView, entry: Entry, now: float) -> None:
        exp = entry.exp
        cold = exp.compile.cache in FRESH_PROCESS_CACHES  # the worker runs it in a fresh process of its own
        entry.state, entry.attempts = "running", entry.attempts + 1
        worker.state, worker.entry, worker.started_at = "busy", entry, now
        worker.deadline = now + exp.timeout_s
        worker.experiments_before = 0 if cold else worker.experiments
        worker.experiments += not cold
        self.measured_on.setdefault(exp.id, set()).add(worker.device_key)
        if not cold:
            self.ran_in.setdefault(exp.id, set()).add(worker.id)
        plan.dispatch.append(Dispatch(worker.id, exp, entry.replicate))

    def _unschedulable(self, plan: Plan, now: float) -> None:
        """Waiting experiments that no node can hold: after ``pending_timeout_s``, recorded."""
        needs: list[Need | None] = [need for need, q in self.queue.waiting.items() if q]
        if self.queue.unresolved:
            needs.append(None)
        for need in needs:
            why = self._why_unfit(need)
            if why is None:
                self._unfit_since.pop(need, None)
                continue
            since = self._unfit_since.setdefault(need, now)
            if now - since < self.pending_timeout_s:
                continue
            if self.pending_timeout_s > 0:
                why += f" (waited {self.pending_timeout_s:g} s for a node that fits)"
            self._unfit_since.pop(need, None)
            for entry in self.queue.drop(need):
                error = ErrorInfo(type="Unschedulable", message=why)
                plan.results.append(self._final(entry, "unschedulable", error, None, now))

    def _why_unfit(self, need: Need | None) -> str | None:
        """Why no usable node could hold ``need`` even empty, or None if one could."""
        if need is None:
            return None if self._gpus_seen() is not None else "no node with CPUs or GPUs has joined the cluster"
        shape, model = need
        nodes = [n for n in self.nodes.values() if (n.node_id, shape) not in self.broken]
        nodes += self.lost.values()  # not usable now, but not judged before Ray has let them go
        if any(shape.fits(n) and (model is None or node_model(n) == model) for n in nodes):
            return None
        if model is not None and not any(node_model(n) == model for n in self.nodes.values()):
            models = sorted({m for n in self.nodes.values() for m in n.gpu_models})
            return f"needs a {model!r} GPU; the cluster's GPU models are {', '.join(models) or 'none'}"
        fitting = [n for n in self.nodes.values() if shape.fits(n) and (model is None or node_model(n) == model)]
        if fitting:
            reasons = "; ".join(f"node {n.node_id[:8]}: {self.broken[(n.node_id, shape)]}" for n in fitting)
            held = " or ".join(dict.fromkeys(shape.describe_on(n) for n in fitting))
            return f"workers holding {held} could not start on the nodes that fit ({reasons})"
        candidates = [n for n in self.nodes.values() if model is None or node_model(n) == model]
        most_gpus = max((n.gpus for n in candidates), default=0)
        if shape.gpus > most_gpus:
            return f"needs {shape.gpus} GPU(s) on one node; the largest node has {most_gpus}"
        most_cpus = max((n.cpus for n in candidates if n.gpus >= shape.gpus), default=0)
        return f"needs {shape.cpus or 1} CPU(s) on one node; the largest node has {most_cpus}"

    def _start(self, plan: Plan, demand: dict[Need, int], now: float) -> dict[Need, int]:
        """Start workers for the waiting experiments that starting workers will not take, where
        they fit; what could not be placed is returned."""
        unplaced: dict[Need, int] = {}
        free = self._free_capacity()
        for need, count in self._deficits(demand).items():
            shape, model = need
            while count > 0:
                node = self._place(shape, model, free)
                if node is None:
                    unplaced[need] = count
                    break
                worker = self._new_worker(node, shape, now)
                free[node.node_id] = (free[node.node_id][0] - shape.gpus, free[node.node_id][1] - worker.cpus)
                plan.start.append(
                    Start(worker.id, node.node_id, shape.gpus, worker.cpus, worker.cores, worker.device_model)
                )
                count -= 1
        return unplaced

    def _deficits(self, demand: dict[Need, int]) -> dict[Need, int]:
        """Waiting experiments per need beyond what starting workers will take (a starting worker
        on a model's node goes to that model's experiments first)."""
        deficits: dict[Need, int] = {}
        for shape in dict.fromkeys(shape for shape, _ in demand):  # in the order of demand
            spare = Counter(w.gpu_model for w in self.workers.values() if w.state == "starting" and w.shape == shape)
            for (s, model), count in demand.items():
                if s == shape and model is not None:
                    used = min(count, spare[model])
                    spare[model] -= used
                    deficits[(s, model)] = count - used
            if (shape, None) in demand:
                deficits[(shape, None)] = max(0, demand[(shape, None)] - sum(spare.values()))
        return {need: count for need, count in deficits.items() if count > 0}

    def _place(self, shape: Shape, model: str | None, free: dict[str, tuple[float, float]]) -> Node | None:
        """The usable node with the most room where a worker of ``shape`` fits now."""
        best = None
        for node in self.nodes.values():
            if (node.node_id, shape) in self.broken or (model is not None and node_model(node) != model):
                continue
            if not shape.fits(node):
                continue
            gpus, cpus = free[node.node_id]
            room = shape.gpus <= gpus and shape.cpus_on(node) <= cpus + 1e-9
            if room and (best is None or free[best.node_id] < (gpus, cpus)):
                best = node
        return best

    def _retire(self, plan: Plan, unplaced: dict[Need, int], demand: dict[Need, int]) -> bool:
        """Retire idle workers no waiting experiment can use, on nodes where an unplaced need
        would fit; whether any was retired."""
        useful_nodes = {
            n.node_id
            for n in self.nodes.values()
            for shape, model in unplaced
            if shape.fits(n) and (model is None or node_model(n) == model)
        }
        retired = [
            w
            for w in self.workers.values()
            if w.state == "idle" and w.node.node_id in useful_nodes and not any(w.serves(need) for need in demand)
        ]
        for worker in retired:
            del self.workers[worker.id]
            plan.retire.append(worker.id)
        return bool(retired)

    def _bundles(self, unplaced: dict[Need, int]) -> list[dict[str, float]]:
        """The capacity to ask the autoscaler for: our workers and the workers still wanted.
        (``request_resources`` sets a floor on the cluster's size; it does not add to it.)"""
        bundles = [w.shape.bundle(w.gpu_model) for w in self.workers.values()]
        for (shape, model), count in unplaced.items():
            bundles += [shape.bundle(model)] * count
        bundles += [{"CPU": 1.0, "GPU": 1.0}] * len(self.queue.unresolved)  # device auto, no node yet: ask for a GPU
        return bundles

    # -- helpers -------------------------------------------------------------------------

    def _gpus_seen(self) -> bool | None:
        usable = [n for n in self.nodes.values() if n.cpus or n.gpus]
        return None if not usable else any(n.gpus for n in usable)

    def _free_capacity(self) -> dict[str, tuple[float, float]]:
        free = {n.node_id: (float(n.gpus), float(n.cpus)) for n in self.nodes.values()}
        for w in self.workers.values():
            if w.node.node_id in free:
                gpus, cpus = free[w.node.node_id]
                free[w.node.node_id] = (gpus - w.shape.gpus, cpus - w.cpus)
        return free

    def _new_worker(self, node: Node, shape: Shape, now: float) -> WorkerView:
        worker = WorkerView(self._next_worker, node, shape, cpus=shape.cpus_on(node), cores=shape.cores_on(node))
        worker.start_deadline = now + self.start_timeout_s
        self.workers[worker.id] = worker
        self._next_worker += 1
        return worker

    def _free(self, worker: WorkerView) -> None:
        worker.state, worker.entry, worker.deadline, worker.started_at = "idle", None, None, None

    def _start_failed(self, worker: WorkerView, error: ErrorInfo) -> None:
        key = (worker.node.node_id, worker.shape)
        self._start_failures[key] += 1
        if self._start_failures[key] >= MAX_START_FAILURES and key[0] in self.nodes:
            why = f"{error.type}: {error.message.splitlines()[0] if error.message else ''}"
            self.broken[key] = f"{why} ({self._start_failures[key]} failed starts in a row)"

    def _lose(self, node_id: str) -> None:
        """A node was lost under one of our workers: no new worker there until Ray stops listing it."""
        node = self.nodes.pop(node_id, None)
        if node is not None:
            self.lost[node_id] = node

    def _final(
        self,
        entry: Entry,
        status: Status,
        error: ErrorInfo,
        worker: WorkerView | None,
        now: float,
        started_at: float | None = None,
    ) -> Result:
        """A final result made here (the worker made none): when it started on its last worker."""
        self.queue.done(entry)
        started = started_at if started_at is not None else worker.started_at if worker is not None else None
        result = failed_result(
            entry.exp, status, error, started_at=now if started is None else started, finished_at=now
        )
        result.replicate = entry.replicate
        result.attempts = entry.attempts
        result.lost_nodes = entry.lost_nodes
        result.requested = entry.exp.resources
        if worker is not None:
            result.reserved = Resources(gpus=worker.shape.gpus, cpus=worker.cores)
            if worker.pid is not None:
                result.worker = WorkerInfo(
                    hostname=worker.hostname or worker.node.hostname,
                    node_id=worker.node.node_id,
                    pid=worker.pid,
                    gpu_ids=worker.gpu_ids,
                    threads=worker.cores,
                    gpu_model=worker.device_model,
                    experiments_before=worker.experiments_before,
                )
        return result


def failed_result(
    exp: Experiment, status: Status, error: ErrorInfo, *, started_at: float, finished_at: float | None = None
) -> Result:
    """The result of an experiment that produced none of its own."""
    return Result(
        **result_identity(exp),
        device=None,
        status=status,
        error=error,
        started_at=started_at,
        finished_at=time.time() if finished_at is None else finished_at,
    )
