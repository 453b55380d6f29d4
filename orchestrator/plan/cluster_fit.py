"""Checking a spec against the cluster it is about to run on: rules that need the nodes, not only the file.

A distributed experiment runs its ``world_size`` ranks on one node (a gang: one process per rank), each
holding one GPU, or on a cluster without GPUs one CPU worker: a core set of ``resources.cpus`` cores
(one unless given) of its own. So a world size larger than the largest node's GPUs (or the number of
such core sets the largest node has) can never run; on a cluster that does not grow (a local instance)
the run refuses it before anything starts, in one line naming the field. On a cluster that scales,
the scheduler waits for a node that fits instead (``orchestrator.execution.policy``). Needs neither
torch nor Ray.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from orchestrator.machines.nodes import Node
from orchestrator.plan.spec import SpecError
from tasks.experiment import Experiment


def rank_gpus(exp: Experiment, cluster_has_gpus: bool) -> int:
    """GPUs each rank of ``exp`` holds: ``resources.gpus``, else one on a GPU (``device: auto`` on a cluster
    with GPUs), else none."""
    if exp.resources.gpus is not None:
        return exp.resources.gpus
    if exp.device == "cuda" or exp.gpu_model is not None:
        return 1
    return 1 if exp.device == "auto" and cluster_has_gpus else 0


def world_size_problem(exp: Experiment, nodes: Sequence[Node]) -> str | None:
    """Why no node of ``nodes`` can hold ``exp``'s ranks together, or None."""
    if exp.distributed is None:
        return None
    ranks = exp.distributed.world_size
    candidates = [n for n in nodes if exp.gpu_model is None or exp.gpu_model in n.gpu_models]
    gpus = rank_gpus(exp, any(n.gpus for n in nodes))
    if gpus:
        most = max((n.gpus for n in candidates), default=0)
        if ranks * gpus > most:
            model = f" {exp.gpu_model}" if exp.gpu_model else ""
            return (
                f"distributed.world_size: {ranks} ranks need {ranks * gpus}{model} GPU(s) on one node "
                f"({gpus} per rank); the largest node has {most}"
            )
        return None
    cores = exp.resources.cpus or 1
    most_workers = max((n.cpus // cores for n in candidates), default=0)
    if ranks > most_workers:
        most_cores = max((n.cpus for n in candidates), default=0)
        return (
            f"distributed.world_size: {ranks} ranks need {ranks} CPU workers on one node (a core set of {cores} "
            f"core(s) per rank); the largest node has {most_cores} core(s): {most_workers} CPU worker(s)"
        )
    return None


def check_fits(name: str, experiments: Iterable[Experiment], nodes: Sequence[Node]) -> None:
    """Raise ``SpecError`` for the first experiment whose ranks no node of ``nodes`` can hold together."""
    for exp in experiments:
        problem = world_size_problem(exp, nodes)
        if problem is not None:
            assert exp.distributed is not None
            raise SpecError(f"{name}: experiment {exp.target} ({exp.distributed.label()}, id {exp.id}): {problem}")
