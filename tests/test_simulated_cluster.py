"""The driver at scale, on a cluster simulated behind the runner's pool seam (``benchmarks/simulated_cluster.py``):
thousands of experiments in seconds, no Ray. Behaviour, never time: each run ends with one result, a
lost node's runs run again, the journal's group commit never loses a result reported as done, a
resume reads each line once, and the scheduler's work per event does not grow with the sweep."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.simulated_cluster import Scenario, SimPool
from orchestrator.api import make_plan
from orchestrator.execution.cluster import ClusterInfo
from orchestrator.execution.policy import placement, scheduler
from orchestrator.execution.runner import run_experiments
from orchestrator.plan.spec import Spec
from orchestrator.store.journal import Journal, file_log, read_journal
from tasks.models import Experiment, Result

N = 5_000


def sweep(n: int = N) -> list[Experiment]:
    return [Experiment(target="seed.foo", device="cuda", seed=i) for i in range(n)]


def scenario(n: int = N) -> Scenario:
    return Scenario(nodes=8, gpus=64, late_nodes=2, late_join_s=120.0, lose_after=n // 2, seed=1)


@pytest.fixture
def syncs(monkeypatch) -> list[int]:
    """Each fsync of a journal, as the number of lines written when it was made (no disk's cost)."""
    written: list[int] = [0]
    synced: list[int] = []
    write = file_log.FileLog.write

    def counted_write(self, result: Result) -> None:
        write(self, result)
        written[0] += 1

    monkeypatch.setattr(file_log.FileLog, "write", counted_write)
    monkeypatch.setattr(file_log.os, "fsync", lambda fd: synced.append(written[0]))
    return synced


def run(experiments, pool: SimPool, journal: Journal | None = None, on_result=None, **kw) -> list[Result]:
    cluster = ClusterInfo(address="simulated", nodes=pool.nodes())
    return run_experiments(
        experiments, cluster, journal, on_result, pending_timeout_s=900, pool=pool, clock=pool.clock, **kw
    )


def test_every_run_ends_with_one_result_and_the_lost_nodes_runs_run_again(tmp_path: Path, syncs: list[int]):
    experiments = sweep()
    pool = SimPool(scenario())
    seen: list[Result] = []
    with Journal(tmp_path / "r.journal.jsonl") as journal:
        results = run(experiments, pool, journal, seen.append)
    assert [r.experiment_id for r in results] == [e.id for e in experiments]
    assert len(seen) == N and {r.experiment_id for r in seen} == {e.id for e in experiments}
    lines = (tmp_path / "r.journal.jsonl").read_bytes().splitlines()
    assert sorted(Result.model_validate_json(line).experiment_id for line in lines) == sorted(e.id for e in experiments)
    statuses = Counter(r.status for r in results)
    assert set(statuses) <= {"ok", "compile_error", "crashed"} and statuses["compile_error"] > 0
    assert pool.lost_node is not None and pool.node_lost_deaths > 0
    lost = [r for r in results if r.lost_nodes]
    assert lost, "what ran on the lost node ran again"
    assert all(r.worker.node_id != pool.lost_node and r.attempts >= 2 for r in lost)
    assert pool.deaths > 0 and any(r.attempts == 2 and not r.lost_nodes for r in results)  # a death, retried
    late = {n.node_id for n, at in pool.joins if at > 0}
    assert any(r.worker.node_id in late for r in results if r.worker), "the late nodes took work"
    assert 0 < len(syncs) < N  # the journal is committed in groups


def test_a_result_reaches_on_result_only_once_its_journal_line_is_synced(tmp_path: Path, syncs: list[int]):
    reported: list[int] = []

    def on_result(result: Result) -> None:
        reported.append(len(reported) + 1)
        assert syncs and syncs[-1] >= len(reported), "reported as done before its line was synced"

    with Journal(tmp_path / "r.journal.jsonl") as journal:
        run(sweep(2_000), SimPool(scenario(2_000)), journal, on_result, keep_results=False)
    assert len(reported) == 2_000 and syncs[-1] == 2_000
    assert len(syncs) < 2_000 / 2  # groups of several results, not a sync per result


def test_the_schedulers_work_per_event_does_not_grow_with_the_workers_or_the_sweep(monkeypatch):
    """Counted, not timed: the workers visited by full scans (placement's room and the autoscaler's
    bundles), and the waiting queues tried, per result."""
    visits = Counter[str]()
    free_capacity, bundles, take_for = placement.free_capacity, scheduler.bundles, scheduler.Queue.take_for

    def counted_free_capacity(nodes, workers):
        workers = list(workers)
        visits["free_capacity"] += len(workers)
        return free_capacity(nodes, workers)

    def counted_bundles(workers, unplaced, unresolved):
        workers = list(workers)
        visits["bundles"] += len(workers)
        return bundles(workers, unplaced, unresolved)

    def counted_take_for(self, worker, allowed=None):
        visits["take_for"] += 1
        return take_for(self, worker, allowed)

    monkeypatch.setattr(scheduler, "free_capacity", counted_free_capacity)
    monkeypatch.setattr(scheduler, "bundles", counted_bundles)
    monkeypatch.setattr(scheduler.Queue, "take_for", counted_take_for)
    pool = SimPool(scenario())
    run(sweep(), pool, keep_results=False)
    per_result = {k: v / N for k, v in visits.items()}
    workers = pool.scenario.gpus
    # each a fraction of one scan of the workers per result: scans follow starts, deaths and the nodes, not results
    assert per_result["free_capacity"] < workers / 4, per_result
    assert per_result["bundles"] < workers / 4, per_result
    assert per_result["take_for"] < 3, per_result  # the worker that finished tries the queue, not every worker


def test_a_resume_reads_each_journal_line_once_and_runs_only_the_rest(tmp_path: Path, syncs: list[int], monkeypatch):
    experiments = sweep()
    path = tmp_path / "r.journal.jsonl"
    with Journal(path) as journal:
        run(experiments[: N // 2], SimPool(scenario(N // 2)), journal, keep_results=False)
    parsed = Counter[int]()
    validate = Result.model_validate_json

    def counted(data, *args, **kw):
        parsed[0] += 1
        return validate(data, *args, **kw)

    monkeypatch.setattr(Result, "model_validate_json", counted)
    spec = Spec(name="half", source={}, experiments=experiments)
    with Journal(path, resume=True) as journal:
        assert parsed[0] == N // 2  # each line once
        plan = make_plan(spec, ClusterInfo(address="simulated", nodes=[]), journal.previous)
        assert parsed[0] == N // 2 and len(plan.kept) == N // 2 and len(plan.todo) == N - N // 2
        held = journal.previous.with_results(run(plan.todo, SimPool(scenario(N // 2)), journal))  # as api.run
    assert parsed[0] == N // 2  # nothing read back
    contents = read_journal(path)
    assert sorted(key for key in contents.results) == sorted((e.id, 0) for e in experiments)
    assert contents.warnings == []
    assert held.results == contents.results and held.warnings == contents.warnings
