"""A node of the cluster as the driver sees it: plain data, no Ray.

The scheduling policy places workers on these, ``orchestrator.cluster`` builds them from
``ray.nodes()``, and the report lists them (``orchestrator.report.models`` re-exports ``Node``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Node(BaseModel):
    """One node: its CPUs and GPUs (what Ray says it holds) and the GPU models it advertises."""

    node_id: str
    hostname: str
    address: str
    cpus: int
    gpus: int
    gpu_models: list[str]
    versions: dict[str, str] = Field(default_factory=dict)  # torch, triton: as this node's workers reported them
