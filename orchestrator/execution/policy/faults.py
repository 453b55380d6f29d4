"""The fault rules, in one place: what a worker's death, a deadline passed, a failed start, a lost node,
an unreadable answer and an experiment no node can hold each do to a run, and the final result made
for a run whose worker made none.

- A death sends the run back to the front of the queue while it has retries left (``retries``; a
  node's loss free of charge up to ``MAX_NODE_LOSSES``), else it is ``crashed``; Ray's memory
  monitor killing the worker is ``oom``, never retried.
- A run past ``timeout_s`` is ``timeout``, never retried; a worker not started ``start_timeout_s``
  after it was asked for is a failed start, and ``MAX_START_FAILURES`` in a row of one shape on a
  node leave that node out for that shape.
- A node lost under a worker takes no new worker, and its idle workers no run, until Ray stops listing it
  as alive.
- A gang is one worker of k rank processes: the death of any rank is the gang's death (its result names
  the rank), a deadline passed ends the whole gang (its result names the ranks that had not answered).

Pure functions over the data model (the scheduler keeps the state and calls them); no Ray.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from orchestrator.execution.policy.model import Entry, WorkerView, stamp_run
from orchestrator.machines.nodes import Node
from tasks.models import (
    DistributedResult,
    ErrorInfo,
    Experiment,
    RankFigures,
    Result,
    Status,
    WorkerInfo,
    result_identity,
)
from tasks.text import first_line

MAX_START_FAILURES = 3  # consecutive failed starts of one shape on a node, after which it takes none of that shape
MAX_NODE_LOSSES = 3  # node losses an experiment may see free of charge; past them each spends a retry
DEFAULT_START_TIMEOUT_S = 600.0  # a worker Ray has not placed and started by then counts as a failed start


def after_death(entry: Entry, *, oom: bool, node_lost: bool) -> Literal["oom", "crashed"] | None:
    """What the death of its worker does to ``entry``'s run: None, back to the queue (a retry left, or a
    node's loss free of charge), else its final status. ``node_lost``: the worker died with its node,
    which the entry counts."""
    if oom:
        return "oom"  # the next try would exhaust the host's memory again
    if node_lost:
        entry.lost_nodes += 1
    if entry.attempts - min(entry.lost_nodes, MAX_NODE_LOSSES) <= entry.exp.retries:
        return None
    return "crashed"


def trusted_nodes(listed: Iterable[Node], lost: Mapping[str, Node]) -> tuple[dict[str, Node], dict[str, Node]]:
    """The alive nodes that may take workers, and those still out: a node lost under a worker stays out
    while Ray still lists it (Ray may show a dying node alive); once Ray has not, it is trusted again."""
    by_id = {n.node_id: n for n in listed}
    still_lost = {node_id: n for node_id, n in by_id.items() if node_id in lost}
    return {node_id: n for node_id, n in by_id.items() if node_id not in still_lost}, still_lost


def unstarted(workers: Iterable[WorkerView], now: float) -> list[WorkerView]:
    """The workers not started by their start deadline: failed starts, to kill."""
    return [w for w in workers if w.start_deadline is not None and now >= w.start_deadline]


def timed_out(workers: Iterable[WorkerView], now: float) -> list[WorkerView]:
    """The workers whose running experiment passed its ``timeout_s``: to kill, the experiment ``timeout``."""
    return [w for w in workers if w.deadline is not None and now >= w.deadline]


def start_timeout_error(worker: WorkerView, start_timeout_s: float) -> ErrorInfo:
    placed = f"{worker.shape.describe_on(worker.node)} on node {worker.node.node_id[:8]}"
    message = f"Ray did not place and start a worker holding {placed} within {start_timeout_s:g} s"
    return ErrorInfo(type="WorkerStartTimeout", message=message)


def timeout_error(exp: Experiment) -> ErrorInfo:
    return ErrorInfo(
        type="Timeout", message=f"passed timeout_s={exp.timeout_s:g} s; its worker was killed and replaced"
    )


def unschedulable_error(why: str, pending_timeout_s: float) -> ErrorInfo:
    if pending_timeout_s > 0:
        why += f" (waited {pending_timeout_s:g} s for a node that fits)"
    return ErrorInfo(type="Unschedulable", message=why)


def broken_after(error: ErrorInfo, failures: int) -> str | None:
    """Why a node takes no more workers of a shape after ``failures`` failed starts in a row, the last
    with ``error``; None while it may still take them."""
    if failures < MAX_START_FAILURES:
        return None
    return f"{error.type}: {first_line(error.message)} ({failures} failed starts in a row)"


def final_result(
    entry: Entry,
    status: Status,
    error: ErrorInfo,
    worker: WorkerView | None,
    now: float,
    started_at: float | None,
    failed_rank: int | None = None,
) -> Result:
    """A final result made here (the worker made none): started when it started on its last worker
    (``started_at``, else the worker's), finished ``now``; a distributed experiment's says its gang, and
    ``failed_rank``, the rank whose fault ended it."""
    started = started_at if started_at is not None else worker.started_at if worker is not None else None
    result = failed_result(entry.exp, status, error, started_at=now if started is None else started, finished_at=now)
    if entry.exp.distributed is not None:
        shape = worker.shape if worker is not None else entry.shape
        result.distributed = gang_outline(entry.exp, shape is not None and shape.gpus > 0, failed_rank, error)
    stamp_run(result, entry, worker)
    if worker is not None and worker.pid is not None:
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


def gang_outline(
    exp: Experiment, on_gpus: bool, failed_rank: int | None = None, error: ErrorInfo | None = None
) -> DistributedResult:
    """What a distributed result made here can say of its gang: the config, the world size, the backend its
    ranks use (``nccl`` on GPUs, ``gloo`` on the CPU), and the rank that failed, with its error."""
    assert exp.distributed is not None
    ranks = [RankFigures(rank=failed_rank, error=error)] if failed_rank is not None else []
    return DistributedResult(
        config=exp.distributed,
        world_size=exp.distributed.world_size,
        backend="nccl" if on_gpus else "gloo",
        batch=exp.distributed.batch,
        ranks=ranks,
        failed_rank=failed_rank,
    )


def with_silent_ranks(result: Result, silent: Sequence[int]) -> Result:
    """A gang's ``timeout`` result naming the ranks that had not answered when the deadline ended it: in
    its message, and each as a rank of ``distributed.ranks`` with its error; ``failed_rank`` where only one
    had not (where several had, they may all wait in a collective for one of them: none is named)."""
    if not silent or result.distributed is None:
        return result
    listed = ", ".join(str(r) for r in silent)
    note = f"rank{'s' if len(silent) > 1 else ''} {listed} had not answered"
    if result.error is not None:
        result.error = ErrorInfo(type=result.error.type, message=f"{result.error.message}; {note}")
    silent_error = ErrorInfo(type="NoAnswer", message="no outcome when the deadline passed")
    known = {r.rank for r in result.distributed.ranks}
    result.distributed.ranks += [RankFigures(rank=r, error=silent_error) for r in silent if r not in known]
    result.distributed.ranks.sort(key=lambda r: r.rank)
    if result.distributed.failed_rank is None and len(silent) == 1:
        result.distributed.failed_rank = silent[0]
    return result
