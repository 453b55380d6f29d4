"""A long-lived rank of a gang: one process of a distributed experiment's k, reused across experiments.

``RankWorker`` is a ``tasks.worker.Worker`` (its cores claimed for life before torch starts a pool,
the process reset after each experiment, replaced past its limits) that is also one rank of a
``torch.distributed`` process group. The driver makes k of them on one node, one per GPU (or core
set), and calls each method on all of them at once:

1. ``address()`` on rank 0: this node's IP and a free port, the rendezvous;
2. ``join(addr, port, timeout_s)`` on every rank: the process group, whose collectives time out
   after ``timeout_s`` (the driver derives it from the experiment's deadline);
3. ``run(payload)`` on every rank, once per experiment: this rank's ``RankOutcome`` as plain data
   (``tasks.distributed.step``), never raising for a fault of the target. Afterwards the rank resets
   its process (``tasks.reset``) and waits at a barrier for the others, so that the next experiment
   starts on every rank together; ``RETIRE`` beside the outcome asks for the gang to be replaced,
   as a worker's does;
4. ``leave()``: the process group destroyed (before a rebuild, or at the end).

An outcome with ``group_ok`` false (a collective broke or timed out) means the gang must leave and
join again, or be replaced, before its next experiment. Nothing here knows about Ray.
"""

from __future__ import annotations

from typing import Any

from tasks.worker import RETIRE, Worker


class RankWorker(Worker):
    """Rank ``rank`` of a gang of ``world_size`` long-lived processes (see the module docstring)."""

    def __init__(self, placement: dict[str, Any], rank: int, world_size: int) -> None:
        super().__init__(placement)  # claims cores, imports torch and the procedure; touches no CUDA
        self.rank, self.world_size = rank, world_size
        self.joined: dict[str, Any] | None = None
        self.group_ok = False

    def address(self) -> tuple[str, int]:
        """This node's IP and a free TCP port: the rendezvous of the gang, asked of rank 0."""
        from tasks.distributed.group import free_port, node_address

        return node_address(), free_port()

    def join(self, master_addr: str, master_port: int, timeout_s: float) -> dict[str, Any]:
        """Join the gang's process group at rank 0's address; collectives time out after ``timeout_s``."""
        from tasks.distributed.group import join

        self.joined = join(master_addr, master_port, self.rank, self.world_size, timeout_s)
        self.group_ok = True
        return self.joined

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """This rank's part of one distributed experiment, as a ``RankOutcome``'s plain data; never raises."""
        from tasks.distributed.outcome import RankOutcome
        from tasks.distributed.step import run_rank
        from tasks.models import ErrorInfo, Experiment
        from tasks.procedure import Placement

        self.experiments += 1
        try:
            exp = Experiment.model_validate(payload)
            if exp.distributed is None or exp.distributed.world_size != self.world_size or not self.group_ok:
                raise ValueError(self._mismatch(exp))
            outcome = run_rank(exp, self._placement(Placement), self.rank, self.world_size, self.experiments - 1)
        except Exception as e:  # a payload this gang cannot run: nothing ran, no rank waits
            outcome = RankOutcome(rank=self.rank, status="runtime_error", error=ErrorInfo.from_exception(e))
        self.group_ok = self.group_ok and outcome.group_ok
        why = self._reset() or self._over_limits(payload.get("worker") or {})
        if self.group_ok:
            self._barrier(outcome.device)
        result = outcome.model_dump(mode="json")
        result["group_ok"] = self.group_ok
        if why is not None:
            result[RETIRE] = why
        return result

    def leave(self) -> None:
        """Destroy the process group (the gang is rebuilt with ``join``, or ends)."""
        from tasks.distributed.group import leave

        leave()
        self.joined, self.group_ok = None, False

    def _placement(self, kind: Any) -> Any:
        p = self.placement
        return kind(
            node_id=p.get("node_id"),
            gpu_ids=tuple(p.get("gpu_ids") or ()),
            cpus=p.get("cpus"),
            gpu_model=p.get("gpu_model"),
            compile_cache=p.get("compile_cache"),
        )

    def _mismatch(self, exp: Any) -> str:
        if not self.group_ok:
            return "this rank has no usable process group (join the gang first, or rebuild it after a fault)"
        if exp.distributed is None:
            return "a RankWorker runs distributed experiments only (Experiment.distributed is None)"
        return f"the experiment asks for world_size {exp.distributed.world_size}; this gang has {self.world_size}"

    def _barrier(self, device_kind: str | None) -> None:
        """Wait for every rank; a barrier that breaks leaves the group unusable."""
        import torch

        from tasks.distributed.group import barrier

        try:
            barrier(torch.device("cuda" if device_kind == "cuda" else "cpu"))
        except Exception:
            self.group_ok = False
