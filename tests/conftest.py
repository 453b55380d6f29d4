"""Shared fixtures: the session's one local Ray instance and its multi-node clusters, its one S3 server, and
spec-file helpers.

A process joins one Ray at a time, and starting one costs 10-15 s on a 2-core machine. So the local
instance (``ray_cluster``) is started once and kept; a multi-node cluster (``multinode_cluster``) takes its
place only for the tests that join one, and modules are ordered so that those come after the modules that
use only the local instance: it is started again only where a later test asks for it. Likewise one moto
server serves every S3 test (``s3_endpoint``).
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local tests need no token
# Bytecode is written as modules are first imported, whatever PYTHONDONTWRITEBYTECODE says (the project's
# machines set it): the suite starts some 300 Python processes (Ray workers and daemons, CLI runs, fresh
# processes, ranks), and each would otherwise compile from source every module it imports. So the test command
# compiles none at install: of the 18,000 modules pip and uv install, the suite imports about 5,500, each compiled
# by the first processes that import it (benchmarks/setup_cost.py). Set before Ray starts (its workers inherit
# it) and, in pytest-xdist's controller, before its workers start.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# Workers hold their cores' lock files for life: a test session's own lock and cache directory keeps it
# apart from any other compilebench process on the machine (set before Ray starts: workers inherit it).
# Under pytest-xdist each worker process is a session of its own, with a Ray instance of its own: it gets its
# own directory too, not the one its parent's import of this file chose.
# Removed when the session ends (``pytest_sessionfinish``).
_OWN_STATE_DIR = None
if os.environ.get("PYTEST_XDIST_WORKER") or "COMPILEBENCH_STATE_DIR" not in os.environ:
    _OWN_STATE_DIR = os.environ["COMPILEBENCH_STATE_DIR"] = tempfile.mkdtemp(prefix="compilebench-tests-")

# Inductor probes the CPU's vector instructions once per process, on its first CPU compile, by building a
# test program with torch's headers for each instruction set the CPU reports (8-10 s of gcc on a 2-core
# machine in a process whose cache directory is empty: every worker process and every cold experiment of
# the suite). Its answer here is the set /proc/cpuinfo lists, which TORCHINDUCTOR_VEC_ISA_OK=1 tells it
# outright (torch's own switch; the same instruction set is picked). Set before torch is imported anywhere:
# the suite's Ray workers and subprocesses inherit it. tests/test_compiling.py times the probe itself.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

# Ray's bookkeeping for the shared instance: 3 CPUs and 2 logical GPUs, so that GPU-pinning is exercised on a
# machine without GPUs. Two GPU workers run side by side, each with a core of its own (3 // 2, as the policy
# shares a node's cores out), as on the 2-core machine; a third CPU holds the contamination benchmark's third
# one-core worker. Every worker process a sweep starts imports torch (about 2.4 s of CPU): two GPUs, not four,
# halve what the suite's sweeps pay for it.
RAY_CPUS = 3
RAY_GPUS = 2


class SessionRay:
    """What this process is joined to: the local instance (its ``ClusterInfo``), a multi-node cluster, or
    nothing. Each switch shuts the other down; the local instance is started only when a test asks for it."""

    def __init__(self) -> None:
        self.local_info: Any = None  # the ClusterInfo of the local instance while joined to it

    def local(self) -> Any:
        import ray

        from orchestrator.execution.cluster import connect

        if self.local_info is None or not ray.is_initialized():
            ray.shutdown()  # whatever else this process joined
            self.local_info = connect(num_gpus=RAY_GPUS, num_cpus=RAY_CPUS)
        return self.local_info

    def leave(self) -> None:
        import ray

        ray.shutdown()
        self.local_info = None


SESSION_RAY = SessionRay()


@pytest.fixture
def ray_cluster() -> Any:
    """The session's local Ray instance (3 CPUs, 2 logical GPUs), joined: started at the first test that
    asks, kept for the next."""
    return SESSION_RAY.local()


@pytest.fixture(scope="session", autouse=True)
def _leave_ray_at_the_end() -> Iterator[None]:
    yield
    SESSION_RAY.leave()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Collection with the cycle collector paused (``tasks.heap.collector_paused``), as a worker imports torch
    (``tasks.worker.import_for_experiments``): importing every test module (torch, dynamo, Ray, the project) makes
    some 450,000 objects and little garbage, and each collection it triggers walks all of them made so far again.
    Collecting the suite took 7.4 s of CPU instead of 9.4 on the 2-core machine, paid by each pytest worker."""
    from tasks.heap import collector_paused

    with collector_paused():
        return (yield)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """What this process holds is moved out of the cycle collector's reach where nothing is frozen, as a worker does
    after its imports (``tasks.worker``): before the first test, what collection imported (torch, Ray, every test
    module: some 450,000 objects); again after a test unfroze everything (a run in this process does as it ends,
    ``orchestrator.api.settled_journal``, and so does a test of a worker). Each full collection a test triggers then
    walks only what the tests made: about 4% less CPU in the modules that build big reports.

    The local Ray instance goes at the first test of a module ordered after every module that uses it
    (``pytest_collection_modifyitems``): kept idle, its daemons, prestarted workers and the driver's threads would
    cost one to two core-seconds a minute for the rest of the session, in each pytest-xdist worker."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
    if SESSION_RAY.local_info is not None and _module_of(item) in _AFTER_LOCAL:
        SESSION_RAY.leave()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The state directory this process made goes (after the session's Ray and its workers: the last test's
    teardown left it); also in pytest-xdist's controller, which made one on import and runs no test."""
    if _OWN_STATE_DIR is not None:
        shutil.rmtree(_OWN_STATE_DIR, ignore_errors=True)


@contextmanager
def multinode_cluster(head_cpus: int, nodes: list[dict]) -> Iterator[Any]:
    """Several Ray nodes on this machine (``ray.cluster_utils.Cluster``), this process joined to
    them, for one test module: ``nodes`` are ``Cluster.add_node`` arguments (logical GPUs, and
    ``resources={"accelerator_type:A100": 1}`` for a GPU model). One process joins one Ray at a
    time: the session's local instance, if started, is shut down first; the next test that asks for
    it starts it again (``ray_cluster``). A module that calls this imports it, which orders its tests after
    those of modules that only use the local instance (``pytest_collection_modifyitems``)."""
    import logging

    import ray
    from ray.cluster_utils import Cluster

    SESSION_RAY.leave()
    from orchestrator.execution.cluster import LOCAL_SYSTEM_CONFIG

    # workers at niceness 0 on every node, as on a local instance (the head's system config reaches them all)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": head_cpus, "_system_config": LOCAL_SYSTEM_CONFIG}
    )
    try:
        for args in nodes:
            cluster.add_node(**args)
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


# The modules that take longest, longest first (seconds: their tests' wall time summed, in one run of the README's test
# command from a fresh clone on the 2-core machine, ``-n 3 --dist loadfile``). Each pytest-xdist worker takes the next
# module once it has all but two of its tests done, so the long ones start first, side by side, and the short ones fill
# in around them: the last modules handed out take seconds, and the three workers end close together.
LONGEST_FIRST = (
    "test_cli.py",  # 122 s: first, for the seed sweep through the CLI, the suite's longest test (106 s)
    "test_runner.py",  # 127 s
    "test_shared_cache.py",  # 112 s
    "test_faults.py",  # 76 s
    "test_resume.py",  # 73 s
    "test_isolation.py",  # 68 s
    "test_storage.py",  # 60 s
    "test_pool.py",  # 52 s
    "test_gang.py",  # 51 s
    "test_tracing.py",  # 48 s
    "test_blocks.py",  # 44 s
    "test_benchmarks.py",  # 38 s
    "test_types.py",  # 29 s: mypy, a cold run
    "test_report_scale.py",  # 28 s
    "test_compile_cache_benchmark.py",  # 27 s
    "test_html.py",  # 25 s
    "test_procedure.py",  # 24 s
    "test_correctness.py",  # 24 s
    "test_cluster.py",  # 22 s
    "test_layering.py",  # 19 s
    "test_distributed_rank.py",  # 17 s
    "test_compiling.py",  # 15 s
    "test_replay.py",  # 14 s
    "test_history.py",  # 13 s
    "test_calibrate_run.py",  # 10 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules (``LONGEST_FIRST``) first, in that order; then modules that use the session's
    local instance, those of them that also join a multi-node cluster (they import ``multinode_cluster``;
    they do it in their last tests) next, then the rest: in a serial run the local instance is started once,
    not again after each cluster. Within a module, and within each group, the collection's order."""

    local, clustered = set(), set()
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            local.add(_module_of(item))
        if getattr(getattr(item, "module", None), "multinode_cluster", None) is multinode_cluster:
            clustered.add(_module_of(item))

    def rank(module: str) -> tuple[int, int]:
        name = Path(module).name
        if name in LONGEST_FIRST:
            return -1, LONGEST_FIRST.index(name)
        return (2 if module not in local else 1 if module in clustered else 0), 0

    position = {module: n for n, module in enumerate(dict.fromkeys(map(_module_of, items)))}
    items.sort(key=lambda item: (rank(_module_of(item)), position[_module_of(item)]))
    _AFTER_LOCAL.clear()
    _AFTER_LOCAL.update(module for module in position if rank(module)[0] == 2)


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.partition("::")[0]


# The modules ordered after every module that uses the local instance (``pytest_collection_modifyitems``): none of
# them does, and pytest-xdist hands modules out in that order, so none after them either.
_AFTER_LOCAL: set[str] = set()


# --- One S3 server for the session -------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server, in this process on a free port of 127.0.0.1, for every S3 test of the session;
    each test module keeps to buckets of its own. Clients find it by ``use_s3_endpoint``'s environment.

    One request at a time: moto checks a write's condition (``If-None-Match: *``, ``If-Match``) and then
    writes, so two writes on its threads could both pass the check, where S3 lets exactly one through. The
    journals' lease stands on S3's answer; serving each request whole before the next, as ``ThreadedMotoServer``
    does not, makes moto's answer S3's."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    import threading

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    app, one_at_a_time = DomainDispatcherApplication(create_backend_app), threading.Lock()

    def atomic(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with one_at_a_time:
            return list(app(environ, start_response))

    server = make_server("127.0.0.1", 0, atomic, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        thread.join()


def use_s3_endpoint(env: pytest.MonkeyPatch, endpoint: str) -> None:
    """Point every S3 client of this process and of those it starts at ``endpoint``, with moto's test
    credentials and nothing of the user's AWS configuration; s3fs's cached clients are dropped, since a
    client made before reads no endpoint from here (call again after ``env`` is undone)."""
    import s3fs

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        env.delenv(name, raising=False)
    env.setenv("AWS_ENDPOINT_URL", endpoint)
    env.setenv("AWS_ACCESS_KEY_ID", "testing")
    env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    env.setenv("AWS_DEFAULT_REGION", "us-east-1")
    env.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()


# --- Specs and in-process experiments -----------------------------------------------------------------


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a spec text (dedented) to a file and return its path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


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
