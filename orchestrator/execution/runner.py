"""Running a sweep: the queue and policy (``orchestrator.execution.policy``) over a pool of long-lived Ray
workers (``orchestrator.execution.pool``), results collected as they finish.

The loop: look at the cluster's nodes (every ``NODE_POLL_S``: nodes join and leave), ask the
policy for a plan and carry it out (retire and start workers, dispatch experiments, record
results that need no worker), wait for what comes back until the next deadline, tell the
policy, record every final result once (journal first, then ``on_result``), kill the workers
whose experiment passed its deadline, the workers not started by theirs, and the workers that
asked to retire with their result. A traced result's trace is stored and rendered off the loop
(``orchestrator.store.traces.TraceStore``); the result is recorded once it is, results still in the
order they arrived. On a local instance (``pending_timeout_s=0``) an experiment no node can
hold is recorded at once; against a cluster that scales, the policy waits for a node that fits
and the autoscaler is asked for the capacity still wanted.

The journal is committed in groups: each result's line is written to the journal as it is
recorded, and the journal synced at most ``JOURNAL_SYNC_S`` after the first line not yet synced
(and when the loop ends); ``on_result`` sees a result only once its line is synced. So a driver
killed (SIGKILL, the OOM killer) loses no line it wrote, and a host that crashes loses at most
the lines of the last ``JOURNAL_SYNC_S``, none of them reported as done: those runs run again on
resume. The pool and the clock are the runner's seams: Ray's ``Pool`` and ``time.time`` by
default, a simulated pool on a simulated clock to measure the driver at a cluster's scale.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from pydantic import ValidationError

from orchestrator.execution.actors import Executor, RankExecutor
from orchestrator.execution.cluster import ClusterInfo
from orchestrator.execution.gang import Combine
from orchestrator.execution.policy import DEFAULT_START_TIMEOUT_S, Run, Scheduler, runs_of, with_silent_ranks
from orchestrator.execution.pool import Died, Finished, Pool, Ready, WorkerPool
from orchestrator.store.journal import Journal, RunKey, run_key
from orchestrator.store.storage import Location
from orchestrator.store.traces import TraceStore
from tasks.models import Calibration, ErrorInfo, Experiment, Result, WorkerLimits
from tasks.text import validation_line

OnResult = Callable[[Result], None]
NODE_POLL_S = 1.0  # how often the cluster's nodes are listed (one call to Ray's GCS)
JOURNAL_SYNC_S = 1.0  # the longest a journaled result waits for its sync (fsync; the crash-loss window)


def run_experiments(
    experiments: Sequence[Experiment | Run],
    cluster: ClusterInfo,
    journal: Journal | None = None,
    on_result: OnResult | None = None,
    *,
    report: Location | None = None,
    pending_timeout_s: float = 0.0,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    worker_limits: WorkerLimits | None = None,
    calibrate: bool = False,
    exclude_slow: bool = False,
    on_calibration: Callable[[Calibration], None] | None = None,
    compile_cache: str | None = None,
    executor: Executor | None = None,
    rank_executor: RankExecutor | None = None,
    combine: Combine | None = None,
    pool: WorkerPool | None = None,
    clock: Callable[[], float] = time.time,
    keep_results: bool = True,
) -> list[Result]:
    """Run every experiment on long-lived workers; results in the order of the runs, each recorded once.

    An ``Experiment`` stands for all its runs (``replicates``), a ``Run`` for itself
    (``orchestrator.execution.policy.runs_of``: every experiment's run 0 first, then each run 1, ...).
    ``report``: where the report will be written; a traced result's trace is stored beside it
    (tlparse's page included) on a thread beside the scheduling loop, and the result journaled
    once it is, after every result that arrived before it (``orchestrator.store.traces.TraceStore``):
    a slow tlparse holds up no dispatch. Every result is journaled before this returns, or
    raises KeyboardInterrupt.

    ``cluster`` is the cluster joined (``orchestrator.execution.cluster.connect``); its nodes are the
    first view of it, listed again as the sweep runs. ``pending_timeout_s`` is how long an
    experiment that no node can hold waits for one to join before it is recorded
    ``unschedulable`` (0: at once). ``start_timeout_s`` is how long a worker may take to be
    placed and started before it counts as a failed start (``orchestrator.execution.policy``).
    ``worker_limits`` are the run's limits for recycling workers (an experiment's own
    ``worker`` limits win). ``calibrate``: every worker probes its device before its first
    experiment (``tasks.calibration``), each probe passed to ``on_calibration`` as it arrives;
    ``exclude_slow`` (implies ``calibrate``): workers on a device slow for its model run nothing
    (``orchestrator.execution.policy``). ``compile_cache``: the run's shared compile cache (a directory or
    URL, ``orchestrator.plan.compile_cache``), given to every worker for ``compile.cache: shared``
    experiments. ``executor`` replaces what the workers run, ``rank_executor`` what a gang's ranks run and
    ``combine`` how their outcomes become one result (tests of the scheduler; see
    ``orchestrator.execution.actors``: ``Executor``, ``RankExecutor``); ``pool`` replaces the pool
    itself (default: Ray's ``Pool``), and ``clock`` the time (default ``time.time``): a simulated pool keeps
    its own clock. ``keep_results=False``: results are journaled and passed to ``on_result``, not held in
    memory until the end (a caller that reads the journal: 100,000 results are a gigabyte or more), and the
    list returned is empty. A result reaches ``on_result`` once its journal line is synced (at most
    ``JOURNAL_SYNC_S`` after it was written; see the module). On KeyboardInterrupt the workers are killed and
    the interrupt goes on; what was recorded before it stays recorded.
    """
    runs = runs_of(experiments)
    scheduler = Scheduler(
        runs, pending_timeout_s=pending_timeout_s, start_timeout_s=start_timeout_s, exclude_slow=exclude_slow
    )
    if pool is None:
        pool = Pool(
            executor,
            worker_limits,
            calibrate=calibrate or exclude_slow,
            compile_cache=compile_cache,
            rank_executor=rank_executor,
            combine=combine,
        )
    results: dict[RunKey, Result] = {}
    requested: list[dict[str, float]] = []
    traces = TraceStore(report)  # the trace's files beside the report, the result naming them
    settle = True  # record every result that arrived when the loop ends

    def record(result: Result) -> None:
        traces.add(result)  # committed once its trace is stored, in arrival order

    unsynced: list[Result] = []  # journaled, not synced yet: not yet passed to on_result
    sync_by = math.inf  # when the unsynced results must be synced

    def commit(result: Result) -> None:
        nonlocal sync_by
        if keep_results:
            results[run_key(result)] = result
        if journal is not None:
            journal.write(result)
        if not unsynced:
            sync_by = clock() + JOURNAL_SYNC_S
        unsynced.append(result)

    def sync(report: bool = True) -> None:
        nonlocal sync_by
        if journal is not None and unsynced:
            journal.sync()
        done = list(unsynced) if report and on_result is not None else []
        unsynced.clear()
        sync_by = math.inf
        for result in done:
            assert on_result is not None
            on_result(result)

    try:
        scheduler.observe_nodes(cluster.nodes)
        next_poll = clock() + NODE_POLL_S
        while not scheduler.done:
            for stored in traces.ready():
                commit(stored)
            now = clock()
            if now >= sync_by:
                sync()
            if now >= next_poll:
                scheduler.observe_nodes(pool.nodes())
                next_poll = now + NODE_POLL_S
            plan = scheduler.plan(now)
            for result in plan.results:
                record(result)
            for worker_id in plan.retire:
                pool.kill(worker_id)
            for start in plan.start:
                pool.start(start)
            for dispatch in plan.dispatch:
                pool.submit(dispatch.worker_id, dispatch.experiment.model_dump(mode="json"))
            if pending_timeout_s > 0 and plan.bundles is not requested and plan.bundles != requested:
                pool.request(plan.bundles)
                requested = plan.bundles
            if scheduler.done:
                break
            deadline = scheduler.next_deadline()
            wait_s = min(next_poll, sync_by, deadline if deadline is not None else next_poll) - clock()
            for event in pool.wait(wait_s):
                if isinstance(event, Ready):
                    scheduler.worker_ready(event.worker_id, event.hostname, event.pid, event.gpu_ids, event.calibration)
                    if event.calibration is not None and on_calibration is not None:
                        on_calibration(event.calibration)
                elif isinstance(event, Finished):
                    try:
                        result = scheduler.finished(
                            event.worker_id, Result.model_validate(event.result), retire=event.retire
                        )
                    except ValidationError as e:
                        result = scheduler.unreadable(event.worker_id, _not_a_result(e), clock(), retire=event.retire)
                    record(result)
                    if event.retire is not None:
                        pool.kill(event.worker_id)
                elif isinstance(event, Died):
                    final = scheduler.died(
                        event.worker_id,
                        event.error,
                        clock(),
                        oom=event.oom,
                        alive=event.alive,
                        node_lost=event.node_lost,
                        rank=event.rank,
                    )
                    if final is not None:
                        record(final)
                    if not event.alive:
                        next_poll = 0.0  # a node may have gone: look now
            for worker_id, expired in scheduler.expired(clock()):
                silent = pool.silent_ranks(worker_id)  # a gang's ranks that had not answered
                pool.kill(worker_id)
                if expired is not None:
                    record(with_silent_ranks(expired, silent))
    except BaseException as e:
        settle = isinstance(e, KeyboardInterrupt)  # an interrupt still records what arrived before it
        raise
    finally:
        pool.shutdown()
        if requested:
            pool.request([])
        with traces:
            for stored in traces.finish() if settle else ():
                commit(stored)
        sync(report=settle)  # every line written is synced; reported unless the run failed
    if not keep_results:
        return []
    return [results[(entry.exp_id, entry.replicate)] for entry in scheduler.queue.entries]  # the runs, in order


def _not_a_result(e: ValidationError) -> ErrorInfo:
    """Why a worker's answer is not a result, in one line: the first field that does not validate."""
    return ErrorInfo(
        type="InvalidResult",
        message=f"the worker's result does not validate ({validation_line(e, whole='result')}); "
        "does the workers' compilebench differ from the driver's?",
    )
