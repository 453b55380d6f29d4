"""Reservations for gangs, as pure functions: which node is held back for a distributed experiment's ranks,
what may not run there meanwhile, and when the reservation ends.

A gang of k ranks needs k slots of one node free at once. Workers of one process are long-lived and take
the next waiting experiment as soon as they finish one, so on a busy node k slots may never be free
together: without a reservation a gang would wait until every small experiment had run (starvation), or
forever on an endless stream (deadlock). So when a gang's need has not been placed for
``RESERVE_AFTER_S`` and no gang of that need exists, one node is reserved for it: a node that can hold
it empty, is not broken for its shape, holds no gang of another need that still has work (two gang
needs taking one node from each other would rebuild a gang for every experiment), and has the least
held by busy workers (the soonest to drain). While it is reserved, that node starts no worker of
another need and its workers of other needs take no new experiment; the idle ones are retired, the
busy ones when they finish. The reservation ends once a gang of its need exists (that gang then serves
the need's queue, one experiment after another), when the need has nothing waiting, or when the node
leaves.

Above placement (whose ``fits`` it uses), below the scheduler, which keeps the reservations and carries
the answers out. No Ray.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from orchestrator.execution.policy.model import Need, NodeShape, WorkerView
from orchestrator.execution.policy.placement import fits
from orchestrator.machines.nodes import Node

Reserved = dict[str, Need]  # node id -> the gang need it is held back for

# How long a gang need waits unplaced before a node is reserved for it. Workers of other shapes started in
# the same moment as the gang was first wanted run at least one experiment first (reserving at once would
# start them only to retire them); short against an experiment's default timeout_s (1800 s).
RESERVE_AFTER_S = 30.0


def has_gang(need: Need, workers: Iterable[WorkerView]) -> bool:
    """Whether one of our workers (starting, idle or busy) is a gang serving ``need``."""
    return any(w.shape.ranks is not None and w.serves(need) for w in workers)


def kept(
    reserved: Mapping[str, Need],
    nodes: Collection[str],
    waiting: Collection[Need],
    workers: Iterable[WorkerView],
    broken: Collection[NodeShape] = (),
) -> Reserved:
    """The reservations that still hold: their node is usable (and its gangs of that shape have not kept
    failing to start), their need has runs waiting, and no gang of that need exists yet."""
    listed = list(workers)
    return {
        node_id: need
        for node_id, need in reserved.items()
        if node_id in nodes and (node_id, need[0]) not in broken and need in waiting and not has_gang(need, listed)
    }


def wanting(unplaced: Iterable[Need], reserved: Mapping[str, Need], workers: Iterable[WorkerView]) -> list[Need]:
    """The gang needs, in the order given, that could not be placed, have no gang and no reservation yet."""
    listed, held = list(workers), set(reserved.values())
    return [need for need in unplaced if need[0].ranks is not None and need not in held and not has_gang(need, listed)]


def _held_busy(node_id: str, workers: Iterable[WorkerView]) -> tuple[float, float]:
    """GPUs and CPUs held on a node by workers that are not idle (those still to drain)."""
    busy = [w for w in workers if w.node.node_id == node_id and w.state != "idle"]
    return (float(sum(w.shape.held_gpus for w in busy)), sum(w.cpus for w in busy))


def _holds_other_gang(node_id: str, need: Need, workers: Iterable[WorkerView], waiting: Collection[Need]) -> bool:
    """Whether a gang on the node serves another need that still has runs waiting."""
    others = [n for n in waiting if n != need]
    return any(
        w.node.node_id == node_id and w.shape.ranks is not None and any(w.serves(n) for n in others) for w in workers
    )


def choose_node(
    need: Need,
    nodes: Iterable[Node],
    workers: Iterable[WorkerView],
    broken: Collection[NodeShape],
    reserved: Mapping[str, Need],
    waiting: Collection[Need],
) -> Node | None:
    """The node to reserve for ``need``: one that holds it empty, not broken for its shape, not reserved,
    holding no gang of another need with work waiting; of those, the one busy workers hold least of."""
    listed = list(workers)
    candidates = [
        n
        for n in nodes
        if fits(need, n)
        and (n.node_id, need[0]) not in broken
        and n.node_id not in reserved
        and not _holds_other_gang(n.node_id, need, listed, waiting)
    ]
    return min(candidates, key=lambda n: _held_busy(n.node_id, listed), default=None)


def held_back(worker: WorkerView, reserved: Mapping[str, Need]) -> bool:
    """Whether ``worker`` stands on a node reserved for a need it does not serve: it takes nothing new."""
    need = reserved.get(worker.node.node_id)
    return need is not None and not worker.serves(need)


def open_to(need: Need, nodes: Iterable[Node], reserved: Mapping[str, Need]) -> list[Node]:
    """The nodes a new worker for ``need`` may go to: those not reserved for another need."""
    return [n for n in nodes if reserved.get(n.node_id, need) == need]
