"""Core claims, affinity, thread counts and compile-cache directories of one experiment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tasks.isolation import claim_cores, isolate


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_task_is_pinned_to_the_cores_it_claimed_and_restored_after(state_dir):
    allowed = os.sched_getaffinity(0)
    threads = torch.get_num_threads()
    with isolate(cpus=1, cache="warm", slot="gpu0") as iso:
        assert len(iso.cores) == 1 and iso.exclusive
        assert os.sched_getaffinity(0) == set(iso.cores)
        assert torch.get_num_threads() == 1
        import torch._inductor.config as inductor_config

        assert inductor_config.compile_threads == iso.compile_threads == 1
        assert os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(state_dir / "cache" / "gpu0") == iso.cache_dir
        assert iso.allocator is not None and "M_MMAP_MAX=0" in iso.allocator
    assert os.sched_getaffinity(0) == allowed
    assert torch.get_num_threads() == threads
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(state_dir / "cache" / "gpu0")


def test_claimed_cores_are_not_claimed_twice_until_released(state_dir):
    allowed = sorted(os.sched_getaffinity(0))
    first, locks = claim_cores(1, allowed, state_dir)
    second, more = claim_cores(len(allowed), allowed, state_dir)
    assert not set(first) & set(second)
    assert len(first) + len(second) == len(allowed)
    for handle in locks + more:
        handle.close()
    again, locks = claim_cores(len(allowed), allowed, state_dir)
    assert again == allowed
    for handle in locks:
        handle.close()


def test_without_a_free_core_the_task_shares_and_says_so(state_dir):
    allowed = sorted(os.sched_getaffinity(0))
    _, held = claim_cores(len(allowed), allowed, state_dir)
    with isolate(cpus=1, cache="warm", slot="gpu1") as iso:
        assert iso.exclusive is False
        assert iso.cores == allowed
    for handle in held:
        handle.close()


def test_cpu_tasks_on_different_cores_never_share_a_warm_cache(state_dir):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two cores")
    with isolate(cpus=1, cache="warm", slot="cpu") as first:
        pass
    _, held = claim_cores(1, allowed, state_dir)  # another task holds the first core
    with isolate(cpus=1, cache="warm", slot="cpu") as second:
        assert second.exclusive and second.cores != first.cores
    for handle in held:
        handle.close()
    assert first.cache_dir != second.cache_dir


def test_cold_cache_is_a_fresh_empty_directory_removed_afterwards(state_dir):
    with isolate(cpus=1, cache="cold", slot="cpu") as cold:
        path = Path(cold.cache_dir)
        assert path.is_dir() and not any(path.iterdir())
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(path)
        assert os.environ["TRITON_CACHE_DIR"] == str(path / "triton")
    assert not path.exists()
    with isolate(cpus=1, cache="cold", slot="cpu") as again:
        assert again.cache_dir != cold.cache_dir


def test_in_process_use_pins_nothing_and_keeps_inductors_default_cache():
    before = (os.sched_getaffinity(0), os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    with isolate(cpus=None, cache="warm", slot="cpu") as iso:
        assert (iso.cache_dir, iso.compile_threads, iso.exclusive, iso.allocator) == (None, None, False, None)
        assert (os.sched_getaffinity(0), os.environ.get("TORCHINDUCTOR_CACHE_DIR")) == before
