"""Shared fixtures: one local Ray instance per test session, spec-file helpers."""

from __future__ import annotations

import os
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local tests need no token
# Workers hold their cores' lock files for life: a test session's own lock and cache directory keeps it
# apart from any other compilebench process on the machine (set before Ray starts: workers inherit it).
os.environ.setdefault("COMPILEBENCH_STATE_DIR", tempfile.mkdtemp(prefix="compilebench-tests-"))

# Ray's bookkeeping for the shared instance: 4 CPUs and 4 logical GPUs, so that
# GPU-pinning is exercised on a machine without GPUs.
RAY_CPUS = 4
RAY_GPUS = 4


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    import ray

    from orchestrator.execution.cluster import connect

    info = connect(num_gpus=RAY_GPUS, num_cpus=RAY_CPUS)
    yield info
    ray.shutdown()


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a spec text (dedented) to a file and return its path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


@contextmanager
def multinode_cluster(head_cpus: int, nodes: list[dict]) -> Iterator[Any]:
    """Several Ray nodes on this machine (``ray.cluster_utils.Cluster``), this process joined to
    them, for one test module: ``nodes`` are ``Cluster.add_node`` arguments (logical GPUs, and
    ``resources={"accelerator_type:A100": 1}`` for a GPU model). One process joins one Ray at a
    time: the session's local instance, if started, is shut down first and started again after."""
    import logging

    import ray
    from ray.cluster_utils import Cluster

    from orchestrator.execution.cluster import connect

    had_local = ray.is_initialized()
    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus})
    try:
        for args in nodes:
            cluster.add_node(**args)
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if had_local:
            connect(num_gpus=RAY_GPUS, num_cpus=RAY_CPUS)


def run_on_cpu(target: str, backend: str = "aot_eager", **kw: Any) -> Any:
    """One experiment in this process on the CPU (no Ray): 1 warmup and 3 repeats unless told."""
    from tasks.models import Experiment
    from tasks.procedure import run_experiment

    exp = Experiment(
        target=target,
        device="cpu",
        compile=kw.pop("compile", {"backend": backend}),
        timing=kw.pop("timing", {"warmup": 1, "repeats": 3}),
        **kw,
    )
    return run_experiment(exp)
