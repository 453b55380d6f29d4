"""The queue of a sweep's runs and where each stands: waiting ones grouped by what they need (a worker
shape and a GPU model), in spec order, a retry ahead of runs not yet started.

Above the data model, below placement and the scheduler: it knows entries and workers, never nodes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from orchestrator.execution.policy.model import Entry, Need, Run, WorkerView, runs_of, shape_of
from tasks.models import Experiment


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
