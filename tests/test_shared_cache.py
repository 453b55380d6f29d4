"""compile.cache: shared: a cold start that first loads the artifacts stored for its key under the run's
--compile-cache, and stores what it compiled there (``tasks.shared_cache``, ``orchestrator.plan.compile_cache``).

The worker-level runs go through ``tasks.worker.run_in_fresh_process``, the path a worker takes for a
shared experiment: a fresh process with an empty local cache directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.models import CompileCache, CompileConfig, ErrorInfo, Experiment, Result
from tasks.shared_cache import BLOB_SUFFIX, SharedCache, device_model, key_fields, read_blob, shared_key, write_blob
from tasks.worker import run_in_fresh_process

from .conftest import multinode_cluster, use_s3_endpoint

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT: dict[str, Any] = {
    "target": "seed.foo",
    "device": "cpu",
    "compile": {"cache": "shared"},
    "timing": {"warmup": 1, "repeats": 3},
}
VERSIONS = {"torch": "2.13.0+cpu", "triton": "3.7.0", "python": "3.11.7"}


def shared_run(location: Path) -> Result:
    """One shared experiment in a fresh process, as a worker runs it."""
    return Result.model_validate(run_in_fresh_process(EXPERIMENT, {"cpus": 1, "compile_cache": str(location)}))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result, Result]:
    """An empty shared cache, then the same experiment twice, each in a fresh process."""
    location = tmp_path_factory.mktemp("shared-cache")
    first = shared_run(location)
    second = shared_run(location)
    return location, first, second


def test_a_first_run_on_an_empty_cache_misses_and_stores(two_runs):
    location, first, _ = two_runs
    assert first.status == "ok", first.error
    cache = first.compile_cache
    assert cache is not None and cache.state == "shared" and not cache.loaded and cache.loaded_bytes == 0
    assert cache.fxgraph_miss >= 1 and cache.fxgraph_hit == 0 and cache.autograd_miss >= 1
    assert cache.shared_note == "nothing stored for this key yet"
    blob = location / f"{cache.shared_key}{BLOB_SUFFIX}"
    assert cache.stored_bytes > 0 and blob.stat().st_size == cache.stored_bytes
    about = json.loads((location / f"{cache.shared_key}.json").read_text())  # the key's fields, for a person
    assert about["target"] == "seed.foo" and about["device"] == "cpu" and "cache" not in about["compile"]
    assert first.measurement is not None and first.measurement.cache == "shared"
    assert first.measurement.fresh_process and not Path(first.measurement.cache_dir or "").exists()  # emptied


def test_a_second_run_in_a_fresh_process_loads_and_hits(two_runs):
    _, first, second = two_runs
    assert second.status == "ok", second.error
    cache, stored = second.compile_cache, first.compile_cache
    assert cache is not None and stored is not None and cache.shared_key == stored.shared_key
    assert cache.loaded and cache.loaded_bytes == stored.stored_bytes and cache.loaded_artifacts >= 2
    assert cache.load_s is not None and cache.shared_note is None
    assert cache.fxgraph_hit >= 1 and cache.fxgraph_miss == 0
    assert cache.autograd_hit >= 1 and cache.autograd_miss == 0
    assert cache.outcome == "hit" and cache.label == "shared: hit"
    assert cache.stored_bytes == 0  # every entry it used came from the load: nothing new to store
    assert second.worker and first.worker and second.worker.pid != first.worker.pid
    assert second.measurement and first.measurement and second.measurement.cache_dir != first.measurement.cache_dir


def test_the_key_changes_with_what_invalidates_artifacts_and_nothing_else():
    exp = Experiment.model_validate(EXPERIMENT)

    def key(
        e: Experiment = exp, device: str = "cpu", model: str | None = "Xeon", threads: int = 2, **versions: str
    ) -> str:
        return shared_key(key_fields(e, device, model, threads, {**VERSIONS, **versions}))

    base = key()
    invalidating = [
        key(torch="2.12.0+cpu"),
        key(triton="3.6.0"),
        key(python="3.12.1"),
        key(model="EPYC"),
        key(threads=4),  # inductor's C++ kernels are built for torch's thread count
        key(device="cuda", model="NVIDIA H100 (sm_90)"),
        key(exp.model_copy(update={"compile": CompileConfig(cache="shared", mode="max-autotune-no-cudagraphs")})),
        key(exp.model_copy(update={"compile": CompileConfig(cache="shared", dynamic=True)})),
        key(exp.model_copy(update={"params": {"n": 20}})),
        key(exp.model_copy(update={"phase": "training"})),
        key(exp.model_copy(update={"precision": "bf16"})),
    ]
    assert len({base, *invalidating}) == 1 + len(invalidating)
    same = [
        key(python="3.11.9"),  # a patch release of Python
        key(exp.model_copy(update={"seed": 7})),
        key(exp.model_copy(update={"timing": {"repeats": 50}})),
        key(exp.model_copy(update={"compile": CompileConfig(cache="cold")})),  # the cache state itself
        key(exp.model_copy(update={"gpu_model": "H100"})),  # requested: the device used is what counts
    ]
    assert set(same) == {base}
    gpu = key(device="cuda", model="NVIDIA H100 (sm_90)")
    assert key(device="cuda", model="NVIDIA H100 (sm_90)", threads=8) == gpu  # threads count on the CPU only


def test_another_torch_version_or_device_model_loads_nothing(two_runs, monkeypatch):
    import torch

    import tasks.metadata
    import tasks.shared_cache

    location, first, _ = two_runs
    exp, cpu = Experiment.model_validate(EXPERIMENT), torch.device("cpu")
    assert first.compile_cache is not None
    here = shared_key(key_fields(exp, "cpu", device_model(cpu), 1, tasks.metadata.versions()))  # cpus: 1
    assert here == first.compile_cache.shared_key

    real, threads = tasks.metadata.versions(), torch.get_num_threads()
    torch.set_num_threads(1)  # as the runs had: only the torch version, then only the CPU model differs
    try:
        monkeypatch.setattr(tasks.metadata, "versions", lambda: {**real, "torch": "2.12.0"})
        other_torch = SharedCache.load(exp, cpu, str(location))
        monkeypatch.setattr(tasks.metadata, "versions", lambda: real)
        monkeypatch.setattr(tasks.shared_cache, "device_model", lambda device: "another CPU")
        other_cpu = SharedCache.load(exp, cpu, str(location))
    finally:
        torch.set_num_threads(threads)
    fields = key_fields(exp, "cpu", device_model(cpu), 1, real)
    assert {k for k in fields if other_torch.fields[k] != fields[k]} == {"torch"}
    assert {k for k in fields if other_cpu.fields[k] != fields[k]} == {"device_model"}
    for other in (other_torch, other_cpu):
        assert other.key != here and not other.loaded and other.loaded_bytes == 0
        assert other.notes == ["nothing stored for this key yet"]


def test_a_corrupt_artifact_is_a_miss_with_a_note_and_is_replaced(tmp_path):
    import torch

    import tasks.metadata

    exp = Experiment.model_validate(EXPERIMENT)
    key = shared_key(key_fields(exp, "cpu", device_model(torch.device("cpu")), 1, tasks.metadata.versions()))
    (tmp_path / f"{key}{BLOB_SUFFIX}").write_bytes(b"\x00not torch cache artifacts" * 10)
    result = shared_run(tmp_path)
    assert result.status == "ok", result.error
    cache = result.compile_cache
    assert cache is not None and cache.shared_key == key and not cache.loaded
    assert cache.shared_note and "corrupt or truncated" in cache.shared_note
    assert cache.fxgraph_miss >= 1 and cache.fxgraph_hit == 0
    assert cache.stored_bytes > 0 and (tmp_path / f"{key}{BLOB_SUFFIX}").stat().st_size == cache.stored_bytes


def test_without_a_location_a_shared_compile_runs_cold_and_says_so():
    import torch

    shared = SharedCache.load(Experiment.model_validate(EXPERIMENT), torch.device("cpu"), None)
    shared.store()
    recorded = shared.recorded(None)
    assert not recorded.loaded and recorded.stored_bytes == 0 and recorded.state == "shared"
    assert recorded.shared_note and "run --compile-cache" in recorded.shared_note


def test_label_and_results_from_before_the_shared_cache():
    assert CompileConfig(cache="shared").label() == "inductor+shared"
    assert CompileConfig(cache="cold", mode="max-autotune").label() == "inductor:max-autotune+cold"
    assert CompileConfig().label() == "inductor"
    old = CompileCache.model_validate({"state": "cold", "fxgraph_miss": 1})  # as reports before it stored them
    assert old.shared_key is None and not old.loaded and old.stored_bytes == 0 and old.shared_note is None
    assert Experiment.model_validate(EXPERIMENT).id != Experiment.model_validate({**EXPERIMENT, "compile": {}}).id


def test_blobs_are_written_whole_to_a_directory_or_through_fsspec(tmp_path):
    write_blob(str(tmp_path / "made"), "k.bin", b"one")
    write_blob(str(tmp_path / "made"), "k.bin", b"two")  # replaced by a rename: no temporary file left
    assert read_blob(str(tmp_path / "made"), "k.bin") == b"two"
    assert sorted(p.name for p in (tmp_path / "made").iterdir()) == ["k.bin"]
    assert oct((tmp_path / "made" / "k.bin").stat().st_mode & 0o777) == oct(0o644)
    assert read_blob(f"file://{tmp_path / 'made'}", "k.bin") == b"two"
    assert read_blob(str(tmp_path / "made"), "missing.bin") is None
    write_blob("memory://compile-cache/run", "k.bin", b"three")
    assert read_blob("memory://compile-cache/run", "k.bin") == b"three"
    assert read_blob("memory://compile-cache/run", "missing.bin") is None


def test_the_scheduler_counts_a_shared_experiment_as_run_in_a_fresh_process():
    """Like a cold one: it adds nothing to what its worker ran in its own process, and ran after nothing."""
    from orchestrator.execution.policy import Scheduler
    from orchestrator.machines.nodes import Node

    crash = ErrorInfo(type="ray.exceptions.ActorDiedError", message="The actor died unexpectedly")
    shared = Experiment(target="seed.foo", seed=1, compile={"cache": "shared"}, retries=0)
    s = Scheduler([Experiment(target="seed.foo"), shared, Experiment(target="seed.foo", seed=2, timeout_s=5)])
    s.observe_nodes([Node(node_id="a", hostname="host-a", address="", cpus=1, gpus=1, gpu_models=[])])
    for start in s.plan(0).start:
        s.worker_ready(start.worker_id, "h", 1000, ["0"])
    (d,) = s.plan(0).dispatch
    s.finished(d.worker_id, _ok(d.experiment))
    (fresh,) = s.plan(1).dispatch
    final = s.died(fresh.worker_id, crash, now=2, alive=True)  # its fresh process died: it ran nothing before
    assert final is not None and final.worker is not None and final.worker.experiments_before == 0
    s.plan(3)
    ((_, timed_out),) = s.expired(8)
    assert timed_out is not None and timed_out.worker is not None
    assert timed_out.worker.experiments_before == 1  # the shared one did not run in the worker's process


def _ok(e: Experiment) -> Result:
    return Result(
        experiment_id=e.id,
        target=e.target,
        params={},
        device="cpu",
        compile=e.compile,
        timing=e.timing,
        seed=e.seed,
        status="ok",
        started_at=0,
        finished_at=1,
    )


# --- The driver: the location is checked before Ray starts ---------------------------------------


def test_a_shared_spec_without_a_compile_cache_exits_2_in_one_line_before_ray(write_spec):
    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {cache: shared}\n")
    lines, code = _cli(spec, spec.parent / "r.json")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: experiment ") and "compile.cache: shared" in lines[0]
    assert "--compile-cache DIR or URL" in lines[0]
    assert not (spec.parent / "r.json.journal.jsonl").exists()


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("a-file", "exists and is not a directory"),
        ("a-file/cache", "not writable: Not a directory"),
        ("/proc/compile-cache", "not writable: "),
        ("nosuchscheme://bucket/cache", "unknown URL scheme 'nosuchscheme://'"),
    ],
)
def test_a_compile_cache_that_cannot_be_written_exits_2_in_one_line_before_ray(write_spec, where, expected):
    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {cache: shared}\n")
    (spec.parent / "a-file").write_text("not a directory")
    given = where if where.startswith("/") or "://" in where else str(spec.parent / where)
    lines, code = _cli(spec, spec.parent / "r.json", "--compile-cache", given)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --compile-cache ") and expected in lines[0], lines[0]


def test_the_library_checks_the_compile_cache_before_connecting(write_spec, tmp_path, monkeypatch):
    from orchestrator import api

    def no_cluster(*args, **kwargs):
        raise AssertionError("connected to Ray despite a bad --compile-cache")

    monkeypatch.setattr(api, "connect", no_cluster)
    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {cache: shared}\n")
    with pytest.raises(api.CompileCacheError, match="needs a place to share compiled artifacts"):
        api.run(spec, tmp_path / "r.json")
    with pytest.raises(api.CompileCacheError, match="exists and is not a directory"):
        api.run(spec, tmp_path / "r.json", compile_cache=spec)


def test_a_relative_directory_is_given_to_the_workers_absolute(tmp_path, monkeypatch):
    from orchestrator.plan.compile_cache import check_compile_cache

    monkeypatch.chdir(tmp_path)
    exp = Experiment.model_validate(EXPERIMENT)
    assert check_compile_cache("cache/here", [exp]) == str(tmp_path / "cache" / "here")
    assert (tmp_path / "cache" / "here").is_dir() and not list((tmp_path / "cache" / "here").iterdir())
    assert check_compile_cache(None, [Experiment(target="seed.foo")]) is None  # nobody asked for one


def _cli(spec: Path, out: Path, *more: str) -> tuple[list[str], int]:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", str(spec), "--out", str(out), *more],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "COLUMNS": "400"},
    )
    return proc.stderr.strip().splitlines(), proc.returncode


# --- An object store: a real S3 API on 127.0.0.1 (moto's server) -------------------------------


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The session's S3 server (``conftest.s3_endpoint``), reached through the environment s3fs reads."""
    import s3fs

    use_s3_endpoint(monkeypatch, s3_endpoint)
    yield s3_endpoint
    s3fs.S3FileSystem.clear_instance_cache()  # no later test reaches this server through a cached client


def test_blobs_and_the_check_against_a_real_s3_api(s3_env):
    import fsspec

    from orchestrator.plan.compile_cache import CompileCacheError, check_compile_cache

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("compile-cache-bucket")
    exp = Experiment.model_validate(EXPERIMENT)
    url = "s3://compile-cache-bucket/cc"
    assert check_compile_cache(url, [exp]) == url
    write_blob(url, "k.bin", b"artifacts")
    assert read_blob(url, "k.bin") == b"artifacts" and read_blob(url, "other.bin") is None
    assert fs.ls("compile-cache-bucket/cc", refresh=True) == ["compile-cache-bucket/cc/k.bin"]  # no probe left
    with pytest.raises(CompileCacheError, match=r"^--compile-cache .*no-such-bucket"):
        check_compile_cache("s3://no-such-bucket/cc", [exp])


# --- Through the library, and across two nodes --------------------------------------------------


def test_a_run_through_the_api_loads_what_an_earlier_run_stored(ray_cluster, two_runs, write_spec, tmp_path):
    from orchestrator import api

    location, first, _ = two_runs
    spec = write_spec(
        "name: shared\nexperiments:\n  - target: seed.foo\n    device: cpu\n    resources: {cpus: 1}\n"
        "    compile: {cache: shared}\n    timing: {warmup: 1, repeats: 3}\n"
    )
    report = api.run(spec, tmp_path / "r.json", compile_cache=str(location))
    (result,) = report.results
    assert result.status == "ok", result.error
    cache = result.compile_cache
    assert cache is not None and first.compile_cache is not None
    assert cache.shared_key == first.compile_cache.shared_key and cache.loaded
    assert cache.fxgraph_hit >= 1 and cache.fxgraph_miss == 0 and cache.autograd_hit >= 1
    assert result.worker and result.worker.experiments_before == 0  # its own fresh process
    assert result.config_label == "inductor+shared"


def test_a_second_node_loads_what_the_first_stored(write_spec, tmp_path):
    """Two nodes, each with its own local state (cache) directory, one shared location: an experiment
    pinned to the first node (its GPU model) stores, the same compile pinned to the second loads."""
    from orchestrator import api

    location = tmp_path / "shared"
    nodes = [
        {
            "num_cpus": 1,
            "num_gpus": 1,
            "resources": {f"accelerator_type:{model}": 1},
            "env_vars": {"COMPILEBENCH_STATE_DIR": str(tmp_path / f"state-{model}")},
        }
        for model in ("H100", "A10G")
    ]
    results = {}
    with multinode_cluster(head_cpus=0, nodes=nodes):
        for model in ("H100", "A10G"):
            spec = write_spec(
                f"name: {model}\nexperiments:\n  - target: seed.foo\n    gpu_model: {model}\n"
                "    compile: {cache: shared}\n    timing: {warmup: 1, repeats: 3}\n",
                name=f"{model}.yaml",
            )
            (results[model],) = api.run(spec, tmp_path / f"{model}.json", compile_cache=str(location)).results
    first, second = results["H100"], results["A10G"]
    assert first.status == second.status == "ok", (first.error, second.error)
    assert first.worker and second.worker and first.worker.node_id != second.worker.node_id
    for result, model in ((first, "H100"), (second, "A10G")):
        assert result.measurement and str(result.measurement.cache_dir).startswith(str(tmp_path / f"state-{model}"))
    stored, loaded = first.compile_cache, second.compile_cache
    assert stored is not None and loaded is not None and stored.shared_key == loaded.shared_key
    assert not stored.loaded and stored.fxgraph_miss >= 1 and stored.stored_bytes > 0
    assert loaded.loaded and loaded.loaded_bytes == stored.stored_bytes
    assert loaded.fxgraph_hit >= 1 and loaded.fxgraph_miss == 0 and loaded.autograd_hit >= 1
