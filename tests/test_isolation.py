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


def test_allocator_switch_steady_by_default_system_on_request(monkeypatch):
    from tasks import isolation

    calls = []
    monkeypatch.setattr(isolation, "_mallopt", lambda *settings: calls.append(settings) or True)
    monkeypatch.setattr(isolation, "_steadied", False)
    with isolate(cpus=1, cache="warm", slot="cpu", allocator="system") as iso:
        assert iso.allocator == isolation.SYSTEM_ALLOCATOR and calls == []  # nothing touched
    with isolate(cpus=1, cache="warm", slot="cpu") as iso:
        assert iso.allocator == isolation.STEADY_ALLOCATOR
    assert calls == [((isolation.M_MMAP_MAX, 0), (isolation.M_TRIM_THRESHOLD, isolation.TRIM_NEVER))]
    with isolate(cpus=1, cache="warm", slot="cpu", allocator="system") as iso:
        # a long-lived worker that steadied glibc before: its defaults are set back, and the result says so
        assert iso.allocator == isolation.RESET_ALLOCATOR
    assert calls[-1] == (
        (isolation.M_MMAP_MAX, isolation.DEFAULT_MMAP_MAX),
        (isolation.M_TRIM_THRESHOLD, isolation.DEFAULT_TRIM_THRESHOLD),
    )


def test_the_spec_setting_reaches_the_result():
    from tasks.isolation import SYSTEM_ALLOCATOR
    from tasks.models import Experiment
    from tasks.procedure import Placement, run_experiment

    exp = Experiment(
        target="seed.foo", params={"shape": [4]}, device="cpu", compile={"backend": "eager"}, timing={"repeats": 1}
    )
    steady = run_experiment(exp, Placement(cpus=1))
    assert "M_MMAP_MAX=0" in steady.measurement.allocator
    system = run_experiment(
        exp.model_copy(update={"timing": exp.timing.model_copy(update={"allocator": "system"})}), Placement(cpus=1)
    )
    assert system.measurement.allocator != steady.measurement.allocator
    assert (
        system.measurement.allocator.startswith("glibc: defaults restored")
        or system.measurement.allocator == SYSTEM_ALLOCATOR
    )
