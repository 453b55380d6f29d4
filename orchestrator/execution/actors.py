"""The Ray actors a worker process runs: ``WorkerActor``, one long-lived worker (started by
``orchestrator.execution.pool``), and ``RankActor``, one rank of a gang (``orchestrator.execution.gang``).

Ray starts each actor in a process of its own, and that process imports the module its class is defined in.
This one imports Ray and ``actor_placement`` and nothing of the scheduler: an actor needs neither the
policy nor the cluster's description nor the pool. Defined beside the pool, each worker process imported all
of them: 120-130 ms of its start on top of Ray's own, 90-108 ms from here, most of it the models a worker
needs anyway (``tasks.models``). What an actor runs is its executor's: ``tasks.worker.Worker`` and
``tasks.distributed.RankWorker`` by default, imported where the actor is built.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any, Protocol

import ray

from orchestrator.execution.events import actor_placement


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
        self.placement = actor_placement(cores, gpu_model, limits, calibrate, compile_cache)
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


class RankRuns(Protocol):
    """One rank of a gang (``tasks.distributed.RankWorker``)."""

    def address(self) -> tuple[str, int]: ...
    def join(self, master_addr: str, master_port: int, timeout_s: float) -> dict[str, Any]: ...
    def run(self, payload: dict[str, Any]) -> dict[str, Any]: ...
    def leave(self) -> None: ...


# What a rank runs experiments with: built once per rank actor from its placement (as ``Executor``), its
# rank and the world size. The default is ``tasks.distributed.RankWorker``; tests of the scheduler inject
# a stub that needs no torch.
RankExecutor = Callable[[dict[str, Any], int, int], RankRuns]


def _default_rank_executor(placement: dict[str, Any], rank: int, world_size: int) -> RankRuns:
    from tasks.distributed import RankWorker

    return RankWorker(placement, rank, world_size)  # type: ignore[no-any-return]


@ray.remote(max_restarts=0, max_task_retries=0)
class RankActor:
    """One rank of a gang: joins the gang's process group, then runs the experiments it is sent."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        cores: int,
        gpu_model: str | None,
        executor: RankExecutor | None,
        limits: dict[str, Any] | None = None,
        compile_cache: str | None = None,
    ) -> None:
        self.placement = actor_placement(cores, gpu_model, limits, compile_cache=compile_cache)
        self.rank = rank
        self.worker = (executor or _default_rank_executor)(self.placement, rank, world_size)

    def ready(self) -> dict[str, Any]:
        return {"hostname": socket.gethostname(), "pid": os.getpid(), "gpu_ids": self.placement["gpu_ids"]}

    def address(self) -> tuple[str, int]:
        return self.worker.address()

    def join(self, master_addr: str, master_port: int, timeout_s: float) -> dict[str, Any]:
        return self.worker.join(master_addr, master_port, timeout_s)

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self.worker.run(payload)

    def leave(self) -> None:
        self.worker.leave()
