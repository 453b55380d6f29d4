"""The report's data: a versioned JSON envelope of results and the summary derived from them.

Nothing here imports Ray or torch: a report can be read, rendered and compared anywhere.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from orchestrator.nodes import Node as Node  # the scheduler's too; listed in a report's environment
from tasks.models import Calibration, Phase, Precision, Result

SCHEMA_VERSION: Final = 2  # 2: summary by group and device model, pass rates; version 1 reports are upgraded on load


class Environment(BaseModel):
    python: str
    torch: str
    ray: str
    platform: str
    cluster_address: str | None = None
    nodes: list[Node] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)  # e.g. nodes that disagree on torch or Triton versions
    calibration: list[Calibration] = Field(default_factory=list)  # one entry per calibrated worker's device


class Ranked(BaseModel):
    """One configuration's valid timing inside a group."""

    experiment_id: str
    config: str
    speedup: float
    ci: tuple[float, float] | None = None  # the result's 95% bootstrap interval of the speedup


class Group(BaseModel):
    """Results that measure the same thing: one target, its params, device model, phase and precision.

    Only inside a group are configurations ranked against each other.
    """

    target: str
    params: dict[str, Any]
    device_model: str
    phase: Phase
    precision: Precision
    results: int  # results in the group, any status
    best: Ranked | None  # the highest speedup among valid timings; None when there is none
    runner_up: Ranked | None = None
    tie: bool = False  # the best's 95% interval overlaps the runner-up's: the ranking is within noise
    failed: dict[str, str] = Field(default_factory=dict)  # config -> status, for results that are not ok

    @property
    def label(self) -> str:
        return group_label(self.target, self.params, self.phase, self.precision)


class LeftOut(BaseModel):
    """A group kept out of a device model's geometric means, and why."""

    group: str
    reason: str


class GeoMean(BaseModel):
    """Geometric means of one configuration over a set of groups."""

    speedup: float
    ci: tuple[float, float]  # 95% interval from the results' own intervals (measurement noise)
    compile_latency_s: float | None = None  # over results whose caches served them alike (compile_cache)
    compile_cache: str | None = None  # how: "warm: hit", "cold: miss"; "warm: mixed" where they differed
    memory_ratio: float | None = None  # eager peak / compiled peak; None where no result measured memory
    n: int
    targets: list[str]


class ConfigSummary(BaseModel):
    """One configuration on one device model: how often it passed and how fast it was."""

    config: str
    results: int
    ok: int
    pass_rate: float  # ok / results
    counts: dict[str, int]  # statuses other than ok, with their number
    common: GeoMean | None = None  # over the device model's common set; None when that set is empty
    own: GeoMean | None = None  # over every group this configuration has a valid timing for


class DeviceSummary(BaseModel):
    """The configurations compared on one device model, over the same set of groups."""

    device_model: str
    configs: list[ConfigSummary]
    common: list[str]  # groups every configuration has a valid timing for: what the means are over
    left_out: list[LeftOut]  # the other groups, each with its reason


class Recompiled(BaseModel):
    experiment_id: str
    target: str
    config: str
    reasons: list[str]


class Summary(BaseModel):
    counts: dict[str, int]  # every status, zero included
    recompiled: list[Recompiled]  # compiled timings not trusted: kept out of bests and means
    groups: list[Group]
    devices: list[DeviceSummary]


class Report(BaseModel):
    schema_version: Literal[2] = SCHEMA_VERSION
    created_at: str
    name: str
    spec: dict[str, Any]
    environment: Environment
    results: list[Result]
    summary: Summary
    complete: bool = True  # False: the run was interrupted; experiments of the spec are missing


def group_label(target: str, params: dict[str, Any], phase: str = "inference", precision: str = "fp32") -> str:
    """``seed.foo3 shape=[4096, 4096]``, with phase and precision only where they are not the defaults."""
    parts = [target, *(f"{k}={v}" for k, v in params.items())]
    if phase != "inference":
        parts.append(phase)
    if precision != "fp32":
        parts.append(precision)
    return " ".join(parts)
