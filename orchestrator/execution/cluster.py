"""Connecting to Ray and describing the cluster: nodes, CPUs, GPUs, their models and versions."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import socket
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel
from ray._private import ray_constants, services

from orchestrator.machines.nodes import Environment, Node
from tasks.models import Result
from tasks.text import error_line

ACCELERATOR_PREFIX = "accelerator_type:"  # Ray's resource naming a node's GPU model

# Joining a cluster: Ray's defaults retry an address where nothing answers for about 14 minutes
# (20 attempts of ~41 s); these make it give up in about 30 s. They are set only while
# ray.init joins an address and restored at once: set for the whole process (as they once
# were, at import), they reached a local instance's raylet and workers as well. A user's own
# settings win.
FAIL_FAST_ENV = {
    "RAY_gcs_rpc_server_connect_timeout_s": "2",  # default 5
    "RAY_py_gcs_connect_timeout_s": "5",  # default 30
    "RAY_NUM_REDIS_GET_RETRIES": "3",  # default 20
    "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "2",  # ray:// clients, default 5
    "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "10",  # ray:// clients, default 30
}

# A local instance's settings. Ray starts its worker processes at niceness 15 (``worker_niceness``) to keep its own
# daemons responsive; a worker is what times the experiments, and at 15 it gets about 1/30 of a core that any
# process at 0 also wants (seen here: an experiment's worker took 138 s to start and 41 s to run what takes 5.5 s
# and 3.3 s, beside two busy processes). A cluster started by ``ray start`` takes it from its nodes' environment
# (``RAY_worker_niceness=0``, as cluster.yaml sets it); each result records its worker's (``Measurement.niceness``).
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}

# What a working directory shipped to the cluster leaves behind (gitignore patterns; Ray also
# honours the directory's own .gitignore). Ray refuses a working directory over 500 MiB.
WORKING_DIR_EXCLUDES = [
    ".git/",
    ".venv/",
    "venv/",
    "__pycache__/",
    "*.pyc",
    ".mypy_cache/",
    ".ruff_cache/",
    ".pytest_cache/",
    "*.egg-info/",
    "build/",
    "dist/",
    "reports/",
    "*.journal.jsonl",
]


class ClusterError(RuntimeError):
    """The cluster could not be reached or started."""


class ClusterInfo(BaseModel):
    address: str | None
    nodes: list[Node]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def gpu_models(self) -> list[str]:
        """The GPU models the nodes advertise (``accelerator_type:<MODEL>``), sorted."""
        return sorted({m for n in self.nodes for m in n.gpu_models})

    @property
    def max_gpus_per_node(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    @property
    def max_cpus_per_node(self) -> int:
        return max((n.cpus for n in self.nodes), default=0)

    @property
    def min_cpus_per_node(self) -> int:
        return min((n.cpus for n in self.nodes if n.cpus), default=1)


def connect(
    address: str | None = None,
    num_gpus: int | None = None,
    num_cpus: int | None = None,
    working_dir: str | Path | None = None,
) -> ClusterInfo:
    """Join the cluster at ``address`` (``auto``, ``host:port``, ``ray://…``) or start a local one.

    Without ``address`` a new local instance starts (never one that ``ray start`` or another
    process left running on this machine); it may declare ``num_gpus`` logical GPUs, so that
    scheduling can be exercised on a machine without any. ``working_dir`` is shipped to every worker as the
    job's ``runtime_env`` (user target modules then import on remote nodes). If Ray is
    already initialised in this process, that instance is used as it is.
    """
    if not ray.is_initialized():
        if address and (num_gpus is not None or num_cpus is not None):
            raise ClusterError("--num-gpus/--num-cpus describe a local instance; they cannot be used with --address")
        kwargs: dict[str, Any] = {"address": address}
        if not address:  # "local": a new instance, even where `ray start` left one running on this machine
            kwargs = {"address": "local", "num_gpus": num_gpus, "num_cpus": num_cpus or os.cpu_count()}
        if working_dir is not None:
            kwargs["runtime_env"] = working_dir_env(Path(working_dir))
        try:
            if address:
                check_reachable(address)
                with fail_fast_connect():
                    ray.init(**kwargs, logging_level=logging.ERROR, log_to_driver=False)
            else:
                ray.init(
                    **kwargs,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    include_dashboard=False,
                    _system_config=LOCAL_SYSTEM_CONFIG,
                )
        except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError… depending on the address
            where = f"Ray cluster at {address!r}" if address else "a local Ray instance"
            raise ClusterError(f"could not connect to {where}: {error_line(e)}") from e
    return describe(address)


@contextlib.contextmanager
def fail_fast_connect() -> Iterator[None]:
    """``FAIL_FAST_ENV`` for this process while it joins a cluster, then as it was before.

    Ray reads some of these when it is imported (its C++ config, module constants): they are
    re-read here, and put back afterwards. Nothing is started locally when joining an address,
    so no other process inherits them.
    """
    from ray._raylet import Config  # type: ignore[attr-defined]

    saved = {name: os.environ.get(name) for name in FAIL_FAST_ENV}
    constants = [(ray_constants, "NUM_REDIS_GET_RETRIES", "RAY_NUM_REDIS_GET_RETRIES")]
    with contextlib.suppress(ImportError):  # ray:// needs Ray Client (grpc)
        from ray.util.client import worker as client_worker

        constants += [
            (client_worker, "INITIAL_TIMEOUT_SEC", "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S"),
            (client_worker, "MAX_TIMEOUT_SEC", "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S"),
        ]
    originals = [(module, name, getattr(module, name)) for module, name, _ in constants]
    for module, name, env in constants:
        if saved[env] is None:  # a user's setting was read at import already
            setattr(module, name, int(FAIL_FAST_ENV[env]))
    for name, value in FAIL_FAST_ENV.items():
        os.environ.setdefault(name, value)
    Config.initialize("")  # re-read RAY_* settings, as Ray does itself when it turns token auth on
    try:
        yield
    finally:
        for name, before in saved.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before
        for module, name, value in originals:
            setattr(module, name, value)


def working_dir_env(path: Path) -> dict[str, Any]:
    """The ``runtime_env`` that ships ``path`` to every worker, without environments, caches and reports."""
    if not path.is_dir():
        raise ClusterError(f"--working-dir {path}: not a directory")
    if submitted_job_working_dir():
        raise ClusterError(
            "this driver runs in a job that already ships a working directory (ray job submit --working-dir); "
            "drop --working-dir"
        )
    return {"working_dir": str(path.resolve()), "excludes": list(WORKING_DIR_EXCLUDES)}


def submitted_job_working_dir() -> bool:
    """Whether this driver was started by ``ray job submit`` with a working directory of its own."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    raw = os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR)
    if not raw:
        return False
    try:
        runtime_env = json.loads(raw).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return False
    return bool(runtime_env.get("working_dir"))


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once when nothing listens at the cluster's address (``auto`` resolved as Ray does)."""
    if address.startswith("ray://"):
        host_port = address.removeprefix("ray://")
        host_port = host_port if ":" in host_port else host_port + ":10001"  # Ray Client's default port
    else:
        resolved = services.canonicalize_bootstrap_address(address)  # 'auto' without a cluster raises
        if resolved is None:
            raise ConnectionError(f"no Ray cluster found at {address!r}")
        host_port = resolved
    host, port = services.parse_address(host_port)
    with socket.create_connection((host, int(port)), timeout=timeout_s):
        pass


def describe(address: str | None = None, dead: Iterable[str] = ()) -> ClusterInfo:
    """The live nodes, and those of ``dead`` (node ids) that Ray still remembers."""
    keep = set(dead)
    nodes = []
    for n in ray.nodes():
        if not n.get("Alive") and n["NodeID"] not in keep:
            continue
        res = n.get("Resources", {})
        nodes.append(
            Node(
                node_id=n["NodeID"],
                hostname=n.get("NodeManagerHostname", ""),
                address=n.get("NodeManagerAddress", ""),
                cpus=int(res.get("CPU", 0)),
                gpus=int(res.get("GPU", 0)),
                gpu_models=sorted(k[len(ACCELERATOR_PREFIX) :] for k in res if k.startswith(ACCELERATOR_PREFIX)),
            )
        )
    return ClusterInfo(address=address, nodes=nodes)


def environment(cluster: ClusterInfo | None, results: Sequence[Result] = ()) -> Environment:
    """The driver's versions and the cluster's nodes, for the report.

    The nodes are those alive now and those that ran a result (an autoscaling cluster's GPU
    nodes may have joined after the sweep started, or left before it ended; a resumed run's
    earlier results may come from nodes gone since, described from what their workers
    recorded). Each node carries the torch and Triton versions its workers reported; nodes
    that disagree are named in ``warnings``.
    """
    nodes = list(cluster.nodes) if cluster else []
    if cluster is not None and ray.is_initialized():
        ran_on = {r.worker.node_id for r in results if r.worker and r.worker.node_id}
        nodes = describe(cluster.address, dead=ran_on).nodes
    nodes = with_versions(nodes, results)
    return Environment(
        python=platform.python_version(),
        torch=_installed("torch"),  # the driver never imports torch for this
        ray=ray.__version__,
        platform=platform.platform(),
        cluster_address=cluster.address if cluster else None,
        nodes=nodes,
        warnings=version_warnings(nodes),
    )


VERSION_KEYS = ("torch", "triton")  # what nodes must agree on for their results to compare


def with_versions(nodes: Sequence[Node], results: Sequence[Result]) -> list[Node]:
    """``nodes`` with the versions their workers reported, plus nodes known only from results."""
    reported: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    seen: dict[str, Result] = {}
    for r in results:
        if r.worker is None or not r.worker.node_id:
            continue
        seen.setdefault(r.worker.node_id, r)
        for key in VERSION_KEYS:
            if r.worker.versions.get(key):
                reported[r.worker.node_id][key].add(r.worker.versions[key])
    out = [n.model_copy() for n in nodes]
    known = {n.node_id for n in out}
    for node_id, r in seen.items():
        if node_id not in known and r.worker is not None:
            models = [r.worker.gpu_model] if r.worker.gpu_model else []
            out.append(Node(node_id=node_id, hostname=r.worker.hostname, address="", cpus=0, gpus=0, gpu_models=models))
    for n in out:
        n.versions = {key: ", ".join(sorted(v)) for key, v in sorted(reported.get(n.node_id, {}).items())}
    return out


def version_warnings(nodes: Sequence[Node]) -> list[str]:
    """One line per version key on which the nodes' workers disagree."""
    warnings = []
    for key in VERSION_KEYS:
        by_version: dict[str, list[str]] = defaultdict(list)
        for n in nodes:
            for version in filter(None, n.versions.get(key, "").split(", ")):
                by_version[version].append(n.hostname or n.node_id[:12])
        if len(by_version) > 1:
            listed = "; ".join(f"{v} on {', '.join(sorted(hosts))}" for v, hosts in sorted(by_version.items()))
            warnings.append(f"nodes disagree on the {key} version, so their results may not compare: {listed}")
    return warnings


def _installed(name: str) -> str:
    """The version of an installed distribution, from its metadata (nothing imported); "" if absent."""
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""
