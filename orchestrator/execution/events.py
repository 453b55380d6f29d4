"""What the pool's actors find where Ray put them, and what comes back from them as the runner's events.

An actor (a worker, or one rank of a gang) builds its ``placement`` once, where Ray started it: its node,
the GPUs Ray gave it (``CUDA_VISIBLE_DEVICES`` is set before anything touches CUDA), the cores it claims
and the run's settings. What it answers becomes one of three plain events, ``Ready``, ``Finished`` or
``Died``; a Ray error becomes a ``Died`` here, a node loss told apart from a crash (``death``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from tasks.models import Calibration, ErrorInfo

# What Ray's errors say when an actor or task died with its node (Ray 2.60's GCS and core worker messages).
NODE_LOST_SIGNS = (
    "its node has died",
    "the actor's node was",  # ... terminated, preempted
    "node it was running on is dead",
    "NodeAffinitySchedulingStrategy doesn't exist",  # the node left before the actor was placed
)


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
    rank: int | None = None  # a gang's: the rank whose process died (or whose own code raised)


Event = Ready | Finished | Died


def actor_placement(
    cores: int,
    gpu_model: str | None,
    limits: dict[str, Any] | None,
    calibrate: bool = False,
    compile_cache: str | None = None,
) -> dict[str, Any]:
    """What an actor is given for life, read where Ray started it (``tasks.worker.Worker``'s ``placement``)."""
    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
        "cpus": cores,
        "gpu_model": gpu_model,
        "limits": limits or {},
        "calibrate": calibrate,
        "compile_cache": compile_cache,
    }


def death(worker_id: int, error: Exception, node_id: str | None, rank: int | None = None) -> Died:
    """The event for a call that raised: Ray's memory monitor (``oom``), a death with the node
    (``node_lost``: Ray says so, or no longer lists the node as alive), or any other death; a gang's names
    its ``rank``. An exception raised by the actor's own code (``RayTaskError``) is a death too: its
    state cannot be trusted."""
    info = ErrorInfo.from_exception(error)
    if rank is not None:
        info = ErrorInfo(type=info.type, message=f"rank {rank}: {info.message}")
    if isinstance(error, ray.exceptions.OutOfMemoryError):
        return Died(worker_id, info, oom=True, rank=rank)
    lost = not isinstance(error, ray.exceptions.RayTaskError) and node_lost(error, node_id)
    return Died(worker_id, info, node_lost=lost, rank=rank)


def node_lost(error: Exception, node_id: str | None) -> bool:
    """Whether an actor died with its node: Ray says so, or no longer lists the node as alive."""
    if getattr(error, "preempted", False) or any(sign in str(error) for sign in NODE_LOST_SIGNS):
        return True
    if node_id is None:
        return False
    return not any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())
