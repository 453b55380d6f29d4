"""The scheduling policy: which worker each experiment runs on, and what a fault does to it.

Plain code over plain data, no Ray: the runner tells a ``Scheduler`` what happened (the nodes
it sees, a worker ready, a result, a death, the clock) and carries out the ``Plan`` it returns
(start or retire workers, dispatch experiments, record results, ask the autoscaler for
capacity). Tests drive it with made-up nodes and events.

- **Workers** are long-lived, one per GPU by default, each holding a ``Shape`` (GPUs and cores)
  on one node for life. A worker runs experiments of its shape one after another; one asking
  for a ``gpu_model`` runs only on a worker whose node has that model.
- **Gangs.** A distributed experiment (``distributed.world_size: k``) runs on a gang: one worker of k
  rank processes on one node, each holding one GPU (or a core set), started together and reused by
  the next experiments of its shape, as any worker is. The death of one rank is the gang's; its
  result names the rank. A gang that cannot be placed because workers of other shapes hold its
  node's slots gets a node reserved (``reservation``): nothing new starts or runs there until its
  k slots have drained and the gang has formed.
- **Placement** fills the nodes: while experiments of a shape wait, start workers of that shape
  wherever one fits in what our workers leave free. An idle worker that no waiting experiment
  can use is retired when another shape needs its room (GPU workers make way for CPU ones).
- **Replicates.** An experiment with ``replicates: k`` is k runs (``Run``: the experiment and its
  replicate), queued replicate by replicate (every experiment's run 0 first). Each run of an
  experiment goes to another worker process: first to an idle worker whose device (its GPUs, or
  for a CPU worker the worker itself) no run of that experiment has used, so that replicates land
  on different GPUs of the same model where one is free; else to a worker that has not run it in
  its own process. A worker left idle with only runs of experiments it has run is retired, and a
  fresh worker (a new process on the same GPU) takes its place and its queue.
- **Calibration.** A worker started with ``calibrate`` reports its device's probe when ready. With
  ``exclude_slow``, a worker whose device is slow for its model (``orchestrator.machines.calibration``: more
  than 5% below the median of the model's other devices on a figure, judged again as each worker
  reports in) runs nothing more: it stays idle and keeps its GPU, so that no new worker lands on
  that device, and the others run its queue. No worker runs anything while workers of its device
  model are still starting: each device is judged against the probes of all its peers first.
- **Recycling.** A worker that returns its result with a reason to retire (it ran
  ``max_experiments``, its memory grew past its limit, or its reset raised: see
  ``tasks.worker.Worker``) is replaced; the result stands as the worker made it.
- **Faults.** A worker that dies mid-experiment (segfault, ``os._exit``, SIGKILL, the kernel's
  OOM killer) sends the experiment back to the front of the queue, up to ``retries`` times,
  then records it ``crashed``; each try counts in ``attempts``. An experiment past
  ``timeout_s`` (counted from its dispatch to an idle, ready worker) is recorded ``timeout``
  and its worker replaced; never retried. Ray's memory monitor killing the worker (host memory
  exhausted) is recorded ``oom``, not retried: the next try would exhaust it again.
  Exceptions raised by the target are results of the worker, not faults.
- **Lost nodes** are not the experiment's fault: an experiment whose worker died with its node
  goes back to the front of the queue without spending a retry (``attempts`` counts the try,
  ``lost_nodes`` says it was lost; past ``MAX_NODE_LOSSES`` a loss is charged as a death), and
  the node takes no new worker, and its idle workers (whose deaths are on their way) no run, until
  Ray has stopped listing it as alive: until then Ray may still show a dying node alive, and a retry
  placed there would die with it.
- **Starting.** A worker not ready ``start_timeout_s`` after it was asked for (Ray could not
  place it: the resources it holds for life are held by someone else, or never free) is
  killed and counts as a failed start; ``MAX_START_FAILURES`` failed starts in a row of one
  shape on a node, and that node takes no more workers of that shape.
- **Unschedulable**: an experiment that no node could hold even empty (too many GPUs or cores,
  a GPU model no node has, or only nodes where workers of its shape repeatedly failed to
  start) waits up to ``pending_timeout_s`` for a node that fits to join (0: recorded at once),
  then is recorded ``unschedulable``.

The package runs one way, from the bottom up: each module imports only those listed before it.

- ``model``: the plain data (shapes, runs, queue entries, workers as seen, the ``Plan``);
- ``queue``: the runs waiting, by what they need;
- ``placement``: which node a worker goes to, and why a need fits none (pure functions);
- ``reservation``: which node is held back for a gang, and what may not run there meanwhile (pure functions);
- ``faults``: what a death, a deadline, a failed start or a lost node does to a run (pure functions);
- ``scheduler``: the ``Scheduler``, holding a sweep's state, taking the runner's events and dispatching.
"""

from orchestrator.execution.policy.faults import (
    DEFAULT_START_TIMEOUT_S,
    MAX_NODE_LOSSES,
    MAX_START_FAILURES,
    failed_result,
    with_silent_ranks,
)
from orchestrator.execution.policy.model import (
    MODEL_RESOURCE_SHARE,
    DeviceKey,
    Dispatch,
    Entry,
    Need,
    Plan,
    Run,
    Shape,
    Start,
    WorkerView,
    node_model,
    runs_of,
    shape_of,
)
from orchestrator.execution.policy.queue import Queue
from orchestrator.execution.policy.scheduler import Scheduler

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "MAX_NODE_LOSSES",
    "MAX_START_FAILURES",
    "MODEL_RESOURCE_SHARE",
    "DeviceKey",
    "Dispatch",
    "Entry",
    "Need",
    "Plan",
    "Queue",
    "Run",
    "Scheduler",
    "Shape",
    "Start",
    "WorkerView",
    "failed_result",
    "node_model",
    "runs_of",
    "shape_of",
    "with_silent_ranks",
]
