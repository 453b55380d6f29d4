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
CacheState = Literal["cold", "warm"]


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
    cache: CacheState = "warm"

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
        if self.cache == "cold":
            parts.append("cold")
        return "+".join(parts)

    @property
    def cudagraphs(self) -> bool:
        """Whether inductor will record CUDA graphs (``reduce-overhead``, ``max-autotune``)."""
        if self.backend == "cudagraphs":
            return True
        if self.backend != "inductor":
            return False
        return self.mode in ("reduce-overhead", "max-autotune") or bool(self.options.get("triton.cudagraphs"))


class TimingConfig(Closed):
    """How many untimed warmup calls precede how many timed samples, per side.

    ``warmup_ms``/``repeats_ms`` are budgets that, when given, replace the counts: as many
    calls as fit, from an estimate of one call (as Triton's ``do_bench`` does).
    ``flush_l2`` zeroes a buffer larger than L2 before each timed CUDA call.
    """

    warmup: int = Field(default=3, ge=0)
    repeats: int = Field(default=10, ge=1)
    warmup_ms: float | None = Field(default=None, gt=0)
    repeats_ms: float | None = Field(default=None, gt=0)
    flush_l2: bool = False


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
        """Stable identity: a hash of the fields that differ from their defaults (same spec, same id,
        on any machine; a field added later with a default leaves existing ids as they were)."""
        return _digest(self.model_dump(mode="json", exclude_defaults=True), 12)


class ErrorInfo(BaseModel):
    """An exception reduced to plain strings, so it survives any process boundary."""

    type: str
    message: str

    @classmethod
    def from_exception(cls, exc: BaseException, limit: int = 4000) -> ErrorInfo:
        kind = type(exc)
        return cls(type=f"{kind.__module__}.{kind.__qualname__}", message=str(exc)[:limit])


class SampleStats(BaseModel):
    """What ``tasks.stats.describe`` derives from a list of samples."""

    median_ms: float
    min_ms: float
    mean_ms: float
    iqr_ms: float
    n: int
    noisy: bool


class SideTiming(SampleStats):
    """Raw timings of one side (eager or compiled) and how they were taken.

    ``samples_ms`` are per-call times (a block's time divided by ``block_size``); the
    statistics are derived from them by ``tasks.stats.describe``, never measured apart.
    """

    first_call_ms: float
    samples_ms: list[float]
    warmup: int
    block_size: int = 1
    peak_memory_bytes: int | None = None

    @classmethod
    def from_samples(
        cls, first_call_ms: float, samples_ms: list[float], warmup: int, block_size: int = 1, **extra: Any
    ) -> SideTiming:
        from tasks.stats import describe

        return cls(
            first_call_ms=first_call_ms,
            samples_ms=samples_ms,
            warmup=warmup,
            block_size=block_size,
            **describe(samples_ms).model_dump(),
            **extra,
        )


class GpuState(BaseModel):
    """What NVML says about the GPU at one moment: the conditions a timer cannot control."""

    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None


class Measurement(BaseModel):
    """How the numbers of a result were taken, and what the timer could not control."""

    timer: Literal["perf_counter", "cuda_events"]
    interleaved: bool = True
    flush_l2: bool = False
    cudagraphs: bool = False
    cache: CacheState = "warm"
    cache_dir: str | None = None
    fresh_process: bool = False  # no experiment ran in this process before: nothing compiled in memory
    cores: list[int] = Field(default_factory=list)
    exclusive_cores: bool = False
    compile_threads: int | None = None
    allocator: str | None = None  # how the C allocator was set for timing, if it was
    gpu_before: GpuState | None = None
    gpu_after: GpuState | None = None


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
    speedup_ci: tuple[float, float] | None = None
    memory_ratio: float | None = None  # eager peak / compiled peak (PyTorch's "compression ratio")
    compile_breakdown: dict[str, float] = Field(default_factory=dict)  # seconds, where torch reports them
    graphs_compiled: int | None = None
    recompiled: bool = False
    recompile_reasons: list[str] = Field(default_factory=list)
    graph_count: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = Field(default_factory=list)
    correct: bool | None = None
    started_at: float
    finished_at: float
    worker: WorkerInfo | None = None
    measurement: Measurement | None = None

    @property
    def config_label(self) -> str:
        return self.compile.label()


def _digest(data: Any, length: int) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]
