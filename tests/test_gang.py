"""Gangs on Ray: k rank actors in a STRICT_PACK placement group, formed by a rendezvous at rank 0's address,
reused by the next experiments of their world size, rebuilt after a fault; and a mixed sweep of 1-rank and
2-rank experiments on a cluster of two 2-GPU nodes. The stub rank (``tests.fault_targets.StubRank``) and
combine stand in for torch: the scheduling is what is tested."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from orchestrator.execution.cluster import describe
from orchestrator.execution.runner import run_experiments
from tasks.models import Experiment
from tests.fault_targets import StubRank, StubWorker, stub_combine

from .conftest import RAY_CPUS, RAY_GPUS, multinode_cluster

STUBS = {"executor": StubWorker, "rank_executor": StubRank, "combine": stub_combine}


def ranked(seed: int, world_size: int = 2, **params) -> Experiment:
    distributed = {"strategy": "ddp", "world_size": world_size}
    return Experiment(target="stub", params=params, device="cuda", phase="training", distributed=distributed, seed=seed)


def single(seed: int, **params) -> Experiment:
    return Experiment(target="stub", params=params, device="cuda", seed=seed)


def test_a_gang_forms_once_and_runs_the_experiments_of_its_world_size(ray_cluster):
    experiments = [ranked(i, ms=20) for i in range(4)]
    results = run_experiments(experiments, ray_cluster, **STUBS)
    assert [r.status for r in results] == ["ok"] * 4
    gangs = Counter(r.distributed.gang_id for r in results)
    assert len(gangs) <= RAY_GPUS // 2 and sum(gangs.values()) == 4  # as many gangs of 2 as fit, each formed once
    for r in results:
        gpus = [g for rank in r.distributed.ranks for g in rank.gpu_ids]
        assert len(gpus) == 2 and len(set(gpus)) == 2  # one GPU per rank, each its own
        assert r.reserved.gpus == 1 and r.reserved.cpus == RAY_CPUS // RAY_GPUS  # each rank's share of the cores
    pids = {r.distributed.gang_id: set() for r in results}
    for r in results:
        pids[r.distributed.gang_id].add(tuple(rank.pid for rank in r.distributed.ranks))
    assert all(len(p) == 1 for p in pids.values())  # the same rank processes, experiment after experiment
    befores = sorted(r.distributed.gang_experiments_before for r in results)
    assert befores[0] == 0 and befores[-1] >= 1


def test_each_fault_of_a_rank_is_one_result_and_the_sweep_goes_on(ray_cluster, tmp_path):
    experiments = [
        ranked(0, ms=10),
        ranked(1, fail_rank=1, wait_s=600),  # rank 1 raises; rank 0 waits for it in a collective
        ranked(2, hang_rank=0).model_copy(update={"timeout_s": 4.0}),  # rank 0 hangs: the deadline ends it
        ranked(3, die_rank=1, marker=str(tmp_path / "died-once")).model_copy(update={"retries": 1}),
        ranked(4, die_rank=0).model_copy(update={"retries": 0}),  # dies every time, no retry
        ranked(5, ms=10),
    ]
    by_seed = {r.seed: r for r in run_experiments(experiments, ray_cluster, **STUBS)}
    assert by_seed[0].status == "ok" and by_seed[5].status == "ok"
    raised = by_seed[1]
    assert raised.status == "runtime_error" and raised.distributed.failed_rank == 1
    assert raised.error.message == "rank 1 raised (test)"
    assert raised.distributed.ranks[0].error.type == "NoAnswer"  # rank 0 was still waiting after the grace
    hung = by_seed[2]
    assert hung.status == "timeout" and hung.error.message.endswith("rank 0 had not answered")
    assert hung.distributed.failed_rank == 0
    retried = by_seed[3]
    assert retried.status == "ok" and retried.attempts == 2  # died once, retried once, charged once
    crashed = by_seed[4]
    assert crashed.status == "crashed" and crashed.attempts == 1 and crashed.distributed.failed_rank == 0
    assert crashed.error.message.startswith("rank 0: ")
    gangs = {r.distributed.gang_id for r in by_seed.values() if r.distributed.gang_id}
    assert len(gangs) >= 4  # each fault rebuilt the gang


@pytest.fixture(scope="module")
def two_nodes():
    with multinode_cluster(head_cpus=0, nodes=[{"num_cpus": 2, "num_gpus": 2}] * 2) as cluster:
        yield cluster


def test_a_mixed_sweep_of_1_and_2_rank_experiments_finishes_on_two_2_gpu_nodes(two_nodes):
    experiments = [e for i in range(8) for e in (single(i, ms=30), ranked(100 + i, ms=30))]
    results = run_experiments(experiments, describe(), **STUBS)
    assert [r.status for r in results] == ["ok"] * 16
    gangs = Counter(r.distributed.gang_id for r in results if r.distributed is not None)
    assert sum(gangs.values()) == 8 and len(gangs) <= 4  # gangs reused: fewer formed than experiments
    for r in results:
        if r.distributed is not None:
            nodes = {r.worker.node_id}
            assert len(nodes) == 1 and len(r.worker.gpu_ids) == 2  # both ranks on one node
    print(f"\n{len(gangs)} gang(s) formed for {sum(gangs.values())} 2-rank experiments")


def test_a_node_lost_under_a_gang_runs_its_experiment_again_elsewhere_free_of_charge(two_nodes, tmp_path):
    """``retries: 0``: the gang's experiment would be ``crashed`` if its node's loss counted."""
    doomed = two_nodes.add_node(num_cpus=2, num_gpus=2)
    two_nodes.wait_for_nodes()
    marks = tmp_path / "marks"
    # each gang holds its experiment until a gang of every node has begun one: the new node's gang, however slow
    # to start, finds the third experiment still waiting
    experiments = [
        ranked(200 + s, ms=3000, mark=str(marks), nodes=3).model_copy(update={"retries": 0}) for s in range(3)
    ]

    def remove_once_a_gang_runs_there() -> None:
        for _ in range(2400):
            if marks.exists() and any(p.name.startswith(doomed.node_id) for p in marks.iterdir()):
                two_nodes.remove_node(doomed)
                return
            time.sleep(0.05)

    remover = threading.Thread(target=remove_once_a_gang_runs_there)
    remover.start()
    results = run_experiments(experiments, describe(), **STUBS)
    remover.join()
    assert [r.status for r in results] == ["ok"] * 3, [r.error for r in results]
    assert all(r.worker.node_id != doomed.node_id for r in results)
    (lost,) = [r for r in results if r.lost_nodes]
    assert lost.lost_nodes == 1 and lost.attempts == 2
