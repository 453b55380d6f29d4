"""Running sweeps on a real local Ray (3 CPUs, 2 logical GPUs) with the real procedure:
one long-lived worker per GPU, cores, caches and fresh processes, failures as results."""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from pathlib import Path

import pytest

from orchestrator.execution.runner import run_experiments
from orchestrator.store.journal import Journal
from tasks.models import Experiment, Result

from .conftest import RAY_CPUS, RAY_GPUS, SESSION_RAY

EAGER = {"backend": "eager"}  # what these tests schedule, not what inductor makes of it


def sleepy(seed: int, **kw) -> Experiment:
    return Experiment(
        target="tests.user_targets:make_sleepy",
        params={"ms": 4},
        compile={"backend": "eager"},
        timing={"warmup": 0, "repeats": 2},
        seed=seed,
        **kw,
    )


def overlaps(results: list[Result]) -> list[tuple[str, str]]:
    spans = sorted((r.started_at, r.finished_at, r.experiment_id) for r in results)
    return [(a[2], b[2]) for a, b in itertools.pairwise(spans) if b[0] < a[1]]


@pytest.fixture(scope="module")
def gpu_sweep(tmp_path_factory: pytest.TempPathFactory) -> list[Result]:
    """One sweep of GPU experiments, for the tests that read what its workers did. The first experiments wait in
    their factory until one runs on each GPU at once (``RAY_GPUS``): every GPU gets a worker, and experiments on
    two GPUs run side by side."""
    barrier = {"folder": str(tmp_path_factory.mktemp("barrier")), "parties": RAY_GPUS}
    experiments = [
        *(
            Experiment(target="tests.fault_targets:make_barrier", params=barrier, compile=EAGER, seed=s)
            for s in range(4)
        ),
        *(sleepy(seed) for seed in range(4)),
    ]
    return run_experiments(experiments, SESSION_RAY.local())


@pytest.fixture(scope="module")
def cpu_sweep() -> list[Result]:
    """One sweep of CPU experiments, for the tests that read what its worker did."""
    return run_experiments([sleepy(seed, device="cpu") for seed in range(3)], SESSION_RAY.local())


def test_one_long_lived_worker_per_gpu_runs_experiments_one_after_another(gpu_sweep):
    """Every GPU has a worker, and none runs two experiments at a time."""
    results = gpu_sweep
    assert [r.status for r in results] == ["ok"] * 8, [r.error for r in results]
    by_gpu: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        assert len(r.worker.gpu_ids) == 1
        by_gpu[r.worker.gpu_ids[0]].append(r)
    assert sorted(by_gpu) == [str(gpu) for gpu in range(RAY_GPUS)]
    for gpu, rs in by_gpu.items():
        assert overlaps(rs) == [], f"two experiments overlapped on GPU {gpu}"
        assert len({r.worker.pid for r in rs}) == 1  # one worker process per GPU, for the whole sweep
        first, *later = sorted(rs, key=lambda r: r.started_at)
        assert first.measurement.fresh_process and not any(r.measurement.fresh_process for r in later)
    assert all(r.device == "cpu" for r in results)  # logical GPUs: pinned, but run on the CPU
    assert all(r.reserved.gpus == 1 and r.reserved.cpus == RAY_CPUS // RAY_GPUS for r in results)
    assert all(r.attempts == 1 for r in results)


def test_cpu_experiments_reserve_the_whole_node_and_run_one_at_a_time(cpu_sweep):
    results = cpu_sweep
    assert [r.status for r in results] == ["ok"] * 3
    assert overlaps(results) == []
    assert all(r.worker.gpu_ids == [] for r in results)
    assert all(1 <= r.worker.threads <= RAY_CPUS for r in results)


def test_failures_are_results_and_the_sweep_goes_on(ray_cluster, tmp_path):
    experiments = [
        Experiment(target="tests.user_targets:make_crash", device="cpu"),
        Experiment(target="seed.foo", device="cuda", resources={"gpus": 9}),
        Experiment(target="tests.user_targets:make_broken", device="cpu"),
        sleepy(0, device="cpu"),
    ]
    seen = []
    with Journal(tmp_path / "j.jsonl") as journal:
        results = run_experiments(experiments, ray_cluster, journal=journal, on_result=seen.append)
    crash, unschedulable, broken, fine = results
    assert crash.status == "crashed" and crash.attempts == 2 and crash.error.type == "ray.exceptions.ActorDiedError"
    assert unschedulable.status == "unschedulable" and unschedulable.error.type == "Unschedulable"
    assert unschedulable.error.message == f"needs 9 GPU(s) on one node; the largest node has {RAY_GPUS}"
    assert broken.status == "runtime_error" and broken.error.message == "this factory cannot build its target"
    assert broken.attempts == 1  # an exception of the target is a result, not retried
    assert fine.status == "ok"
    assert [r.experiment_id for r in results] == [e.id for e in experiments]  # spec order
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert sorted(Result.model_validate_json(line).experiment_id for line in lines) == sorted(e.id for e in experiments)
    assert len(seen) == 4


def foo3(cache: str, seed: int = 0) -> Experiment:
    return Experiment(
        target="seed.foo3",
        params={"shape": [256, 256]},
        device="cpu",
        compile={"backend": "inductor", "cache": cache},
        timing={"warmup": 1, "repeats": 3},
        seed=seed,
    )


def test_cold_compile_is_several_times_the_warm_one(ray_cluster):
    warm_up, cold, warm = run_experiments([foo3("warm", 1), foo3("cold"), foo3("warm", 2)], ray_cluster)
    assert [r.status for r in (warm_up, cold, warm)] == ["ok"] * 3, [r.error for r in (warm_up, cold, warm)]
    assert cold.experiment_id != foo3("warm").id  # the cache state is part of the experiment
    assert cold.measurement.cache == "cold" and cold.measurement.fresh_process
    assert cold.worker.pid not in {warm_up.worker.pid, warm.worker.pid}  # its own process, the worker lives on
    assert warm.worker.pid == warm_up.worker.pid and not warm.measurement.fresh_process
    assert not Path(cold.measurement.cache_dir).exists()  # a cold directory lives as long as its experiment
    assert warm.measurement.cache_dir == warm_up.measurement.cache_dir
    assert cold.compile_latency_s > 2 * warm.compile_latency_s, (cold.compile_latency_s, warm.compile_latency_s)


def test_cpu_experiments_own_the_nodes_cores(cpu_sweep):
    physical = sorted(os.sched_getaffinity(0))
    for r in cpu_sweep:
        assert r.measurement.cores == physical[:RAY_CPUS]
        assert r.measurement.exclusive_cores
        assert r.worker.threads == r.measurement.compile_threads == len(r.measurement.cores)


def test_concurrent_gpu_experiments_never_share_a_claimed_core(gpu_sweep):
    results = gpu_sweep
    assert all(r.status == "ok" for r in results)
    assert all(r.measurement.niceness == 0 for r in results)  # not Ray's 15 (cluster.LOCAL_SYSTEM_CONFIG)
    exclusive = [r for r in results if r.measurement.exclusive_cores]
    assert exclusive, "at least one task found a free core"
    assert all(len(r.measurement.cores) == 1 and r.worker.threads == 1 for r in exclusive)
    for a, b in itertools.combinations(exclusive, 2):
        overlapping = a.started_at < b.finished_at and b.started_at < a.finished_at
        if overlapping:
            assert set(a.measurement.cores).isdisjoint(b.measurement.cores)


def test_a_sweep_returns_once_its_workers_have_exited_so_the_next_finds_their_cores_free(ray_cluster, tmp_path):
    """A worker holds its cores' locks until its process is gone, and ``ray.kill`` returns before it is: a sweep
    returns once its workers on this host have exited (``Pool.shutdown``), and the next sweep's workers claim
    those cores. The first sweep's experiments meet in their factory, so each GPU's worker runs one."""
    from orchestrator.execution.pool import wait_exited

    barrier = {"folder": str(tmp_path / "barrier"), "parties": RAY_GPUS}
    first = run_experiments(
        [
            Experiment(target="tests.fault_targets:make_barrier", params=barrier, compile=EAGER, seed=300 + seed)
            for seed in range(RAY_GPUS)
        ],
        ray_cluster,
    )
    assert all(r.status == "ok" for r in first), [r.error for r in first]
    pids = {r.worker.pid for r in first}
    assert len(pids) == RAY_GPUS and wait_exited(sorted(pids), 0) == []  # none still running as the sweep returns
    second = run_experiments([sleepy(310 + seed) for seed in range(RAY_GPUS)], ray_cluster)
    assert any(r.measurement.exclusive_cores for r in second)


def test_a_worker_started_where_one_was_killed_waits_until_that_process_has_exited(ray_cluster, monkeypatch):
    """A killed worker holds its cores' locks until its process is gone (``ray.kill`` returns first): the next
    worker started on its node waits for that, on the driver's host. One that retired with a result has handed
    its cores back (``tasks.worker``): nothing to wait for then, but the pool's shutdown still waits for it."""
    from orchestrator.execution import pool as pool_module
    from orchestrator.execution.events import Finished, Ready
    from orchestrator.execution.policy import Start
    from tests.fault_targets import RetiringStub

    waited: list[tuple[list[int], list[int]]] = []  # (pids waited for, those still running when it returned)

    wait_exited = pool_module.wait_exited

    def recorded(pids, timeout_s):
        running = wait_exited(pids, timeout_s)
        waited.append((list(pids), running))
        return running

    monkeypatch.setattr(pool_module, "wait_exited", recorded)
    node = ray_cluster.nodes[0].node_id
    pool = pool_module.Pool(executor=RetiringStub)

    def started(worker_id: int) -> int:
        pool.start(Start(worker_id=worker_id, node_id=node, gpus=1, cpus=1, cores=1, gpu_model=None))
        for _ in range(600):
            ready = [e for e in pool.wait(0.1) if isinstance(e, Ready) and e.worker_id == worker_id]
            if ready:
                return ready[0].pid
        raise AssertionError(f"worker {worker_id} never became ready")

    try:
        first = started(1)
        pool.kill(1)
        second = started(2)
        assert waited[-1] == ([first], [])  # the second started once the first had gone
        pool.submit(2, sleepy(400).model_dump(mode="json"))
        finished = []
        for _ in range(600):
            finished += [e for e in pool.wait(0.1) if isinstance(e, Finished)]
            if finished:
                break
        assert finished and finished[0].retire == "asked"
        pool.kill(2)
        started(3)
        assert waited[-1] == ([], [])  # the retired one handed its cores back: not waited for
    finally:
        pool.shutdown()
    assert second in waited[-1][0] and waited[-1][1] == []  # the shutdown waited for every process it killed


def test_a_worker_is_replaced_after_max_experiments_and_says_how_many_ran_before(ray_cluster):
    experiments = [sleepy(200 + seed, device="cpu", worker={"max_experiments": 2}) for seed in range(3)]
    results = run_experiments(experiments, ray_cluster)
    assert [r.status for r in results] == ["ok"] * 3 and all(r.attempts == 1 for r in results)
    assert [r.worker.experiments_before for r in results] == [0, 1, 0]
    pids = [r.worker.pid for r in results]
    assert pids[0] == pids[1] != pids[2]
    assert [r.measurement.fresh_process for r in results] == [True, False, True]
    # each replacement claimed the cores its predecessor handed back with its last result, though that
    # process may not have exited yet (tasks.isolation.release_claim)
    assert all(r.measurement.exclusive_cores for r in results), [r.measurement.exclusive_cores for r in results]


def test_the_runs_limit_applies_where_an_experiment_sets_none(ray_cluster):
    from tasks.models import WorkerLimits

    results = run_experiments(
        [sleepy(210 + seed, device="cpu") for seed in range(2)],
        ray_cluster,
        worker_limits=WorkerLimits(max_experiments=1),
    )
    assert [r.worker.experiments_before for r in results] == [0, 0]
    assert len({r.worker.pid for r in results}) == 2
    assert all(r.measurement.exclusive_cores for r in results)


@pytest.fixture(scope="module")
def replaced() -> list[Result]:
    """One sweep, one CPU worker at a time: a reset that raises, then a worker whose memory grows past its limit
    in its second experiment, each followed by an experiment that shows where the next one ran."""
    poisoned = Experiment(target="tests.fault_targets:make_poison_reset", device="cpu", compile={"backend": "eager"})
    hoard = Experiment(
        target="tests.fault_targets:make_hoard",
        params={"mb": 600},
        device="cpu",
        compile={"backend": "eager"},
        worker={"max_rss_growth_mb": 400},
    )
    return run_experiments([poisoned, sleepy(220, device="cpu"), hoard, sleepy(230, device="cpu")], SESSION_RAY.local())


def test_a_reset_that_raises_keeps_the_result_and_replaces_the_worker(replaced):
    first, after, _, _ = replaced
    assert (first.status, first.attempts) == ("ok", 1), first.error
    assert (after.status, after.attempts) == ("ok", 1)
    assert after.worker.pid != first.worker.pid and after.worker.experiments_before == 0


def test_a_worker_whose_memory_grew_past_its_limit_is_replaced(replaced):
    _, before, hoard, after = replaced
    assert (hoard.status, hoard.attempts) == ("ok", 1)
    assert hoard.worker.pid == before.worker.pid and hoard.worker.experiments_before == 1
    assert after.status == "ok" and after.worker.pid != hoard.worker.pid and after.worker.experiments_before == 0


def test_a_worker_ray_cannot_place_ends_as_unschedulable_instead_of_hanging(ray_cluster):
    """Every logical GPU is held by another actor: Ray cannot place a GPU worker, however long it waits."""
    import ray

    from tests.fault_targets import StubWorker

    @ray.remote(num_gpus=RAY_GPUS, num_cpus=0)
    class Holder:
        def ready(self) -> bool:
            return True

    holder = Holder.remote()  # type: ignore[attr-defined]
    ray.get(holder.ready.remote())
    try:
        exp = Experiment(target="stub", device="cuda")
        (result,) = run_experiments([exp], ray_cluster, start_timeout_s=1, executor=StubWorker)
    finally:
        ray.kill(holder)
    assert (result.status, result.attempts) == ("unschedulable", 0)
    cpus = RAY_CPUS // RAY_GPUS
    assert result.error.message.startswith(f"workers holding 1 GPU and {cpus} CPU could not start")
    assert "WorkerStartTimeout: Ray did not place and start a worker holding 1 GPU" in result.error.message
    assert "within 1 s (3 failed starts in a row)" in result.error.message
