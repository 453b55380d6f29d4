"""The policy's plain data, at the bottom of the package: worker shapes, the runs of a sweep, a run's
entry in the queue, a worker as the policy sees it, and the ``Plan`` of actions the runner carries out.

Dataclasses and small pure functions only; it imports nothing of the policy's other modules, so that
the queue, placement, the fault rules and the scheduler above it all speak the same data (and so
can a pool that is simulated rather than Ray's). No Ray.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.machines.nodes import Node
from tasks.models import Calibration, Experiment, Resources, Result

MODEL_RESOURCE_SHARE = 0.001  # what a task asks of a node's ``accelerator_type:<MODEL>`` resource (Ray's convention)


@dataclass(frozen=True)
class Shape:
    """What a worker holds for life: ``gpus`` devices and ``cpus`` cores (None: the node's share) for each
    of its processes; ``ranks`` None for a worker of one process, k for a gang of k rank processes on one
    node (a distributed experiment's: each rank holds ``gpus`` and ``cpus`` of its own).

    The node's share is, for a GPU worker, the node's cores divided by its GPUs (rounded down;
    an equal fraction when a node declares fewer cores than GPUs, as a local instance with
    logical GPUs may), times its GPUs; for a CPU worker, every core of the node, so that CPU
    experiments on a node are timed one at a time; for a rank of a CPU gang, an equal share of the
    node's cores (its core set: rounded down, so a 2-core node holds a gang of 2 ranks of 1 core).
    """

    gpus: int
    cpus: int | None = None
    ranks: int | None = None

    @property
    def processes(self) -> int:
        """Processes of a worker of this shape: its ranks, or one."""
        return self.ranks or 1

    @property
    def held_gpus(self) -> int:
        """GPUs a worker of this shape holds on its node, all its processes together."""
        return self.gpus * self.processes

    def rank_cpus_on(self, node: Node) -> float:
        """The CPUs each process of such a worker reserves on ``node`` (Ray's ``num_cpus``)."""
        if self.cpus is not None:
            return float(self.cpus)
        if self.gpus == 0:
            return float(node.cpus // self.processes)
        if node.gpus == 0:
            return 0.0
        share = node.cpus / node.gpus
        return self.gpus * (float(int(share)) if share >= 1 else int(share * 1e4) / 1e4)  # Ray counts in 1e-4

    def cpus_on(self, node: Node) -> float:
        """The CPUs a worker of this shape reserves on ``node``, all its processes together."""
        return self.rank_cpus_on(node) * self.processes

    def cores_on(self, node: Node) -> int:
        """The cores each of its processes claims and pins to (at least one)."""
        return max(1, int(self.rank_cpus_on(node)))

    def describe_on(self, node: Node) -> str:
        """What a worker of this shape asks Ray for on ``node``, in words: ``1 GPU and 4 CPUs``, or for a
        gang ``2 ranks of 1 GPU and 4 CPUs``."""
        cpus = self.rank_cpus_on(node)
        held = [f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"] if self.gpus else []
        held.append(f"{cpus:g} CPU{'s' if cpus != 1 else ''}")
        each = " and ".join(held)
        return each if self.ranks is None else f"{self.ranks} rank{'s' if self.ranks != 1 else ''} of {each}"

    def fits(self, node: Node) -> bool:
        """Whether an empty ``node`` can hold a worker of this shape."""
        cpus = self.rank_cpus_on(node)
        return self.held_gpus <= node.gpus and cpus * self.processes <= node.cpus and (self.gpus > 0 or cpus > 0)

    def bundle(self, gpu_model: str | None) -> dict[str, float]:
        """The resources to ask the autoscaler for, to hold one such worker: a gang's ranks in one bundle
        (a bundle is never split across nodes, so only a node that holds the whole gang meets it)."""
        bundle: dict[str, float] = {"CPU": float(self.cpus or 1) * self.processes}
        if self.gpus:
            bundle["GPU"] = float(self.held_gpus)
        if gpu_model:
            bundle[f"accelerator_type:{gpu_model}"] = MODEL_RESOURCE_SHARE
        return bundle


def node_model(node: Node) -> str | None:
    """The node's GPU model (its ``accelerator_type``), or None."""
    return node.gpu_models[0] if node.gpu_models else None


def shape_of(exp: Experiment, gpus_seen: bool | None) -> Shape | None:
    """The worker shape ``exp`` runs on. ``device: auto`` means a GPU when the cluster has one;
    ``gpus_seen`` is None while no node has any CPU or GPU to judge by (the shape is then None:
    decided once nodes join). A distributed experiment runs on a gang of ``world_size`` ranks,
    each holding one GPU (or, on the CPU, a core set)."""
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
    ranks = exp.distributed.world_size if exp.distributed is not None else None
    return Shape(gpus=gpus, cpus=exp.resources.cpus, ranks=ranks)


Need = tuple[Shape, str | None]  # a worker shape and the GPU model asked for (None: any)
NodeShape = tuple[str, Shape]  # a node id and a worker shape: what failed starts are counted by
DeviceKey = tuple[str, ...]  # a GPU worker's node and GPU ids; a CPU worker's own id: where a run measured


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

    @functools.cached_property
    def exp_id(self) -> str:
        """``exp.id``, worked out once (a hash of the experiment's fields)."""
        return self.exp.id

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


def stamp_run(result: Result, entry: Entry, worker: WorkerView | None) -> Result:
    """``result`` marked as the outcome of ``entry``'s run: its replicate, its tries, its node losses,
    what it asked for and (on ``worker``) what it held."""
    result.replicate = entry.replicate
    result.attempts = entry.attempts
    result.lost_nodes = entry.lost_nodes
    result.requested = entry.exp.resources
    if worker is not None:
        result.reserved = Resources(gpus=worker.shape.gpus, cpus=worker.cores)  # a gang's: each rank's
        if result.distributed is not None and worker.shape.ranks is not None:
            result.distributed.gang_id = f"gang-{worker.id}"
            result.distributed.gang_experiments_before = worker.experiments_before
    return result


@dataclass(frozen=True)
class Start:
    """Start a worker on a node, holding ``gpus`` GPUs and ``cpus`` CPUs for life; with ``ranks``, a gang of
    that many rank processes holding ``gpus`` and ``cpus`` each, their collectives timing out after
    ``collective_timeout_s`` (the longest ``timeout_s`` of the experiments it was started for)."""

    worker_id: int
    node_id: str
    gpus: int
    cpus: float
    cores: int
    gpu_model: str | None
    ranks: int | None = None
    collective_timeout_s: float | None = None


@dataclass(frozen=True)
class Dispatch:
    """Run ``experiment`` (its run ``replicate``) on an idle worker."""

    worker_id: int
    experiment: Experiment
    replicate: int = 0


@dataclass
class Plan:
    """What the runner carries out next, in this order: results, retirements, starts, dispatches."""

    start: list[Start] = field(default_factory=list)
    retire: list[int] = field(default_factory=list)
    dispatch: list[Dispatch] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)  # final: unschedulable experiments
    bundles: list[dict[str, float]] = field(default_factory=list)  # the capacity the sweep wants, for the autoscaler
