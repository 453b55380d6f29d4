"""Core claims, thread affinity, thread counts and compile-cache directories.

A claim pins every thread of the process that makes it, for good: tests that claim fewer cores
than the test process is allowed run in a subprocess of their own (``in_a_worker_process``).
In this process, claims take every allowed core, which changes no thread's mask.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from tasks import isolation
from tasks.isolation import (
    CLAIM_ENV,
    claim_cores,
    claim_worker_cores,
    isolate,
    parse_cpu_list,
    thread_affinities,
    threads_inside,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def no_claim(monkeypatch):
    """This process's claim, as before the test: none; the locks a test's claim took are released."""
    monkeypatch.setattr(isolation, "_claim", None)
    monkeypatch.setenv(CLAIM_ENV, "")  # undone after the test, whatever the claim wrote there
    yield
    if isolation._claim is not None:
        for handle in isolation._claim.locks:
            handle.close()


def in_a_worker_process(code: str, state_dir: Path, timeout: float = 600) -> dict[str, Any]:
    """Run ``code`` in a fresh Python process (this repository on its path, the test's state
    directory) and return the JSON it prints last."""
    env = dict(os.environ, COMPILEBENCH_STATE_DIR=str(state_dir), PYTHONPATH=str(ROOT))
    env.pop(CLAIM_ENV, None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def needs_two_cores() -> list[int]:
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two cores")
    return allowed


def test_cpu_lists_read_as_the_kernel_writes_them():
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("5") == {5}


def test_every_thread_of_the_process_is_read_from_proc():
    gate = threading.Event()
    other = threading.Thread(target=gate.wait)
    other.start()
    try:
        seen = thread_affinities()
        assert {threading.get_native_id(), other.native_id} <= set(seen)
        assert set(seen) == {int(tid) for tid in os.listdir("/proc/self/task")}
        assert seen[other.native_id] == os.sched_getaffinity(other.native_id)
        assert threads_inside(sorted(os.sched_getaffinity(0)))
    finally:
        gate.set()
        other.join()


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


def test_a_worker_claims_its_cores_once_for_life_and_experiments_run_on_them(state_dir, no_claim):
    allowed = sorted(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    claim = claim_worker_cores(len(allowed))
    assert claim is not None and list(claim.cores) == allowed and claim.exclusive
    assert claim_worker_cores(1) is claim  # once: a later call gets the same claim
    assert json.loads(os.environ[CLAIM_ENV]) == {"cores": allowed, "exclusive": True, "owner": os.getpid()}
    for _ in range(2):  # experiment after experiment: the claim stays held, nothing claims again
        with isolate(cpus=len(allowed), cache="warm", slot="gpu0") as iso:
            assert iso.cores == allowed and iso.exclusive
            assert claim_cores(1, allowed, state_dir)[0] == []  # the worker holds every core
            assert torch.get_num_threads() == len(allowed)
            import torch._inductor.config as inductor_config

            assert inductor_config.compile_threads == iso.compile_threads == len(allowed)
            assert os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == str(len(allowed))
            assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(state_dir / "cache" / "gpu0") == iso.cache_dir
            assert iso.allocator is not None and "M_MMAP_MAX=0" in iso.allocator
        assert iso.exclusive  # still, at the end
        assert torch.get_num_threads() == threads
        assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(state_dir / "cache" / "gpu0")
    assert claim_cores(1, allowed, state_dir)[0] == []  # held after the experiments too


def test_a_worker_without_a_free_core_shares_and_says_so(state_dir, no_claim):
    allowed = sorted(os.sched_getaffinity(0))
    _, held = claim_cores(len(allowed), allowed, state_dir)  # another worker holds every core
    claim = claim_worker_cores(1)
    assert claim is not None and list(claim.cores) == allowed and not claim.exclusive
    with isolate(cpus=1, cache="warm", slot="cpu") as iso:
        assert iso.exclusive is False and iso.cores == allowed
        assert iso.cache_dir == str(state_dir / "cache" / f"cpu-shared-{os.getpid()}")
    for handle in held:
        handle.close()


def test_without_cpus_a_worker_claims_nothing(no_claim):
    assert claim_worker_cores(None) is None
    assert isolation._claim is None and not os.environ[CLAIM_ENV]


def test_outside_a_claiming_worker_an_experiment_pins_nothing_and_is_not_exclusive(state_dir, no_claim):
    before = os.sched_getaffinity(0)
    with isolate(cpus=1, cache="warm", slot="cpu") as iso:
        assert iso.exclusive is False and iso.cores == sorted(before)
        assert torch.get_num_threads() == iso.compile_threads == 1  # sized to what was reserved
        assert claim_cores(len(before), sorted(before), state_dir)[0] == sorted(before)  # nothing claimed
    assert os.sched_getaffinity(0) == before


def test_cpu_workers_on_different_cores_never_share_a_warm_cache():
    assert isolation._cache_slot("cpu", [0], True) != isolation._cache_slot("cpu", [1], True)
    assert isolation._cache_slot("cpu", [0], False) == f"cpu-shared-{os.getpid()}"
    assert isolation._cache_slot("gpu3", [0], True) == "gpu3"


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


def test_every_thread_and_compile_worker_of_a_claiming_worker_stays_inside_its_claim(state_dir):
    """A thread that exists before the claim (as Ray's, or OpenBLAS's pool started by ``import
    torch``), torch's OpenMP pool at two threads, an inductor compile with a compile-thread pool,
    and inductor's subprocess pool of compile workers (the one Triton kernels compile in): every
    thread of each, read from /proc, may run only on the one claimed core."""
    allowed = needs_two_cores()
    out = in_a_worker_process(
        """
        import json, os, threading
        from tasks.isolation import claim_worker_cores, isolate, thread_affinities

        gate = threading.Event()
        early = threading.Thread(target=gate.wait)
        early.start()
        claim = claim_worker_cores(1)

        import torch
        import torch._inductor.config as inductor_config
        from torch._inductor.async_compile import AsyncCompile

        torch.set_num_threads(2)
        x = torch.randn(256, 256)
        (x @ x).relu().sum()
        inductor_config.compile_threads = 2  # more than the claim, so that compile workers start
        torch.compile(lambda a: (a.sin() + a.cos()).sum(), backend="inductor")(torch.randn(64))
        AsyncCompile.process_pool().submit(AsyncCompile._get_ready).result(timeout=300)
        with isolate(cpus=1, cache="warm", slot="cpu") as iso:
            start = iso.exclusive
        own = thread_affinities()
        every = thread_affinities(descendants=True)
        print(json.dumps({
            "cores": list(claim.cores), "exclusive": claim.exclusive, "iso": [iso.cores, start, iso.exclusive],
            "early": sorted(own[early.native_id]), "own": {t: sorted(c) for t, c in own.items()},
            "others": {t: sorted(c) for t, c in every.items() if t not in own},
        }))
        gate.set()
        """,
        state_dir,
    )
    cores = out["cores"]
    assert len(cores) == 1 and cores[0] in allowed and out["exclusive"]
    assert out["early"] == cores  # pinned though it existed before the claim
    assert len(out["own"]) >= 4  # main, early, OpenMP's and the compile threads at least
    assert out["others"], "inductor's compile workers run in processes of their own"
    assert all(c == cores for c in [*out["own"].values(), *out["others"].values()]), out
    assert out["iso"] == [cores, True, True]


def test_a_thread_that_leaves_the_claim_is_caught_and_pinned_back(state_dir):
    """A thread pinned per calling thread only (as the per-experiment pinning once did) or widened
    by a library is outside the claim: the cores are not exclusive. An experiment's start pins it
    back; a thread widened during the experiment makes that experiment not exclusive."""
    allowed = needs_two_cores()
    out = in_a_worker_process(
        f"""
        import json, os, threading
        from tasks.isolation import claim_worker_cores, isolate, thread_affinities, threads_inside

        everywhere = {allowed}
        claim = claim_worker_cores(1)
        gate = threading.Event()
        other = threading.Thread(target=gate.wait)
        other.start()
        seen = {{"born_inside": thread_affinities()[other.native_id] == set(claim.cores)}}
        os.sched_setaffinity(other.native_id, everywhere)
        seen["widened_inside"] = threads_inside(claim.cores)
        with isolate(cpus=1, cache="warm", slot="cpu") as iso:
            seen["start"] = iso.exclusive
            seen["pinned_back"] = thread_affinities()[other.native_id] == set(claim.cores)
            os.sched_setaffinity(other.native_id, everywhere)
            seen["still"] = iso.still_exclusive()
        seen["end"] = iso.exclusive
        with isolate(cpus=1, cache="warm", slot="cpu") as iso:
            seen["next"] = iso.exclusive
        print(json.dumps(seen))
        gate.set()
        """,
        state_dir,
    )
    assert out == {
        "born_inside": True,
        "widened_inside": False,
        "start": True,
        "pinned_back": True,
        "still": False,
        "end": False,
        "next": True,
    }


def test_the_fresh_process_of_a_cold_experiment_runs_on_the_workers_claim(state_dir):
    """The worker claims before importing torch; its cold experiment's own process reports the
    worker's core, exclusive, without claiming one of its own (one that did would find the
    worker's core locked and take another); the worker still holds its core afterwards. An experiment
    starts in either process with the collector on and the imports frozen out of its collections."""
    allowed = needs_two_cores()
    out = in_a_worker_process(
        """
        import json, os, sys
        from tasks import isolation

        claimed = {}
        claim_worker_cores = isolation.claim_worker_cores

        def spy(cpus):
            claimed["torch_before"] = "torch" in sys.modules
            return claim_worker_cores(cpus)

        isolation.claim_worker_cores = spy
        from tasks.worker import Worker

        worker = Worker({"cpus": 1})
        claim = isolation._claim
        experiment = {
            "target": "seed.foo", "params": {"shape": [4]}, "device": "cpu",
            "compile": {"backend": "eager", "cache": "cold"}, "timing": {"repeats": 1},
        }
        cold = worker.run(experiment)
        experiment["compile"]["cache"] = "warm"
        warm = worker.run(experiment)
        collector = {**experiment, "target": "tests.fault_targets:make_report_collector", "params": {}}
        collectors = [worker.run({**collector, "compile": {"backend": "eager", "cache": c}}) for c in ("cold", "warm")]
        everywhere = sorted(os.sched_getaffinity(os.getppid()))  # the test's cores; this process has one
        others, _ = isolation.claim_cores(len(everywhere), everywhere, isolation.state_root())
        print(json.dumps({
            "claim": list(claim.cores), "torch_before": claimed["torch_before"], "pid": os.getpid(), "others": others,
            "results": [
                [r["status"], r["worker"]["pid"], r["measurement"]["cores"], r["measurement"]["exclusive_cores"]]
                for r in (cold, warm)
            ],
            "collectors": [[r["status"], r["error"]["message"]] for r in collectors],
        }))
        """,
        state_dir,
    )
    claim, pid = out["claim"], out["pid"]
    assert len(claim) == 1 and out["torch_before"] is False
    (cold_status, cold_pid, cold_cores, cold_exclusive), warm = out["results"]
    assert cold_status == "ok" and cold_pid != pid
    assert (cold_cores, cold_exclusive) == (claim, True)
    assert warm == ["ok", pid, claim, True]
    assert out["others"] == [core for core in allowed if core not in claim]  # the worker's core is still its own
    state = repr({"enabled": True, "frozen": True})
    assert out["collectors"] == [["runtime_error", state]] * 2, out["collectors"]


def test_allocator_switch_steady_by_default_system_on_request(monkeypatch):
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


def test_a_reset_gives_the_heap_an_experiment_freed_back_to_the_system():
    """Under the steady allocator (never trims), 256 MiB freed by an experiment stays resident until the
    worker's reset gives it back. In a fresh process: the test process's heap is not this test's."""
    script = """
import torch
from tasks.isolation import steady_allocator
from tasks.reset import Baseline, reset
from tasks.worker import resident_mb
baseline = Baseline()
assert steady_allocator() is not None
kept = []
for _ in range(64):
    kept.append(torch.ones(1 << 20))  # 4 MiB each, from the heap
before = resident_mb()
del kept
freed = resident_mb()
reset(baseline)
print(before, freed, resident_mb())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, freed, after = map(float, proc.stdout.split())
    assert freed > before - 64  # the steady heap kept what was freed...
    assert after < freed - 200  # ...until the reset gave it back


def test_a_released_claim_frees_its_cores_and_is_no_longer_exclusive(state_dir, no_claim):
    """What a worker about to be replaced does with its last result: its replacement, started before this
    process exits, claims the same cores."""
    from tasks.isolation import release_claim

    allowed = sorted(os.sched_getaffinity(0))
    claim = claim_worker_cores(len(allowed))
    assert claim is not None and claim.exclusive and claim_cores(1, allowed, state_dir)[0] == []
    release_claim()
    taken, locks = claim_cores(len(allowed), allowed, state_dir)
    assert taken == allowed  # every core free for the next worker
    assert isolation._claim is not None and not isolation._claim.exclusive and isolation._claim.cores == claim.cores
    assert json.loads(os.environ[CLAIM_ENV]) == {"cores": allowed, "exclusive": False, "owner": os.getpid()}
    with isolate(cpus=len(allowed), cache="warm", slot="cpu") as iso:
        assert iso.exclusive is False  # anything run after it says so
    release_claim()  # twice: nothing more to hand back
    for handle in locks:
        handle.close()


def test_a_worker_hands_its_cores_back_with_the_result_that_retires_it(state_dir, no_claim):
    from tasks.worker import RETIRE, Worker

    allowed = sorted(os.sched_getaffinity(0))
    worker = Worker({"cpus": len(allowed), "limits": {"max_experiments": 2}})
    gc.unfreeze()  # what a worker freezes for its life (``Worker``): this process is the test's, not a worker's
    payload = {"target": "seed.foo", "device": "cpu", "compile": {"backend": "eager"}, "timing": {"repeats": 2}}
    first = worker.run(payload)
    assert RETIRE not in first and first["measurement"]["exclusive_cores"]
    assert claim_cores(1, allowed, state_dir)[0] == []  # held between experiments
    last = worker.run({**payload, "seed": 1})
    assert last[RETIRE] == "ran 2 experiments (max_experiments=2)"
    assert last["status"] == "ok" and last["measurement"]["exclusive_cores"]  # measured while it held them
    taken, locks = claim_cores(len(allowed), allowed, state_dir)
    assert taken == allowed
    for handle in locks:
        handle.close()
