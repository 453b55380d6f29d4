"""A node of the cluster and the environment of a run, as the driver sees them: plain data, no Ray.

The scheduling policy places workers on nodes, ``orchestrator.execution.cluster`` builds both from
``ray.nodes()`` and the workers' results, and a report holds the environment
(``orchestrator.report.models`` re-exports ``Node`` and ``Environment``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tasks.models import Calibration


class Node(BaseModel):
    """One node: its CPUs and GPUs (what Ray says it holds) and the GPU models it advertises."""

    node_id: str
    hostname: str
    address: str
    cpus: int
    gpus: int
    gpu_models: list[str]
    versions: dict[str, str] = Field(default_factory=dict)  # torch, triton: as this node's workers reported them


class Environment(BaseModel):
    """Where a run ran: versions, the Ray cluster and its nodes, version warnings, calibrated devices."""

    python: str
    torch: str
    ray: str
    platform: str
    cluster_address: str | None = None
    nodes: list[Node] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)  # e.g. nodes that disagree on torch or Triton versions
    calibration: list[Calibration] = Field(default_factory=list)  # one entry per calibrated worker's device
