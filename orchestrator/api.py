"""The library entry points the CLI calls; a Python user can call them the same way."""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from orchestrator.execution.cluster import ClusterInfo, connect, environment, submitted_job_working_dir
from orchestrator.execution.policy import DEFAULT_START_TIMEOUT_S, Run, runs_of
from orchestrator.execution.runner import OnResult, run_experiments
from orchestrator.machines.calibration import calibrated
from orchestrator.plan.cluster_fit import check_fits
from orchestrator.plan.compile_cache import CompileCacheError, check_compile_cache
from orchestrator.plan.paths import check_out
from orchestrator.plan.spec import ALL_GPU_MODELS, Spec, SpecError, load_spec
from orchestrator.report import Report, build_report, write_report
from orchestrator.report.digest import Digests
from orchestrator.report.io import Digested, Journaled
from orchestrator.store.journal import Journal, JournalContents, JournalError, journal_path, read_journal
from orchestrator.store.storage import Location, location
from orchestrator.store.traces import clear_traces
from tasks.forked import Beside, can_fork
from tasks.heap import collector_paused
from tasks.models import Calibration, Experiment, Result, WorkerLimits

__all__ = [
    "DEFAULT_PENDING_TIMEOUT_S",
    "DEFAULT_START_TIMEOUT_S",
    "CompileCacheError",
    "JournalError",
    "Run",
    "RunInterrupted",
    "RunPlan",
    "SpecError",
    "WorkerLimits",
    "run",
]

DEFAULT_PENDING_TIMEOUT_S = 900.0  # joining an address: how long a reservation may wait for a node (autoscaling)


@dataclass(frozen=True)
class RunPlan:
    """What a run is about to do, once connected: ``on_start`` receives it."""

    spec: Spec  # with ``gpu_models: all`` expanded to the cluster's models
    cluster: ClusterInfo
    kept: list[Result]  # results already in the journal (resume), in the order of the runs
    todo: list[Run]  # what runs now: every experiment's run 0 in spec order, then each run 1, ...
    notes: list[str] = field(default_factory=list)  # one line each: journal lines skipped, ids not in the spec…


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped the run. ``report`` holds what had finished; it was written
    with ``complete: false``, and the journal keeps every result for a ``resume``."""

    def __init__(self, report: Report) -> None:
        super().__init__("interrupted")
        self.report = report


def run(
    spec: Spec | str | Path,
    out: str | Path,
    address: str | None = None,
    num_gpus: int | None = None,
    num_cpus: int | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    pending_timeout_s: float | None = None,
    worker_start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    worker_limits: WorkerLimits | None = None,
    calibrate: bool = False,
    exclude_slow: bool = False,
    compile_cache: str | Path | None = None,
    working_dir: str | Path | None = None,
    on_start: Callable[[RunPlan], None] | None = None,
    on_result: OnResult | None = None,
) -> Report:
    """Run the experiments of ``spec`` on the cluster and write the report to ``out``: a local path,
    or the URL of an object in a store (``s3://bucket/run/r.json``; ``orchestrator.store.storage``),
    probed before Ray starts (``OutPathError``).

    The journal next to the report (``out.journal.jsonl``, or the objects under ``out.journal/``
    in a store; ``orchestrator.store.journal``) is the run's source of truth: each
    result is appended to it as it arrives, and the report is built from the spec and what
    the journal holds, each run once (an experiment with ``replicates: k`` has k), in spec
    order. A journal that already holds results makes the run refuse (``JournalError``) before
    anything starts, unless ``resume`` (keep them; run only the runs they do not cover: raising
    ``replicates`` runs only the new replicates) or ``overwrite`` (start over: the earlier
    run's traces beside the report, ``REPORT.traces/``, go too; ``resume`` keeps them).

    ``pending_timeout_s``: how long an experiment no current node can hold waits for one to
    join (an autoscaling cluster); default ``DEFAULT_PENDING_TIMEOUT_S`` with an ``address``,
    0 for a local instance. ``worker_start_timeout_s``: how long Ray may take to place and
    start a worker; past it the start has failed, and after three failed starts in a row a
    shape's experiments wait for a node that fits as above (recorded ``unschedulable`` at
    once on a local instance). ``worker_limits``: when workers are replaced by fresh
    processes (``WorkerLimits``; an experiment's own ``worker`` limits win; default: every
    field's default). ``calibrate``: every worker probes its device (about a second) before
    its first experiment; the probes go to ``environment.calibration``, judged against their
    model's other devices (``orchestrator.machines.calibration``), and each result carries its worker's
    entry. ``exclude_slow`` (implies ``calibrate``): a worker whose device is slow runs nothing
    and the others run its queue. ``compile_cache``: where experiments with ``compile.cache: shared``
    load and store their compile artifacts (a directory every node sees, or an object store's
    URL; ``orchestrator.plan.compile_cache``), checked writable before Ray starts (``CompileCacheError``,
    also when such an experiment has none). ``working_dir`` is shipped to the cluster for user targets;
    default: the current directory when an ``address`` is given and the spec names a target
    by import path (unless a submitted job already ships one).

    On a cluster that does not grow (``pending_timeout_s`` 0), a distributed experiment whose ranks no
    node can hold together raises ``SpecError`` once connected (``orchestrator.plan.cluster_fit``).

    Ctrl-C or SIGTERM writes the report of what finished, ``complete: false``, and raises
    ``RunInterrupted`` (a ``KeyboardInterrupt``) carrying it.
    """
    # SpecError, then CompileCacheError, OutPathError, and a journal this run may not take, before Ray starts
    with settled_run(spec, out, resume=resume, overwrite=overwrite, checks=compile_checks(compile_cache)) as settled:
        spec, out, journal = settled
        shared_cache = check_compile_cache(compile_cache, spec.experiments)
        not_cleared = clear_traces(out) if overwrite else None  # held by this run now: no other writes them
        cluster = connect(address, num_gpus, num_cpus, working_dir=default_working_dir(working_dir, spec, address))
        plan = make_plan(spec, cluster, journal.previous)
        pending = pending_timeout_s if pending_timeout_s is not None else DEFAULT_PENDING_TIMEOUT_S if address else 0.0
        if pending == 0:  # no node will join: a gang no node can hold is a bad spec for this cluster
            check_fits(plan.spec.name, (run.experiment for run in plan.todo), cluster.nodes)
        if not_cleared:
            plan.notes.append(not_cleared)
        if on_start is not None:
            on_start(plan)
        probes: list[Calibration] = []
        digests = Digests()  # each result's digest as it arrives, not 100,000 of them at the end
        try:
            with sigterm_as_interrupt():
                ran = run_experiments(
                    plan.todo,
                    cluster,
                    journal=journal,
                    on_result=digests.add if on_result is None else _both(digests.add, on_result),
                    report=out,
                    pending_timeout_s=pending,
                    start_timeout_s=worker_start_timeout_s,
                    worker_limits=worker_limits,
                    calibrate=calibrate,
                    exclude_slow=exclude_slow,
                    on_calibration=probes.append,
                    compile_cache=shared_cache,
                )
        except KeyboardInterrupt:  # the runner returns nothing: the journal is what was written
            raise RunInterrupted(write(plan.spec, read_journal(journal.path), cluster, out, probes)) from None
        # The report from the results the runner held as it journaled them, not the journal read back: reading
        # 100,000 results back took 4.3 s of validating lines written from these very objects
        # (benchmarks/cluster_scale.py); holding them costs no more at the end, about 1 GB more while the run lasts.
        return write(plan.spec, journal.previous.with_results(ran), cluster, out, probes, journal.text_of, digests.of)


def _both(first: OnResult, then: OnResult) -> OnResult:
    def each(result: Result) -> None:
        first(result)
        then(result)

    return each


def make_plan(spec: Spec, cluster: ClusterInfo, previous: JournalContents) -> RunPlan:
    """Expand ``gpu_models: all``, then split the runs into those the journal holds and the rest."""
    experiments, notes = expand_all_gpu_models(spec.experiments, cluster)
    spec = replace(spec, experiments=experiments)
    notes += previous.warnings
    runs = runs_of(experiments)
    ordered = _keys(runs)  # each experiment's id worked out once: a hash of its fields
    keys = set(ordered)
    stale = [key for key in previous.results if key not in keys]
    if stale:
        notes.append(
            f"the journal holds {len(stale)} result(s) of experiments (or replicates) not in this spec "
            "(was the spec changed?); they stay in the journal, not in the report"
        )
    kept = [previous.results[key] for key in ordered if key in previous.results]
    todo = [run for run, key in zip(runs, ordered, strict=True) if key not in previous.results]
    return RunPlan(spec=spec, cluster=cluster, kept=kept, todo=todo, notes=notes)


def _keys(runs: Sequence[Run]) -> list[tuple[str, int]]:
    return [(run.experiment.id, run.replicate) for run in runs]


def report_order(experiments: Sequence[Experiment]) -> list[tuple[str, int]]:
    """The runs as a report lists them: in spec order, each experiment's replicates together."""
    return [(e.id, replicate) for e in experiments for replicate in range(e.replicates)]


def expand_all_gpu_models(
    experiments: Sequence[Experiment], cluster: ClusterInfo
) -> tuple[list[Experiment], list[str]]:
    """Each experiment of ``gpu_model: all`` once per GPU model the cluster's nodes advertise.

    With none advertised (a local instance, or an autoscaling cluster whose GPU nodes have not
    joined yet), such an experiment runs once on any GPU, and a note says so; an experiment
    that then repeats another of the spec is kept once.
    """
    if not any(e.gpu_model == ALL_GPU_MODELS for e in experiments):
        return list(experiments), []
    models: list[str | None] = list(cluster.gpu_models) or [None]
    notes = []
    if models == [None]:
        notes.append(
            "gpu_models: all: no node advertises a GPU model (accelerator_type:<MODEL>), so those experiments run "
            "once on any GPU; on an autoscaling cluster, name the models instead"
        )
    out: list[Experiment] = []
    seen: set[str] = set()
    for exp in experiments:
        expanded = [exp.model_copy(update={"gpu_model": m}) for m in models]
        for each in expanded if exp.gpu_model == ALL_GPU_MODELS else [exp]:
            if each.id not in seen:
                seen.add(each.id)
                out.append(each)
    return out, notes


def default_working_dir(working_dir: str | Path | None, spec: Spec, address: str | None) -> Path | None:
    """The directory shipped to the cluster: the one given, else the current one when the
    workers are remote (an ``address``) and the spec names a target by import path."""
    if working_dir is not None:
        return Path(working_dir)
    if address and any(":" in e.target for e in spec.experiments) and not submitted_job_working_dir():
        return Path.cwd()
    return None


def write(
    spec: Spec,
    journal: JournalContents,
    cluster: ClusterInfo,
    out: Location,
    probes: Sequence[Calibration] = (),
    journaled: Journaled | None = None,
    digested: Digested | None = None,
) -> Report:
    """The report: a function of the spec and the journal, each run once, in spec order (an
    experiment's replicates together). ``probes``: the devices calibrated in this run (those of
    earlier, resumed results come with them); judged together, each result given its judged entry.
    ``journaled``: the text the run's journal holds of a result (``Journal.text_of``), written as it is;
    ``digested``: its digest worked out as it arrived (``Digests.of``)."""
    order = report_order(spec.experiments)
    results = [journal.results[key] for key in order if key in journal.results]
    complete = len(results) == len(order)
    calibration, results = calibrated(results, probes)
    env = environment(cluster, results).model_copy(update={"calibration": calibration})
    report = build_report(spec.name, spec.source, results, env, complete=complete)
    write_report(report, out, journaled, digested)
    return report


@contextlib.contextmanager
def settled_run(
    spec: Spec | str | Path,
    out: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    checks: Callable[[Spec], object] | None = None,
) -> Iterator[tuple[Spec, Location, Journal]]:
    """The spec loaded (``load_spec``), ``out`` checked (``check_out``) and the run's journal opened
    (``settled_journal``), each refusing before Ray starts and in that order: a bad spec is said first (then what
    ``checks`` raises of it), then a bad ``out``, then a journal the run may not take.

    Resuming from a spec file into a local journal that is there, the spec is loaded in a forked copy of this process
    (``tasks.forked.Beside``: Linux, no other thread running) while this one reads the journal: 100,000 experiments
    and a journal of 50,000 results take 4-6 s and 3-4 s, side by side instead of one after the other; the copy
    sends the spec back pickled (0.4 s to read back), before the process's objects are frozen out of the
    collector's scans, or the error that refused it (the spec is loaded once: a user's target module it imports
    runs once). ``out``'s folder is then checked and the journal opened and read (locked meanwhile) before a bad
    spec is reported; both are left as they were (a journal's last line cut short by a killed driver gets its
    newline only when the run writes). With no journal there yet (nothing to read beside the spec), a journal in
    an object store (whose lease would be taken and given back), or anywhere a fork is not safe: the spec is
    loaded first, as it always was."""
    at = location(out)
    kept = isinstance(at, Path) and journal_path(at).is_file()
    if isinstance(spec, Spec) or not resume or not kept or not can_fork():
        loaded = spec if isinstance(spec, Spec) else load_spec(spec)
        if checks is not None:
            checks(loaded)
        where = check_out(out)
        with settled_journal(journal_path(where), resume=resume, overwrite=overwrite) as journal:
            yield loaded, where, journal
        return
    with Beside(partial(load_spec, spec)) as loading:

        def loaded_spec() -> Spec:
            loaded = loading.result()
            if checks is not None:
                checks(loaded)
            return loaded

        taken: list[Spec] = []
        try:
            where = check_out(out)
            journal_at = journal_path(where)
            with settled_journal(
                journal_at, resume=resume, overwrite=overwrite, then=lambda: taken.append(loaded_spec())
            ) as journal:
                yield taken[0], where, journal
        except Exception:
            if loading.forked:  # out or the journal refused before the spec was taken: a bad spec is said first
                loaded_spec()
            raise


def compile_checks(compile_cache: str | Path | None) -> Callable[[Spec], object]:
    """``check_compile_cache`` of a spec's experiments, for ``settled_run``'s ``checks``."""
    return lambda spec: check_compile_cache(compile_cache, spec.experiments)


@contextlib.contextmanager
def settled_journal(
    path: Location, *, resume: bool = False, overwrite: bool = False, then: Callable[[], object] | None = None
) -> Iterator[Journal]:
    """The run's journal, opened (``Journal``: a resumed one's results read), and then what the process holds
    (the spec's experiments, those results) left out of Python's cyclic garbage collection until the block ends
    (``gc.freeze``). It lives as long as the run, and the collector would otherwise walk all of it again and
    again as the run allocates: with 100,000 experiments and 50,000 resumed results, seconds of the resume and
    of every minute. The collector stays paused from the reading to the freeze: its first collection after
    reading 50,000 results walked every one of them (0.3 s) just before they were frozen. ``then``: called once
    the journal is read, before the freeze, so that what it makes is frozen too (``settled_run``'s spec, loaded
    beside the reading); the journal is closed where it raises."""
    with collector_paused():
        journal = Journal(path, resume=resume, overwrite=overwrite)
        if then is not None:
            try:
                then()
            except BaseException:
                journal.close()
                raise
        gc.freeze()
    try:
        with journal:
            yield journal
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, ``ray job stop``) raises KeyboardInterrupt, as Ctrl-C does, while the run lasts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
