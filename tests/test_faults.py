"""Faults on a multi-node cluster, with the real procedure and targets that misbehave
(``tests.fault_targets``): deaths retried, timeouts, OOM, lost and late nodes, unschedulable.

Nodes: ``a`` with 2 logical A100s, ``h`` with 1 logical H100 (one GPU: its experiments run
one after another on one worker, in spec order), and nodes a test adds or removes.
"""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator.execution.cluster import describe
from orchestrator.execution.pool import Pool
from orchestrator.execution.runner import run_experiments
from orchestrator.store.journal import Journal
from tasks.models import Experiment, Result

from .conftest import multinode_cluster


def gpu(model: str) -> dict:
    return {"resources": {f"accelerator_type:{model}": 1}}


@pytest.fixture(scope="module")
def cluster():
    nodes = [{"num_cpus": 2, "num_gpus": 2, **gpu("A100")}, {"num_cpus": 1, "num_gpus": 1, **gpu("H100")}]
    with multinode_cluster(head_cpus=0, nodes=nodes) as c:
        yield c


def fault(name: str, model: str = "A100", **kw) -> Experiment:
    return Experiment(
        target=f"tests.fault_targets:make_{name}",
        compile={"backend": "eager"},
        timing={"warmup": 0, "repeats": 2},
        gpu_model=model,
        **kw,
    )


def test_deaths_are_retried_on_a_fresh_worker_and_target_errors_are_not(cluster, tmp_path):
    experiments = [
        fault("exit"),  # retries: 1 (the default)
        fault("sigkill", retries=0),
        fault("segfault", retries=0),
        fault("flaky", params={"marker": str(tmp_path / "died-once")}),
        fault("noop", params={}),
    ]
    results = run_experiments(experiments, describe())
    exit_, sigkill, segfault, flaky, fine = results
    assert (exit_.status, exit_.attempts) == ("crashed", 2)
    assert (sigkill.status, sigkill.attempts) == ("crashed", 1)
    assert (segfault.status, segfault.attempts) == ("crashed", 1)
    assert all(r.error.type == "ray.exceptions.ActorDiedError" for r in (exit_, sigkill, segfault))
    assert (flaky.status, flaky.attempts) == ("ok", 2)
    assert flaky.worker.pid != int((tmp_path / "died-once").read_text())  # ran again in another process
    assert (fine.status, fine.attempts) == ("ok", 1)


def test_oom_timeout_and_reset_on_one_gpu(cluster):
    """On the single H100 the experiments run in spec order on one worker, until the timeout
    kills it; its replacement holds the same GPU."""
    experiments = [
        fault("oom", "H100", retries=3),
        fault("noop", "H100"),
        fault("dirty", "H100"),
        fault("report_state", "H100"),
        fault("hang", "H100", timeout_s=4),
        fault("noop", "H100", seed=1),
    ]
    oom, after_oom, dirty, state, hung, replaced = run_experiments(experiments, describe())
    assert (oom.status, oom.attempts, oom.error.type) == ("oom", 1, "torch.OutOfMemoryError")
    assert after_oom.status == "ok" and after_oom.worker.pid == oom.worker.pid  # the worker goes on
    assert dirty.status == "ok" and dirty.worker.pid == oom.worker.pid
    assert state.status == "runtime_error" and state.worker.pid == oom.worker.pid
    assert state.error.message == repr({"dtype": "torch.float32", "matmul": "highest", "unroll": 8, "leftover": None})
    assert (hung.status, hung.attempts) == ("timeout", 1)
    assert hung.error.message == "passed timeout_s=4 s; its worker was killed and replaced"
    assert hung.worker.pid == oom.worker.pid
    assert replaced.status == "ok" and replaced.worker.pid != hung.worker.pid
    assert replaced.worker.node_id == hung.worker.node_id and replaced.worker.gpu_ids == hung.worker.gpu_ids
    assert replaced.worker.gpu_model == "H100" and replaced.measurement.fresh_process


def test_a_lost_nodes_experiments_run_again_elsewhere_without_spending_a_retry(cluster, tmp_path):
    """``retries: 0``: what ran on the removed node would be ``crashed`` if its loss counted."""
    doomed = cluster.add_node(num_cpus=2, num_gpus=2, **gpu("A100"))
    cluster.wait_for_nodes()
    marks = tmp_path / "marks"
    # the first workers hold their experiments until both A100 nodes have begun one: the new node's workers, however
    # slow to start, find experiments still waiting
    params = {"folder": str(marks), "seconds": 3, "nodes": 2}
    experiments = [fault("mark_and_sleep", params=params, seed=s, retries=0) for s in range(6)]

    def remove_once_it_runs_an_experiment() -> None:
        for _ in range(6000):
            if marks.exists() and any(p.name.startswith(doomed.node_id) for p in marks.iterdir()):
                cluster.remove_node(doomed)
                return
            time.sleep(0.05)

    remover = threading.Thread(target=remove_once_it_runs_an_experiment)
    remover.start()
    with Journal(tmp_path / "j.jsonl") as journal:
        results = run_experiments(experiments, describe(), journal=journal)
    remover.join()
    assert all(r.status == "ok" for r in results), [r.error for r in results]
    assert all(r.worker.node_id != doomed.node_id for r in results)
    lost = [r for r in results if r.lost_nodes]
    assert lost, "what ran on the lost node ran again"
    tries = [(r.lost_nodes, r.attempts) for r in results]
    assert all(r.lost_nodes == 1 and r.attempts == 2 for r in lost), tries  # each try counted; the loss charged nothing
    assert all(r.attempts == 1 for r in results if not r.lost_nodes)
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert sorted(Result.model_validate_json(line).experiment_id for line in lines) == sorted(e.id for e in experiments)


def test_a_sweep_waits_for_a_node_that_joins_and_asks_the_autoscaler(cluster, monkeypatch):
    asked: list[list[dict]] = []
    monkeypatch.setattr(Pool, "request", lambda self, bundles: asked.append(list(bundles)))
    experiments = [fault("noop", "L4", seed=s) for s in range(2)]
    results: list[Result] = []
    sweep = threading.Thread(
        target=lambda: results.extend(run_experiments(experiments, describe(), pending_timeout_s=300))
    )
    sweep.start()
    for _ in range(1200):  # until the runner has asked, however loaded the machine
        if asked:
            break
        time.sleep(0.05)
    assert results == [] and asked, "the sweep waits and asks for an L4 node"
    cluster.add_node(num_cpus=1, num_gpus=1, **gpu("L4"))  # Ray adds nodes from the main thread only
    sweep.join(timeout=600)
    assert [r.status for r in results] == ["ok", "ok"]
    assert all(r.worker.gpu_model == "L4" for r in results)
    assert {"CPU": 1.0, "GPU": 1.0, "accelerator_type:L4": 0.001} in asked[0]
    assert asked[-1] == []  # the request is withdrawn at the end


def test_a_model_that_never_joins_is_unschedulable_after_the_pending_timeout(cluster):
    (r,) = run_experiments([fault("noop", "T4")], describe(), pending_timeout_s=1)
    assert r.status == "unschedulable"
    assert r.error.message.endswith("(waited 1 s for a node that fits)")
