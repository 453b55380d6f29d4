"""Fanning experiments out as Ray tasks, one GPU each, and collecting results as they finish."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray

from orchestrator.cluster import ClusterInfo
from orchestrator.journal import Journal
from tasks.models import ErrorInfo, Experiment, Result

OnResult = Callable[[Result], None]


@dataclass(frozen=True)
class Reservation:
    cpus: int
    gpus: int


def reservation(exp: Experiment, cluster: ClusterInfo) -> Reservation:
    """What a task reserves: explicit ``resources`` win; otherwise one GPU and one core for
    a GPU experiment (``cuda``, or ``auto`` on a cluster with GPUs) and, for a CPU
    experiment, every core of the smallest node, so that CPU experiments on a node are
    timed one at a time rather than disturbing each other."""
    gpus = exp.resources.gpus
    if gpus is None:
        gpus = 1 if exp.device == "cuda" or (exp.device == "auto" and cluster.gpus > 0) else 0
    cpus = exp.resources.cpus or (1 if gpus else cluster.min_cpus_per_node)
    return Reservation(cpus=cpus, gpus=gpus)


def unschedulable(need: Reservation, cluster: ClusterInfo) -> str | None:
    """Why no node of the cluster can ever hold this reservation, or None."""
    if need.gpus > cluster.max_gpus_per_node:
        return f"needs {need.gpus} GPU(s) on one node; the largest node has {cluster.max_gpus_per_node}"
    if need.cpus > cluster.max_cpus_per_node:
        return f"needs {need.cpus} CPU(s) on one node; the largest node has {cluster.max_cpus_per_node}"
    return None


def _execute(payload: dict[str, Any], cpus: int) -> dict[str, Any]:
    """The Ray task: validate the experiment, run it where Ray placed it, return plain data."""
    from tasks.procedure import Placement, run_experiment

    ctx = ray.get_runtime_context()
    gpu_ids = ctx.get_accelerator_ids().get("GPU", [])
    placement = Placement(node_id=ctx.get_node_id(), gpu_ids=gpu_ids, cpus=cpus)
    return run_experiment(Experiment.model_validate(payload), placement).model_dump(mode="json")


# A process keeps the CUDA_VISIBLE_DEVICES it first initialised CUDA with, so a GPU task
# runs in a process of its own: its one device is the one Ray reserved. So does a cold-cache
# experiment: a true cold compile needs a process that has compiled nothing. max_calls=1
# alone is not enough (Ray hands such a task an idle worker that already ran other tasks);
# a runtime_env of its own keeps those workers apart, and max_calls=1 ends each after one task.
# Other CPU tasks reuse workers. A crashed experiment is reported, not retried.
FRESH_PROCESS_ENV = {"env_vars": {"COMPILEBENCH_FRESH_PROCESS": "1"}}
_run_in_fresh_process = ray.remote(max_calls=1, max_retries=0, runtime_env=FRESH_PROCESS_ENV)(_execute)
_run_in_any_process = ray.remote(max_retries=0)(_execute)


def run_experiments(
    experiments: Sequence[Experiment],
    cluster: ClusterInfo,
    journal: Journal | None = None,
    on_result: OnResult | None = None,
) -> list[Result]:
    """Submit every experiment, collect results as they finish (``ray.wait``), in spec order."""
    results: dict[str, Result] = {}

    def record(result: Result) -> None:
        results[result.experiment_id] = result
        if journal is not None:
            journal.append(result)
        if on_result is not None:
            on_result(result)

    pending: dict[ray.ObjectRef, tuple[Experiment, float]] = {}
    for exp in experiments:
        need = reservation(exp, cluster)
        why = unschedulable(need, cluster)
        if why:
            record(failed(exp, ErrorInfo(type="Unschedulable", message=why), time.time()))
            continue
        fresh = need.gpus > 0 or exp.compile.cache == "cold"
        task = _run_in_fresh_process if fresh else _run_in_any_process
        ref = task.options(num_cpus=need.cpus, num_gpus=need.gpus).remote(exp.model_dump(mode="json"), need.cpus)
        pending[ref] = (exp, time.time())

    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            exp, submitted = pending.pop(ref)
            try:
                result = Result.model_validate(ray.get(ref))
            except Exception as e:  # the worker died, or its result did not come back
                result = failed(exp, ErrorInfo.from_exception(e), submitted)
            record(result)
    return [results[exp.id] for exp in experiments]


def failed(exp: Experiment, error: ErrorInfo, started_at: float) -> Result:
    """A ``runtime_error`` result for an experiment that produced none of its own."""
    return Result(
        experiment_id=exp.id,
        target=exp.target,
        params=exp.params,
        device=None,
        compile=exp.compile,
        timing=exp.timing,
        seed=exp.seed,
        phase=exp.phase,
        precision=exp.precision,
        gpu_model=exp.gpu_model,
        status="runtime_error",
        error=error,
        started_at=started_at,
        finished_at=time.time(),
    )
