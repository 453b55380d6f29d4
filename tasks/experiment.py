"""What an experiment is made of: the spec-side models the driver builds and the worker is given.

``Experiment`` is one fully resolved experiment (a target, its inputs, one compile configuration),
with the configs it nests (``CompileConfig``, ``TimingConfig``, ``CheckConfig``, ``Resources``,
``WorkerLimits``, ``ReplayConfig``, ``DecisionConfig``) and the choices they take (``Literal`` types).
Every model is closed and frozen, so an experiment is hashable and its id a digest of its fields.

The inputs half of the data that crosses between driver and worker (``tasks.result`` is the
outputs half, and may import this module; this one imports only ``tasks.lean``, their models' base). What travels
through Ray is their plain JSON form (``model_dump(mode="json")``), never pydantic objects.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, Final, Literal, Self

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from tasks.ids import canonical_dump, digest, text_digest
from tasks.lean import Lean, shared_default

Device = Literal["auto", "cuda", "cpu"]
CompileMethod = Literal["torch_compile", "module_compile"]
CacheState = Literal["cold", "warm", "shared"]
FRESH_PROCESS_CACHES: tuple[CacheState, ...] = ("cold", "shared")  # run in a fresh process, empty cache dirs
CompileScope = Literal["model", "step"]
Phase = Literal["inference", "training"]
Precision = Literal["fp32", "tf32", "bf16", "fp16", "amp_bf16", "amp_fp16"]
Optimizer = Literal["sgd", "adamw"]
TimingMethod = Literal["wall", "events"]
AllocatorSetting = Literal["steady", "system"]
CheckReference = Literal["fp64", "eager"]
Strategy = Literal["ddp", "fsdp2"]
OptimizeDDP = Literal["ddp_optimizer", "python_reducer", "off"]
FsdpCompileScope = Literal["block", "model"]
BatchScope = Literal["global", "per_rank"]


class Closed(Lean):
    """A spec model that rejects unknown fields and cannot be changed once built."""

    model_config = ConfigDict(frozen=True)  # and, as every Lean model, closed: an unknown field is an error

    def __eq__(self, other: object) -> bool:
        """Itself without comparing a field: an experiment that leaves a part out holds the one shared default
        (``shared_default``), and ``Experiment.id`` compares every part with its default (400,000 comparisons for
        100,000 experiments). Another of the same class: closed (no extra fields) and without private attributes,
        so its fields are its ``__dict__`` less what is no field (a cached property): pydantic's own comparison
        without its checks for generics, extras and private attributes, half its time."""
        if other is self:
            return True
        if type(other) is type(self) and not self.__private_attributes__:
            mine, theirs = self.__dict__, other.__dict__
            if mine == theirs:
                return True
            fields = type(self).__pydantic_fields__.keys()
            if mine.keys() <= fields and theirs.keys() <= fields:
                return False
        return super().__eq__(other)


class CompileConfig(Closed):
    """Arguments of ``torch.compile`` (or ``nn.Module.compile``) for one experiment."""

    backend: str = Field(
        default="inductor", description="torch.compile backend: inductor, aot_eager, eager, cudagraphs, ..."
    )
    mode: str | None = Field(
        default=None,
        description="inductor mode: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs, lite",
    )
    fullgraph: bool = Field(default=False, description="fail on any graph break instead of splitting the graph")
    dynamic: bool | None = Field(
        default=None, description="dynamic shapes: true, false (static), or null (torch decides on a recompile)"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="inductor config passed as torch.compile(options=...); not with mode"
    )
    method: CompileMethod = Field(
        default="torch_compile",
        description="'torch_compile': torch.compile(target); 'module_compile': module.compile() in place",
    )
    cache: CacheState = Field(
        default="warm",
        description="'warm': primed: the same compile runs once first, then in-memory caches are cleared, so the "
        "measured compile loads its artifacts from the on-disk caches; 'cold': a fresh process and empty "
        "inductor/Triton caches, for a true cold-start compile latency (misses only); 'shared': as cold, but "
        "first loading the artifacts stored for this compile in the run's shared cache (run --compile-cache) "
        "and storing what it produced there, so that a compile done once on any node serves every other",
    )
    scope: CompileScope = Field(
        default="model",
        description="'model': compile the target (a training step runs loss, backward and optimizer eagerly "
        "around it); 'step': compile the whole step (forward, loss, backward, optimizer)",
    )
    mark_dynamic: list[tuple[int, int]] = Field(
        default_factory=list,
        description="[input_index, dim] pairs: torch._dynamo.mark_dynamic(inputs[input_index], dim) before the "
        "compiled calls of a replay, so that the dimension is compiled dynamic from the first call",
    )

    @field_validator("mark_dynamic")
    @classmethod
    def _pairs_are_indices(cls, value: list[tuple[int, int]]) -> list[tuple[int, int]]:
        negative = [list(pair) for pair in value if min(pair) < 0]
        if negative:
            raise ValueError(f"[input_index, dim] pairs are counted from 0, got {negative[0]}")
        if len(set(value)) < len(value):
            raise ValueError("a [input_index, dim] pair is given twice")
        return value

    @field_validator("mode")
    @classmethod
    def _default_mode_is_none(cls, value: str | None) -> str | None:
        return None if value == "default" else value  # one spelling, one id, one label

    def label(self, cache: CacheState | None = None) -> str:
        """A short human name, unique per configuration: ``inductor:max-autotune+fullgraph``; with ``cache``,
        the name of this configuration compiled with that cache state instead (a warm one's cold twin)."""
        parts = [self.backend + (f":{self.mode}" if self.mode else "")]
        if self.fullgraph:
            parts.append("fullgraph")
        if self.dynamic is not None:
            parts.append("dynamic" if self.dynamic else "static")
        if self.method != "torch_compile":
            parts.append(self.method)
        if self.scope != "model":
            parts.append(f"scope={self.scope}")
        if self.options:
            parts.append("options=" + digest(self.options, 6))
        if self.mark_dynamic:
            parts.append("mark_dynamic=" + ",".join(f"{i}:{d}" for i, d in self.mark_dynamic))
        state = cache or self.cache
        if state != "warm":
            parts.append(state)
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

    ``warmup_ms``/``repeats_ms`` are budgets that replace the counts: as many calls as fit,
    from an estimate of one call (as Triton's ``do_bench`` does); a count and a budget for the
    same thing together are an error. Neither given: by device (``tasks.timers.plan``): 3 and
    10 on the CPU, do_bench's 25 ms and 100 ms (at least 10 samples) on CUDA.
    ``flush_l2`` zeroes a buffer larger than L2 before each timed CUDA call.
    """

    warmup: int | None = Field(default=None, ge=0, description="None: by device (3 on the CPU, 25 ms on CUDA)")
    repeats: int | None = Field(default=None, ge=1, description="None: by device (10 on the CPU, 100 ms on CUDA)")
    warmup_ms: float | None = Field(default=None, gt=0, description="warmup time budget per side, in ms")
    repeats_ms: float | None = Field(default=None, gt=0, description="timing budget per side, in ms")
    flush_l2: bool = Field(default=False, description="CUDA: zero a buffer larger than L2 before each timed call")
    method: TimingMethod | None = Field(
        default=None,
        description="CUDA only: 'wall' (perf_counter between two synchronisations: what a user waits for, "
        "host overhead included; the default) or 'events' (device time between CUDA events).",
    )
    allocator: AllocatorSetting = Field(
        default="steady",
        description="'steady': glibc's malloc held to heap-only, never trimmed, in scheduled workers; "
        "'system': left as the C library sets it.",
    )

    @field_validator("warmup_ms", "repeats_ms")
    @classmethod
    def _count_or_budget(cls, value: float | None, info: ValidationInfo) -> float | None:
        count = info.field_name.removesuffix("_ms") if info.field_name else ""
        if value is not None and info.data.get(count) is not None:
            raise ValueError(f"cannot be combined with timing.{count} (give a count or a time budget, not both)")
        return value


class CheckConfig(Closed):
    """How the compiled side's outputs (and, in training, gradients) are judged against eager."""

    enabled: bool = Field(default=True, description="compare the compiled outputs with the reference")
    rtol: float | None = Field(default=None, ge=0, description="None: the default for the output's dtype")
    atol: float | None = Field(default=None, ge=0, description="None: the default for the output's dtype")
    reference: CheckReference = Field(
        default="fp64",
        description="'fp64': judge both sides against a float64 run of the eager target (as PyTorch's "
        "dynamo harness does); 'eager': compare compiled with eager directly.",
    )


class Resources(Closed):
    """What one experiment reserves on its node. ``None`` means: derive from the device."""

    gpus: int | None = Field(default=None, ge=0, description="GPUs to reserve; None: one for a GPU experiment")
    cpus: int | None = Field(
        default=None, ge=1, description="CPU cores to reserve; None: derived from the device (all of a node for CPU)"
    )


DEFAULT_MAX_EXPERIMENTS = 200  # per worker process: see WorkerLimits for the measurement behind it
DEFAULT_MAX_RSS_GROWTH_MB = 4096.0  # MiB a worker may gain since it started: ditto


class WorkerLimits(Closed):
    """When a long-lived worker is replaced by a fresh process, after the experiment that crossed a limit.

    A process that ran many experiments keeps what ``reset`` cannot give back: inductor's
    generated modules in ``sys.modules`` (frozen out of garbage collection), allocator arenas,
    cuDNN's autotuner cache. Measured on a 2-core CPU machine with torch 2.13
    (``python benchmarks/worker_growth.py -n 300 -k 25``: the tutorial's six targets compiled
    by inductor, each with a shape of its own, one after another on one worker): the first 25
    experiments add 147 MiB and 875 modules (imports every later experiment uses); after them
    each adds 0.95 MiB, 2.3 modules and 1,400 frozen objects, linearly, while the reset stays
    at 3-7 ms and experiments take no longer. A replacement (a new process, its ``Worker``, and
    the first experiment's extra cost) took 11 s, against a median experiment of 1.2 s.

    So ``max_experiments`` defaults to 200, the smallest count at which replacements cost under
    5% of the time of the tutorial's small experiments (4.5%; 9% at 100, 36% at 25); by then a
    worker carries about 170 MiB and 400 modules beyond its warm-up. ``max_rss_growth_mb``
    defaults to 4096 MiB, over ten times what a worker gained in 200 such experiments (316 MiB,
    warm-up included): it catches a leak, not ordinary use. (The heap an experiment freed is given
    back to the system at each reset, ``tasks.isolation.trim_heap``, so it does not count.)
    """

    max_experiments: int | None = Field(
        default=None,
        ge=1,
        description=f"experiments a worker runs in its own process before it is replaced; None: the run's "
        f"setting (compilebench run --worker-max-experiments), else {DEFAULT_MAX_EXPERIMENTS}",
    )
    max_rss_growth_mb: float | None = Field(
        default=None,
        gt=0,
        description=f"MiB of resident memory a worker may gain since it started before it is replaced; None: "
        f"the run's setting (compilebench run --worker-max-rss-growth-mb), else {DEFAULT_MAX_RSS_GROWTH_MB:g}",
    )


class ReplayConfig(Closed):
    """Shape traffic to replay (``tasks.replay``): ``calls`` calls drawn, with the experiment's seed, from
    the target built at each of ``values`` of its parameter ``param``, value i with probability
    ``weights[i] / sum(weights)`` (uniform when ``weights`` is None)."""

    param: str = Field(description="the target's parameter whose values the calls vary (e.g. 'seq')")
    values: list[Any] = Field(min_length=1, description="the parameter's values, one build of the target each")
    weights: list[float] | None = Field(
        default=None, description="relative frequency of each value in the traffic, all > 0; None: uniform"
    )
    calls: int = Field(ge=1, description="calls in the replayed sequence")

    @field_validator("values")
    @classmethod
    def _distinct_values(cls, value: list[Any]) -> list[Any]:
        seen = [json.dumps(v, sort_keys=True, default=str) for v in value]
        repeated = next((v for v, key in zip(value, seen, strict=True) if seen.count(key) > 1), None)
        if repeated is not None:
            raise ValueError(f"{repeated!r} is given twice (weigh a value with weights, not by repeating it)")
        return value

    @field_validator("weights")
    @classmethod
    def _one_positive_weight_per_value(cls, value: list[float] | None, info: ValidationInfo) -> list[float] | None:
        if value is None:
            return value
        values = info.data.get("values")
        if values is not None and len(value) != len(values):
            raise ValueError(f"{len(value)} weights for {len(values)} values (give one weight per value)")
        bad = [w for w in value if not 0 < w < float("inf")]
        if bad:
            raise ValueError(f"every weight must be a finite number > 0, got {bad[0]!r}")
        return value


class DecisionConfig(Closed):
    """How the summary decides what to ship for a group (``orchestrator.report.decision``).

    Without it, the configuration with the highest lower 95% bound of speedup, if that bound exceeds
    1.0. With ``calls``, the one that serves that many calls in the least time, its compile included
    (compile + calls x per-call time, against eager's calls x per-call time).
    """

    calls: int = Field(
        ge=1,
        description="calls the compiled program will serve (per process, per compile): the recommendation "
        "minimises compile + calls x per-call time, so a configuration whose compile does not pay for itself "
        "within this many calls is not recommended",
    )


DDP_ONLY = ("optimize_ddp", "bucket_cap_mb")  # DistributedConfig fields that belong to one strategy only
FSDP2_ONLY = ("compile_per", "reshard_after_forward")


class DistributedConfig(Closed):
    """A training step across ``world_size`` ranks of one node: one process per GPU (or per core set on
    the CPU), gang-scheduled together, ``torch.distributed`` over NCCL on CUDA and gloo on the CPU.

    ``ddp``: the target wrapped in ``DistributedDataParallel``, then compiled; Dynamo's
    ``optimize_ddp`` says how compile meets DDP's buckets. ``fsdp2``: ``fully_shard`` per block
    and then the whole model, compiled per block first (torchtitan's order) or as a whole.
    Options of the other strategy are an error; None means the strategy's default.
    """

    strategy: Strategy = Field(description="'ddp' (DistributedDataParallel) or 'fsdp2' (fully_shard)")
    world_size: int = Field(ge=1, description="ranks, one process and one GPU (or core set) each, on one node")
    optimize_ddp: OptimizeDDP | None = Field(
        default=None,
        description="ddp only: torch._dynamo.config.optimize_ddp: 'ddp_optimizer' (graphs split at bucket "
        "boundaries; the default), 'python_reducer' (compiled autograd traces DDP's reducer), 'off'",
    )
    compile_per: FsdpCompileScope | None = Field(
        default=None,
        description="fsdp2 only: 'block' (torch.compile each block, then fully_shard it; torchtitan's way; the "
        "default) or 'model' (fully_shard the blocks and the model, then compile the whole model)",
    )
    reshard_after_forward: bool | None = Field(
        default=None, description="fsdp2 only: free the gathered parameters after forward (None: true)"
    )
    compiled_autograd: bool = Field(
        default=False, description="trace the backward with compiled autograd (torch._dynamo.config.compiled_autograd)"
    )
    bucket_cap_mb: float | None = Field(
        default=None,
        gt=0,
        description="ddp only: MiB per gradient bucket (DDP's bucket_cap_mb; None: 25); DDPOptimizer splits the "
        "compiled graph at these buckets. FSDP2 has no buckets: it communicates per sharded block",
    )
    batch: BatchScope = Field(
        default="global",
        description="'global': the target's batch is the whole gang's, each rank takes its 1/world_size shard "
        "(it must divide); 'per_rank': each rank runs the target's batch as given",
    )

    @model_validator(mode="after")
    def _options_of_the_strategy(self) -> DistributedConfig:
        other = FSDP2_ONLY if self.strategy == "ddp" else DDP_ONLY
        given = [name for name in other if getattr(self, name) is not None]
        if given:
            owner = "fsdp2" if self.strategy == "ddp" else "ddp"
            raise ValueError(f"{given[0]} is an option of strategy {owner}, not of {self.strategy}")
        python_reducer = self.optimize_ddp == "python_reducer"
        if self.strategy == "ddp" and python_reducer != self.compiled_autograd:
            raise ValueError(  # torch 2.13 refuses compiled autograd with DDP's C++ reducer, and the other way round
                "optimize_ddp 'python_reducer' and compiled_autograd: true go together (compiled autograd traces "
                "DDP's Python reducer; DDP's C++ reducer cannot run under it)"
            )
        return self

    def label(self) -> str:
        """A short human name: ``ddp x2``, ``fsdp2 x4+per_model``."""
        parts = [f"{self.strategy} x{self.world_size}"]
        for name in (*DDP_ONLY, *FSDP2_ONLY):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value}")
        if self.compiled_autograd:
            parts.append("compiled_autograd")
        if self.batch != "global":
            parts.append(self.batch)
        return "+".join(parts)


class Experiment(Closed):
    """One fully resolved experiment: a target, its inputs and one compile configuration."""

    target: str = Field(
        description="a built-in target (`compilebench tasks` lists them) or 'package.module:factory' for your own"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the target's factory")
    device: Device = Field(
        default="auto", description="'auto': CUDA where the worker has a GPU, else the CPU; or 'cuda', 'cpu'"
    )
    resources: Resources = Field(
        default_factory=shared_default(Resources), description="what the experiment reserves on its node"
    )
    compile: CompileConfig = Field(
        default_factory=shared_default(CompileConfig), description="arguments of torch.compile"
    )
    timing: TimingConfig = Field(
        default_factory=shared_default(TimingConfig), description="warmup and timed calls per side"
    )
    seed: int = Field(default=0, description="seeds torch's RNG before the target's factory runs")
    phase: Phase = Field(
        default="inference", description="'inference': forward only; 'training': forward, backward (and optimizer)"
    )
    precision: Precision = Field(
        default="fp32", description="fp32, tf32, bf16, fp16 (the target cast), or amp_bf16/amp_fp16 (autocast)"
    )
    optimizer: Optimizer | None = Field(default=None, description="training only: an optimizer step after backward")
    check: CheckConfig = Field(
        default_factory=shared_default(CheckConfig), description="how compiled outputs are judged correct"
    )
    timeout_s: float = Field(default=1800.0, gt=0, description="seconds for the whole experiment, compile included")
    retries: int = Field(default=1, ge=0, description="re-runs on a fresh worker after the worker process died")
    worker: WorkerLimits = Field(
        default_factory=shared_default(WorkerLimits),
        description="when the worker that ran this experiment is replaced by a fresh process after it",
    )
    gpu_model: str | None = Field(
        default=None,
        description="the GPU model to run on (a node's accelerator_type); None: any GPU. A spec's "
        "'gpu_models' list (or 'all') expands into one experiment per model.",
    )
    replicates: int = Field(
        default=1,
        ge=1,
        description="how many times the experiment runs, each time in another worker process (on another GPU of "
        "the same model where one is free): the between-run spread the summary and compare judge by",
    )
    replay: ReplayConfig | None = Field(
        default=None,
        description="replay shape traffic instead of timing one shape: calls drawn from weighted values of a "
        "parameter, served eagerly and compiled from the first call, compiles and recompiles included",
    )
    decision: DecisionConfig | None = Field(
        default=None,
        description="how the summary decides what to ship: {calls: N} weighs the compile against N calls; "
        "None: the highest lower 95% bound of speedup. Not part of the experiment's id (it measures the same)",
    )
    trace: bool = Field(
        default=False,
        description="record torch's structured compile trace (what TORCH_TRACE writes, read by tlparse) of the "
        "measured compile, stored beside the report in REPORT.traces/<id>-r<replicate>/ with tlparse's HTML where "
        "tlparse is installed. The trace is written while the compile runs: a traced run's compile latency "
        "includes its cost. Not part of the experiment's id (it measures the same compile)",
    )

    distributed: DistributedConfig | None = Field(
        default=None,
        description="train across ranks of one node: {strategy: ddp|fsdp2, world_size: k, ...}; None: one process",
    )

    @model_validator(mode="after")
    def _distributed_trains(self) -> Experiment:
        if self.distributed is not None and self.phase != "training":
            raise ValueError(
                f"distributed.strategy {self.distributed.strategy} needs phase: training (got phase: {self.phase})"
            )
        return self

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

    @functools.cached_property
    def id(self) -> str:
        """Stable identity: a hash of the fields that differ from their defaults (same spec, same id,
        on any machine; a field added later with a default leaves existing ids as they were). When a
        worker is replaced (``worker``) is how it ran, not what it measures, and every replicate of an
        experiment measures the same thing (``replicates``); how its result is weighed (``decision``)
        and whether its compile is traced (``trace``) do not change what it measures either: none of them
        is part of the id. The text hashed is pydantic's ``model_dump(mode="json", exclude_defaults=True)``
        less those fields, as canonical JSON, put together by ``tasks.ids`` (each shared part dumped once).
        Worked out once: the experiment is frozen, and ``model_copy`` works it out again for the copy."""
        return text_digest(canonical_dump(self, _NOT_IN_ID), 12)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (with ``update``'s fields changed), its ``id`` not carried over."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("id", None)
        return copied


_NOT_IN_ID: Final = frozenset({"worker", "replicates", "decision", "trace"})  # how it runs, not what it measures
