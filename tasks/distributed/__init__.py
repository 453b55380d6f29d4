"""Distributed experiments, the worker side: k long-lived ranks of one node train one target together
under DDP or FSDP2, eager and compiled, and one result comes back for the gang.

In the order of the flow: ``group`` (the process group: rendezvous, join, leave, what the ranks agree
on), ``batch`` (each rank's batch), ``wrap`` (the strategy and where compile goes), ``timing`` (one plan
for every rank), ``splits`` (DDPOptimizer's graph splits), ``step`` (one rank's recipe), ``outcome``
(what a rank returns), ``rank`` (``RankWorker``, the long-lived rank the driver calls), ``combine`` (the
gang's ``Result`` from the ranks' outcomes, without torch).

Importing this package imports no torch: ``combine`` and the outcome's model are for the driver too.
"""

from __future__ import annotations

from tasks.distributed.combine import combine
from tasks.distributed.outcome import RankCheck, RankOutcome
from tasks.distributed.rank import RankWorker

__all__ = ["RankCheck", "RankOutcome", "RankWorker", "combine"]
