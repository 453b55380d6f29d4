"""Shared fixtures: one local Ray instance per test session, spec-file helpers."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local tests need no token

# Ray's bookkeeping for the shared instance: 4 CPUs and 4 logical GPUs, so that
# GPU-pinning is exercised on a machine without GPUs.
RAY_CPUS = 4
RAY_GPUS = 4


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    import ray

    from orchestrator.cluster import connect

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
