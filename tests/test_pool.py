"""The pool on a multi-node cluster: 4 nodes of 4 logical GPUs (two GPU models), the stub executor.

``tests.fault_targets.StubWorker`` replaces the benchmark procedure in these workers (the
executor seam of ``run_experiments``), so that scheduling is tested wide without torch: 16 worker
processes on a 2-core machine (32 GPUs of real Ray: ``benchmarks/ray_width.py``); the real procedure
runs in test_runner and test_faults.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict

import pytest

from orchestrator.execution.cluster import describe
from orchestrator.execution.runner import run_experiments
from orchestrator.store.journal import Journal
from tasks.models import Experiment, Result
from tests.fault_targets import StubWorker

from .conftest import multinode_cluster

NODE = {"num_cpus": 4, "num_gpus": 4}
MODELS = ["A100", "A100", "H100", "H100"]


@pytest.fixture(scope="module")
def cluster():
    nodes = [{**NODE, "resources": {f"accelerator_type:{m}": 1}} for m in MODELS]
    with multinode_cluster(head_cpus=0, nodes=nodes):
        info = describe()
        yield info


def stub(seed: int, ms: float = 0, device: str = "cuda", **kw) -> Experiment:
    return Experiment(target="stub", params={"ms": ms}, device=device, seed=seed, **kw)


def model_of(cluster, node_id: str) -> str | None:
    return next(n.gpu_models[0] if n.gpu_models else None for n in cluster.nodes if n.node_id == node_id)


def test_a_thousand_experiments_on_16_gpus_are_each_reported_once(cluster, tmp_path):
    experiments = [stub(seed, ms=20) for seed in range(1000)]
    seen: list[str] = []
    with Journal(tmp_path / "j.jsonl") as journal:
        started = time.time()
        results = run_experiments(
            experiments, cluster, journal=journal, on_result=lambda r: seen.append(r.experiment_id), executor=StubWorker
        )
        wall = time.time() - started
    assert [r.experiment_id for r in results] == [e.id for e in experiments]
    assert sorted(seen) == sorted(e.id for e in experiments)  # once each
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert sorted(Result.model_validate_json(line).experiment_id for line in lines) == sorted(seen)
    assert all(r.status == "ok" and r.attempts == 1 for r in results)
    by_slot: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        (gpu,) = r.worker.gpu_ids
        by_slot[(r.worker.node_id, gpu)].append(r)
        assert r.worker.gpu_model == model_of(cluster, r.worker.node_id)
        assert r.reserved.gpus == 1 and r.reserved.cpus == 1  # 4 cores / 4 GPUs
    pids_per_slot = {slot: {r.worker.pid for r in rs} for slot, rs in by_slot.items()}
    assert all(len(pids) == 1 for pids in pids_per_slot.values())  # one long-lived worker per GPU
    assert len(by_slot) <= 16
    for rs in by_slot.values():
        spans = sorted((r.started_at, r.finished_at) for r in rs)
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))  # one at a time per GPU
        assert [r.measurement.fresh_process for r in sorted(rs, key=lambda r: r.started_at)].count(True) == 1
    print(f"\n1000 experiments, {len(by_slot)} GPUs used, {wall:.1f} s")


def test_models_gpu_counts_and_cpu_workers(cluster):
    experiments = [
        *(stub(i, gpu_model="H100") for i in range(6)),
        *(stub(10 + i, gpu_model="A100") for i in range(6)),
        stub(20, resources={"gpus": 2}),
        stub(21, device="cpu"),
        stub(22, device="cpu", resources={"cpus": 3}),
    ]
    results = run_experiments(experiments, cluster, executor=StubWorker)
    assert all(r.status == "ok" for r in results)
    for r in results[:12]:
        assert r.worker.gpu_model == r.gpu_model == model_of(cluster, r.worker.node_id)
    pair, whole_node, three_cores = results[12:]
    assert len(pair.worker.gpu_ids) == 2 and pair.reserved.gpus == 2 and pair.reserved.cpus == 2
    assert whole_node.worker.gpu_ids == [] and whole_node.reserved.cpus == 4 and whole_node.worker.gpu_model is None
    assert three_cores.reserved.cpus == 3 and three_cores.requested.cpus == 3


def test_an_unknown_model_is_unschedulable_at_once_on_a_fixed_cluster(cluster):
    (r,) = run_experiments([stub(0, gpu_model="B200")], cluster, executor=StubWorker)
    assert r.status == "unschedulable" and r.attempts == 0
    assert r.error.message == "needs a 'B200' GPU; the cluster's GPU models are A100, H100"


def test_ctrl_c_kills_the_workers_and_goes_on(cluster):
    import ray

    def interrupt(result: Result) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiments([stub(i, ms=200) for i in range(8)], cluster, on_result=interrupt, executor=StubWorker)
    t = time.time()
    total = ray.cluster_resources()["GPU"]
    for _ in range(300):  # Ray frees a killed actor's resources asynchronously
        if ray.available_resources().get("GPU", 0) == total:
            break
        time.sleep(0.1)
    assert ray.available_resources().get("GPU", 0) == total
    print(f"GPUs free {time.time() - t:.1f} s after the interrupt")


def test_exclude_slow_keeps_slow_gpus_out_of_the_sweep_and_the_report_says_so(cluster, tmp_path):
    from orchestrator.api import write
    from orchestrator.plan.spec import Spec
    from orchestrator.store.journal import Journal, read_journal
    from tests.fault_targets import SLOW_GPU, CalibratedStub

    experiments = [stub(i, ms=50) for i in range(12)]
    probes = []
    with Journal(tmp_path / "r.journal.jsonl") as journal:
        results = run_experiments(
            experiments,
            cluster,
            journal=journal,
            exclude_slow=True,
            on_calibration=probes.append,
            executor=CalibratedStub,
        )
    assert {r.status for r in results} == {"ok"}
    assert all(r.worker.gpu_ids != [SLOW_GPU] for r in results)  # their queue ran elsewhere
    assert SLOW_GPU in {p.gpu_id for p in probes} and len(probes) >= 4

    spec = Spec("fleet", {}, experiments)
    report = write(spec, read_journal(tmp_path / "r.journal.jsonl"), cluster, tmp_path / "r.json", probes)
    slow = [c for c in report.environment.calibration if c.slow]
    assert {c.gpu_id for c in slow} == {SLOW_GPU} and len(slow) == sum(p.gpu_id == SLOW_GPU for p in probes)
    assert "10.0% below the FAKE-GPU median" in slow[0].slow_reasons[0]
    assert all(r.worker.calibration is not None and not r.worker.calibration.slow for r in report.results)


def test_calibrate_alone_runs_everywhere_and_flags_the_results_of_slow_gpus(cluster):
    from orchestrator.machines.calibration import calibrated
    from tests.fault_targets import SLOW_GPU, CalibratedStub

    probes = []
    experiments = [stub(i, ms=300) for i in range(16)]
    results = run_experiments(
        experiments, cluster, calibrate=True, on_calibration=probes.append, executor=CalibratedStub
    )
    entries, flagged = calibrated(results, probes)
    assert {e.gpu_id for e in entries if e.slow} == {SLOW_GPU}
    assert all(r.worker.calibration.slow == (r.worker.gpu_ids == [SLOW_GPU]) for r in flagged)
    assert len({r.worker.calibration.id for r in flagged}) > 1  # not everything on one device


def test_an_answer_that_is_not_a_result_is_recorded_and_the_sweep_goes_on(cluster):
    from tests.fault_targets import SkewedStub

    experiments = [Experiment(target="stub", params={"skewed": i == 1}, device="cuda", seed=i) for i in range(3)]
    results = run_experiments(experiments, cluster, executor=SkewedStub)
    assert [r.status for r in results] == ["ok", "runtime_error", "ok"]
    assert results[1].error.type == "InvalidResult"
    message = results[1].error.message
    assert message.startswith("the worker's result does not validate (from_a_newer_version: Extra inputs")
