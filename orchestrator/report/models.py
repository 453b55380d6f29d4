"""The report's data: a versioned JSON envelope of results and the summary derived from them.

Nothing here imports Ray or torch: a report can be read, rendered and compared anywhere.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from tasks.models import Result

SCHEMA_VERSION: Final = 1


class Node(BaseModel):
    node_id: str
    hostname: str
    address: str
    cpus: int
    gpus: int
    gpu_models: list[str]


class Environment(BaseModel):
    python: str
    torch: str
    ray: str
    platform: str
    cluster_address: str | None = None
    nodes: list[Node] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)  # e.g. nodes that disagree on torch or Triton versions


class Best(BaseModel):
    experiment_id: str
    config: str
    params: dict[str, Any]
    speedup: float


class GeoMean(BaseModel):
    speedup: float
    ci: tuple[float, float]  # 95% bootstrap interval over every result's raw samples
    n: int
    targets: list[str]


class Recompiled(BaseModel):
    experiment_id: str
    target: str
    config: str
    reasons: list[str]


class Summary(BaseModel):
    counts: dict[str, int]
    recompiled: list[Recompiled]  # compiled timings not trusted: kept out of bests and means
    best_by_target: dict[str, Best]
    geomean_by_config: dict[str, GeoMean]
    geomean_by_device_model: dict[str, dict[str, GeoMean]]


class Report(BaseModel):
    schema_version: Literal[1] = SCHEMA_VERSION
    created_at: str
    name: str
    spec: dict[str, Any]
    environment: Environment
    results: list[Result]
    summary: Summary
    complete: bool = True  # False: the run was interrupted; experiments of the spec are missing
