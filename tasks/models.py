"""The data that crosses between driver and worker: one experiment in, one result out.

Both sides validate with these models; what travels through Ray is their plain JSON
form (``model_dump(mode="json")``), never pydantic objects or exception objects.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Device = Literal["auto", "cuda", "cpu"]
Status = Literal["ok", "compile_error", "runtime_error", "incorrect"]
CompileMethod = Literal["torch_compile", "module_compile"]


class Closed(BaseModel):
    """A spec model that rejects unknown fields and cannot be changed once built."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class CompileConfig(Closed):
    """Arguments of ``torch.compile`` (or ``nn.Module.compile``) for one experiment."""

    backend: str = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    method: CompileMethod = "torch_compile"

    @field_validator("mode")
    @classmethod
    def _default_mode_is_none(cls, value: str | None) -> str | None:
        return None if value == "default" else value  # one spelling, one id, one label

    def label(self) -> str:
        """A short human name, unique per configuration: ``inductor:max-autotune+fullgraph``."""
        parts = [self.backend + (f":{self.mode}" if self.mode else "")]
        if self.fullgraph:
            parts.append("fullgraph")
        if self.dynamic is not None:
            parts.append("dynamic" if self.dynamic else "static")
        if self.method != "torch_compile":
            parts.append(self.method)
        if self.options:
            parts.append("options=" + _digest(self.options, 6))
        return "+".join(parts)


class TimingConfig(Closed):
    """How many untimed warmup calls precede how many timed ones, per side."""

    warmup: int = Field(default=3, ge=0)
    repeats: int = Field(default=10, ge=1)


class Resources(Closed):
    """What one experiment reserves on its node. ``None`` means: derive from the device."""

    gpus: int | None = Field(default=None, ge=0)
    cpus: int | None = Field(default=None, ge=1)


class Experiment(Closed):
    """One fully resolved experiment: a target, its inputs and one compile configuration."""

    target: str
    params: dict[str, Any] = Field(default_factory=dict)
    device: Device = "auto"
    resources: Resources = Field(default_factory=Resources)
    compile: CompileConfig = Field(default_factory=CompileConfig)
    timing: TimingConfig = Field(default_factory=TimingConfig)
    seed: int = 0

    @field_validator("target")
    @classmethod
    def _target_syntax(cls, value: str) -> str:
        if not value or value != value.strip():
            raise ValueError("must be a built-in target name or 'package.module:factory'")
        if ":" in value:
            module, _, attr = value.partition(":")
            if not module or not attr or not all(p.isidentifier() for p in module.split(".")):
                raise ValueError(f"'{value}' is not an import path of the form 'package.module:factory'")
        return value

    @property
    def id(self) -> str:
        """Stable identity: a hash of the canonical fields (same spec, same id, on any machine)."""
        return _digest(self.model_dump(mode="json"), 12)


class ErrorInfo(BaseModel):
    """An exception reduced to plain strings, so it survives any process boundary."""

    type: str
    message: str

    @classmethod
    def from_exception(cls, exc: BaseException, limit: int = 4000) -> ErrorInfo:
        kind = type(exc)
        return cls(type=f"{kind.__module__}.{kind.__qualname__}", message=str(exc)[:limit])


class SideTiming(BaseModel):
    """Raw timings of one side (eager or compiled); statistics are derived from ``samples_ms``."""

    first_call_ms: float
    median_ms: float
    min_ms: float
    samples_ms: list[float]
    peak_memory_bytes: int | None = None


class WorkerInfo(BaseModel):
    """Where an experiment ran: which host, process, GPU and how many CPU threads."""

    hostname: str
    node_id: str | None = None
    pid: int
    gpu_ids: list[str] = Field(default_factory=list)
    gpu_name: str | None = None
    cpu_model: str | None = None
    threads: int


class Result(BaseModel):
    """What one experiment produced, success or failure."""

    experiment_id: str
    target: str
    params: dict[str, Any]
    device: Literal["cuda", "cpu"] | None
    compile: CompileConfig
    timing: TimingConfig
    seed: int
    status: Status
    error: ErrorInfo | None = None
    eager: SideTiming | None = None
    compiled: SideTiming | None = None
    compile_latency_s: float | None = None
    speedup: float | None = None
    graph_count: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = Field(default_factory=list)
    correct: bool | None = None
    started_at: float
    finished_at: float
    worker: WorkerInfo | None = None

    @property
    def config_label(self) -> str:
        return self.compile.label()


def _digest(data: Any, length: int) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]
