"""Placement on nodes, as pure functions of plain data: what room our workers leave on each node, which
node a new worker goes to, how many workers each need still lacks, why a need fits no node at all,
which idle workers make way, and the capacity to ask the autoscaler for.

Each function reads nodes, workers and the (node, shape) pairs that failed to start, and returns an
answer; none changes what it is given. The scheduler decides when to ask and carries the answers
out. Imports only the data model; no Ray.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping

from orchestrator.execution.policy.model import Need, NodeShape, Shape, WorkerView, node_model
from orchestrator.machines.nodes import Node

Free = dict[str, tuple[float, float]]  # node id -> (GPUs, CPUs) our workers leave free there


def fits(need: Need, node: Node) -> bool:
    """Whether an empty ``node`` can hold a worker for ``need``: its shape fits, and its GPU model, if asked."""
    shape, model = need
    return shape.fits(node) and (model is None or node_model(node) == model)


def gpus_seen(nodes: Iterable[Node]) -> bool | None:
    """Whether the usable nodes (those with a CPU or a GPU) have a GPU; None while there is none."""
    usable = [n for n in nodes if n.cpus or n.gpus]
    return None if not usable else any(n.gpus for n in usable)


def free_capacity(nodes: Iterable[Node], workers: Iterable[WorkerView]) -> Free:
    """The GPUs and CPUs each node has left beside the workers placed on it."""
    free = {n.node_id: (float(n.gpus), float(n.cpus)) for n in nodes}
    for w in workers:
        if w.node.node_id in free:
            gpus, cpus = free[w.node.node_id]
            free[w.node.node_id] = (gpus - w.shape.held_gpus, cpus - w.cpus)
    return free


def place(
    shape: Shape, model: str | None, nodes: Iterable[Node], broken: Collection[NodeShape], free: Free
) -> Node | None:
    """The usable node with the most room where a worker of ``shape`` fits now."""
    best = None
    for node in nodes:
        if (node.node_id, shape) in broken or (model is not None and node_model(node) != model):
            continue
        if not shape.fits(node):
            continue
        gpus, cpus = free[node.node_id]
        room = shape.held_gpus <= gpus and shape.cpus_on(node) <= cpus + 1e-9
        if room and (best is None or free[best.node_id] < (gpus, cpus)):
            best = node
    return best


def deficits(demand: Mapping[Need, int], workers: Iterable[WorkerView]) -> dict[Need, int]:
    """Waiting experiments per need beyond what starting workers will take (a starting worker
    on a model's node goes to that model's experiments first)."""
    starting = [w for w in workers if w.state == "starting"]
    out: dict[Need, int] = {}
    for shape in dict.fromkeys(shape for shape, _ in demand):  # in the order of demand
        spare = Counter(w.gpu_model for w in starting if w.shape == shape)
        for (s, model), count in demand.items():
            if s == shape and model is not None:
                used = min(count, spare[model])
                spare[model] -= used
                out[(s, model)] = count - used
        if (shape, None) in demand:
            out[(shape, None)] = max(0, demand[(shape, None)] - sum(spare.values()))
    return {need: count for need, count in out.items() if count > 0}


def making_way(
    workers: Iterable[WorkerView], nodes: Iterable[Node], unplaced: Iterable[Need], demand: Iterable[Need]
) -> list[WorkerView]:
    """The idle workers no waiting experiment can use, on nodes where an unplaced need would fit:
    those to retire so that it can."""
    wanted, needs = list(unplaced), list(demand)
    useful_nodes = {n.node_id for n in nodes for need in wanted if fits(need, n)}
    return [
        w
        for w in workers
        if w.state == "idle" and w.node.node_id in useful_nodes and not any(w.serves(need) for need in needs)
    ]


def why_unfit(
    need: Need | None, nodes: Mapping[str, Node], lost: Iterable[Node], broken: Mapping[NodeShape, str]
) -> str | None:
    """Why no usable node could hold ``need`` even empty, or None if one could. ``need`` None stands for
    the experiments of ``device: auto`` whose shape no node has decided yet. ``lost`` nodes are not
    usable now, but not judged before Ray has let them go."""
    if need is None:
        return None if gpus_seen(nodes.values()) is not None else "no node with CPUs or GPUs has joined the cluster"
    shape, model = need
    usable = [n for n in nodes.values() if (n.node_id, shape) not in broken]
    if any(fits(need, n) for n in [*usable, *lost]):
        return None
    if model is not None and not any(node_model(n) == model for n in nodes.values()):
        models = sorted({m for n in nodes.values() for m in n.gpu_models})
        return f"needs a {model!r} GPU; the cluster's GPU models are {', '.join(models) or 'none'}"
    fitting = [n for n in nodes.values() if fits(need, n)]
    if fitting:
        reasons = "; ".join(f"node {n.node_id[:8]}: {broken[(n.node_id, shape)]}" for n in fitting)
        held = " or ".join(dict.fromkeys(shape.describe_on(n) for n in fitting))
        return f"workers holding {held} could not start on the nodes that fit ({reasons})"
    candidates = [n for n in nodes.values() if model is None or node_model(n) == model]
    most_gpus = max((n.gpus for n in candidates), default=0)
    if shape.ranks is not None:
        return gang_unfit(shape, candidates)
    if shape.gpus > most_gpus:
        return f"needs {shape.gpus} GPU(s) on one node; the largest node has {most_gpus}"
    most_cpus = max((n.cpus for n in candidates if n.gpus >= shape.gpus), default=0)
    return f"needs {shape.cpus or 1} CPU(s) on one node; the largest node has {most_cpus}"


def gang_unfit(shape: Shape, candidates: Iterable[Node]) -> str:
    """Why no node can hold a gang of ``shape`` (a distributed experiment's ranks, all on one node): too
    few GPUs, or too few cores for a core set per rank."""
    nodes, ranks = list(candidates), shape.processes
    most_gpus = max((n.gpus for n in nodes), default=0)
    if shape.held_gpus > most_gpus:
        return (
            f"distributed.world_size {ranks} needs {shape.held_gpus} GPU(s) on one node, {shape.gpus} per rank; "
            f"the largest node has {most_gpus}"
        )
    per_rank = shape.cpus or 1
    most = max((n.cpus // per_rank for n in nodes if n.gpus >= shape.held_gpus), default=0)
    return (
        f"distributed.world_size {ranks} needs {ranks} CPU workers on one node (a core set of {per_rank} "
        f"core(s) per rank); the largest node has {most}"
    )


def bundles(workers: Iterable[WorkerView], unplaced: Mapping[Need, int], unresolved: int) -> list[dict[str, float]]:
    """The capacity to ask the autoscaler for: our workers and the workers still wanted; ``unresolved``:
    runs of ``device: auto`` with no node yet to decide by, each asking for a GPU.
    (``request_resources`` sets a floor on the cluster's size; it does not add to it.)"""
    out = [w.shape.bundle(w.gpu_model) for w in workers]
    for (shape, model), count in unplaced.items():
        out += [shape.bundle(model)] * count
    out += [{"CPU": 1.0, "GPU": 1.0}] * unresolved
    return out
