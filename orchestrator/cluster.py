"""Connecting to Ray and describing the cluster: nodes, CPUs, GPUs and their models."""

from __future__ import annotations

import logging
import os
import platform
import socket

import ray
from pydantic import BaseModel
from ray._private import services

from orchestrator.report.models import Environment, Node

ACCELERATOR_PREFIX = "accelerator_type:"  # Ray's resource naming a node's GPU model


class ClusterError(RuntimeError):
    """The cluster could not be reached or started."""


class ClusterInfo(BaseModel):
    address: str | None
    nodes: list[Node]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def max_gpus_per_node(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    @property
    def max_cpus_per_node(self) -> int:
        return max((n.cpus for n in self.nodes), default=0)

    @property
    def min_cpus_per_node(self) -> int:
        return min((n.cpus for n in self.nodes if n.cpus), default=1)


def connect(address: str | None = None, num_gpus: int | None = None, num_cpus: int | None = None) -> ClusterInfo:
    """Join the cluster at ``address`` (``auto``, ``host:port``, ``ray://…``) or start a local one.

    A local instance may declare ``num_gpus`` logical GPUs, so that scheduling can be
    exercised on a machine without any. If Ray is already initialised in this process,
    that instance is used as it is.
    """
    if not ray.is_initialized():
        if address and (num_gpus is not None or num_cpus is not None):
            raise ClusterError("--num-gpus/--num-cpus describe a local instance; they cannot be used with --address")
        kwargs = {"address": address} if address else {"num_gpus": num_gpus, "num_cpus": num_cpus or os.cpu_count()}
        try:
            if address:
                check_reachable(address)
            ray.init(**kwargs, logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False)
        except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError… depending on the address
            where = f"Ray cluster at {address!r}" if address else "a local Ray instance"
            raise ClusterError(
                f"could not connect to {where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from e
    return describe(address)


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


def describe(address: str | None = None) -> ClusterInfo:
    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
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


def environment(cluster: ClusterInfo | None) -> Environment:
    """The driver's versions and the cluster's nodes, for the report."""
    import torch

    return Environment(
        python=platform.python_version(),
        torch=torch.__version__,
        ray=ray.__version__,
        platform=platform.platform(),
        cluster_address=cluster.address if cluster else None,
        nodes=cluster.nodes if cluster else [],
    )
