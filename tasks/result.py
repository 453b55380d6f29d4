"""What comes back from an experiment: its status, its raw timings and how they were taken, where it ran.

``Result`` is what one experiment produced, success or failure; each of its parts is a model of its
own, read one by one: the failure (``ErrorInfo``), each side's samples (``SideTiming``), how they
were taken (``Measurement``, ``GpuState``), the worker and its device's probe (``WorkerInfo``,
``Calibration``), the correctness check (``CheckInfo``), the compile caches and trace
(``CompileCache``, ``TraceInfo``), the work of a call (``WorkInfo``) and a replay of shape traffic
(``ReplayResult``, ``ShapeTiming``). They reject unknown fields, so a misspelt one is an error.

The outputs half of the data that crosses between driver and worker: it imports only
``tasks.experiment`` (a result copies the experiment it is the result of: ``result_identity``).
What travels through Ray is their plain JSON form, never pydantic or exception objects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tasks.experiment import (
    BatchScope,
    CacheState,
    CompileConfig,
    DecisionConfig,
    DistributedConfig,
    Experiment,
    Phase,
    Precision,
    ReplayConfig,
    Resources,
    TimingConfig,
)
from tasks.lean import Lean

Status = Literal[
    "ok",  # timed, and correct (or not checkable: ``correct`` is then None)
    "compile_error",  # the first compiled call raised
    "runtime_error",  # the target, its inputs or the eager side raised; or the device cannot run it
    "incorrect",  # compiled output failed the correctness check; still timed
    "timeout",  # passed ``timeout_s``; its worker was killed and replaced
    "crashed",  # the worker process died, or its node was lost, on every attempt
    "oom",  # torch.OutOfMemoryError anywhere in the experiment; not retried
    "unschedulable",  # no node of the cluster can ever hold the reservation
]


class ErrorInfo(Lean):
    """An exception reduced to plain strings, so it survives any process boundary."""

    type: str
    message: str

    @classmethod
    def from_exception(cls, exc: BaseException, limit: int = 4000) -> ErrorInfo:
        kind = type(exc)
        return cls(type=f"{kind.__module__}.{kind.__qualname__}", message=str(exc)[:limit])


class SampleStats(Lean):
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
    ``device_samples_ms`` (CUDA) are the device times of the same calls, from events inside
    the synchronised window; ``host_bound`` when wall time exceeds device time by over 20%.
    """

    first_call_ms: float
    samples_ms: list[float]
    warmup: int
    block_size: int = 1
    peak_memory_bytes: int | None = None
    device_samples_ms: list[float] | None = None
    host_bound: bool | None = None


class GpuState(Lean):
    """What NVML says about the GPU at one moment: the conditions a timer cannot control."""

    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None


class Measurement(Lean):
    """How the numbers of a result were taken, and what the timer could not control."""

    timer: Literal["perf_counter", "cuda_events", "wall"]
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
    cudagraphs_used: bool | None = None  # reduce-overhead: whether inductor really replayed CUDA graphs
    cudagraph_skips: list[str] = Field(default_factory=list)  # why inductor skipped them, if it did
    inputs_mutated: bool = False  # the target mutates its inputs: fresh copies before each call, untimed
    # the measuring thread's scheduling niceness: Ray starts its workers at 15 unless its config says otherwise
    # (``worker_niceness``), and such a worker gets about 1/30 of a core that a process at 0 also wants
    niceness: int | None = None


class Calibration(Lean):
    """What one worker's device measured on a fixed probe before its first experiment (``run --calibrate``).

    On a GPU: a GEMM's TFLOP/s in fp32 and bf16 and a device-to-device copy's GB/s, timed with
    CUDA events (``figures``: ``fp32_tflops``, ``bf16_tflops``, ``copy_gbps``), with NVML's clocks,
    temperature and throttle reasons where available (``conditions``). On a CPU: a matmul's
    GFLOP/s and a memory copy's GB/s (``matmul_gflops``, ``copy_gbps``) on the worker's cores.
    ``slow`` and ``slow_reasons`` are derived by the driver against the median of every entry of
    the same ``model`` (``orchestrator.machines.calibration``), never measured.
    """

    id: str  # unique per device: "<node id[:8]>/gpu<id>" or "<node id[:8]>/cpu<cores>" (e.g. cpu0-1, cpu0,2-3)
    node_id: str | None = None
    hostname: str
    device: Literal["cuda", "cpu"]
    gpu_id: str | None = None
    model: str  # the GPU model (as results name it) or "CPU (<cpu model>)"
    figures: dict[str, float]  # higher is faster, every one
    conditions: dict[str, Any] = Field(default_factory=dict)  # clocks, temperature, power, throttle reasons
    seconds: float = 0.0  # how long the probe took
    slow: bool = False
    slow_reasons: list[str] = Field(default_factory=list)


class WorkerInfo(Lean):
    """Where an experiment ran: which host, process, GPU and how many CPU threads."""

    hostname: str
    node_id: str | None = None
    pid: int
    gpu_ids: list[str] = Field(default_factory=list)
    gpu_name: str | None = None
    cpu_model: str | None = None
    threads: int
    gpu_model: str | None = None  # the node's accelerator_type, else the CUDA device name
    versions: dict[str, str] = Field(default_factory=dict)  # torch, triton, cuda, driver, compilebench, git
    experiments_before: int | None = None  # experiments this process ran before this one (0: a fresh process)
    calibration: Calibration | None = None  # its device's probe (run --calibrate): environment.calibration's entry


class CheckInfo(Lean):
    """How a result's correctness was judged, and the worst error seen.

    ``method``: ``fp64_rmse`` (compiled vs a float64 reference, allowed ``multiplier`` x eager's
    own RMSE + tol/10, after an allclose check), ``allclose`` (compiled vs eager within
    ``rtol``/``atol``), ``cosine`` (where no float64 run was possible), ``equal`` (non-floating
    outputs only), ``none`` (not checked: ``Result.check_note`` says why).
    """

    method: Literal["fp64_rmse", "allclose", "cosine", "equal", "none"]
    rtol: float | None = None
    atol: float | None = None
    multiplier: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    rmse_compiled: float | None = None
    rmse_eager: float | None = None
    compared: list[str] = Field(default_factory=list)  # what was compared: outputs, loss, gradients
    eager_deterministic: bool | None = None  # two eager runs gave the same outputs
    worst: str | None = None  # where the worst error was: a path into the output structure
    fallback_random: bool = False  # judged on a compile of its own with inductor's fallback_random
    compile_latency_s: float | None = None  # the first call of that compile, apart from the timed one's


class CompileCache(Lean):
    """What the measured compile took from the compile caches, per layer, from torch's counters.

    ``state`` is what the experiment asked for: ``warm`` (primed: the same compile ran once
    before, then every in-memory cache was cleared, so the measured compile loads from disk)
    or ``cold`` (a fresh process with empty cache directories: misses only). The counts are per
    compiled graph: ``fxgraph_*`` is inductor's FX graph cache, ``autograd_*`` AOTAutograd's
    cache; ``other`` holds any further cache counter torch kept (Triton, autotuning), by name.

    ``shared`` (a cold start that first loads from the run's shared cache, ``tasks.shared_cache``):
    ``shared_key`` is the key the artifacts were looked up and stored under; ``loaded`` whether
    torch took artifacts stored there (``loaded_bytes`` of them, ``loaded_artifacts`` cache
    entries, in ``load_s`` seconds, before anything compiled); ``stored_bytes`` what this run
    stored there after it compiled (0: nothing new to store); ``shared_note`` why nothing was
    loaded or stored, where that is so. The counts above then say what the load served.

    ``isa_probe_s`` (a fresh process on a CPU, inductor): inductor's once-per-process probe of the
    CPU's vector instructions, run before the measured compile and not counted in its latency.
    """

    state: CacheState
    primed: bool = False
    fxgraph_hit: int = 0
    fxgraph_miss: int = 0
    fxgraph_bypass: int = 0
    autograd_hit: int = 0
    autograd_miss: int = 0
    autograd_bypass: int = 0
    other: dict[str, int] = Field(default_factory=dict)
    shared_key: str | None = None
    loaded: bool = False
    loaded_bytes: int = 0
    loaded_artifacts: int = 0
    load_s: float | None = None
    stored_bytes: int = 0
    shared_note: str | None = None
    isa_probe_s: float | None = None

    @property
    def outcome(self) -> Literal["hit", "miss", "mixed", "bypass", "none"]:
        """``hit``: every graph loaded from the caches; ``miss``: every graph compiled anew;
        ``mixed``: some of each; ``bypass``: the caches were not used; ``none``: no inductor
        graph was compiled (another backend)."""
        hits = self.fxgraph_hit + self.autograd_hit
        misses = self.fxgraph_miss + self.autograd_miss
        if hits and misses:
            return "mixed"
        if hits:
            return "hit"
        if misses:
            return "miss"
        return "bypass" if self.fxgraph_bypass or self.autograd_bypass else "none"

    @property
    def label(self) -> str:
        """``warm: hit``, ``cold: miss``: what was asked and what happened."""
        return f"{self.state}: {self.outcome}"


class TraceInfo(Lean):
    """The structured compile trace of a traced experiment (``trace: true``): where it is, or why it is not.

    The worker records torch's structured trace of the measured compile (``tasks.tracing``: what
    ``TORCH_TRACE`` writes) and sends its files with the result, packed in ``archive``; the driver
    unpacks them beside the report (``orchestrator.store.traces``) and empties ``archive``. Paths are
    relative to the report's folder: ``dir`` (``REPORT.traces/<experiment id>-r<replicate>``),
    ``log_files`` (torch's ``dedicated_log_torch_trace_*.log``), ``html`` (tlparse's ``index.html``,
    where tlparse is installed on the driver). ``bytes``: the logs' size, uncompressed. ``error``:
    why a part is missing (nothing recorded, too large to send, not stored, not rendered), else None.
    """

    dir: str | None = None
    log_files: list[str] = Field(default_factory=list)
    html: str | None = None
    bytes: int = 0
    archive: str | None = None  # in transit only: the trace folder as a base64 gzip tar, until the driver stores it
    error: str | None = None


class WorkInfo(Lean):
    """The work of one call, counted (not guessed): FLOPs by FlopCounterMode, bytes where simple."""

    flops: int | None = None
    bytes: int | None = None


class ShapeTiming(Lean):
    """One value of a replay's parameter: its share of the traffic and its steady-state times.

    ``eager_ms``/``compiled_ms`` are the medians (``tasks.stats.describe``) of the warm pass's
    samples, kept beside them; ``drawn`` is how many calls of the replayed sequence took this value.
    """

    value: Any
    weight: float  # normalised: the weights of a replay sum to 1
    drawn: int = 0
    eager_ms: float
    compiled_ms: float
    eager_samples_ms: list[float] = Field(default_factory=list)
    compiled_samples_ms: list[float] = Field(default_factory=list)


class ReplayResult(Lean):
    """What a replay of shape traffic measured (``tasks.replay``).

    First pass (the seeded sequence of ``calls`` calls, served once by each side, the sides taking
    turns a block of calls at a time, each call timed alone): ``total_ms`` per side (``eager``,
    ``compiled``), the compiled side's compiles included; ``compile_s``, the calls of the compiled
    pass during which Dynamo compiled (each such call's whole wall time, as
    ``Result.compile_latency_s`` is); ``compiles``, those calls, and ``recompiles``, those after
    the first call; the guard failures Dynamo gave for them (``recompile_reasons``) and whether its
    recompile limit was hit (after which it runs the frame eagerly); ``cumulative_ms`` per side
    after each of the calls ``cumulative_at`` (1-based, at most ``tasks.replay.CUMULATIVE_POINTS``
    of them, the first and the last among them). Warm pass: ``per_shape``. Derived
    (``tasks.replay``): ``weighted_speedup``, the steady-state speedup weighted by traffic,
    sum(w eager) / sum(w compiled), and its 95% bootstrap interval over the warm samples
    (``weighted_speedup_ci``); ``break_even_calls``, ``compile_s`` over the traffic-weighted time a
    compiled call saves (None where compiled is not faster).
    """

    param: str
    calls: int
    total_ms: dict[str, float]
    compile_s: float
    compiles: int = 0
    recompiles: int = 0
    recompile_reasons: list[str] = Field(default_factory=list)
    recompile_limit_hit: bool = False
    per_shape: list[ShapeTiming] = Field(default_factory=list)
    weighted_speedup: float | None = None
    weighted_speedup_ci: tuple[float, float] | None = None
    break_even_calls: float | None = None
    cumulative_at: list[int] = Field(default_factory=list)
    cumulative_ms: dict[str, list[float]] = Field(default_factory=dict)


class RankFigures(Lean):
    """What one rank of a distributed experiment measured, as a single-process result would: its own step
    times per side (raw samples), its compile, its graphs and its peak memory.

    ``graph_count``/``graph_breaks`` are the user's graphs and breaks; ``ddp_splits`` the extra graphs
    Dynamo's DDPOptimizer cut at bucket boundaries (not breaks). ``collective_ms`` is the time the
    profiler attributes to collectives per side, where it can split it out.
    """

    rank: int
    hostname: str | None = None
    pid: int | None = None
    gpu_ids: list[str] = Field(default_factory=list)
    eager: SideTiming | None = None
    compiled: SideTiming | None = None
    compile_latency_s: float | None = None
    compile_cache: CompileCache | None = None
    graphs_compiled: int | None = None
    graph_count: int | None = None
    graph_breaks: int | None = None
    ddp_splits: int | None = None
    recompiles: int = 0
    break_reasons: list[str] = Field(default_factory=list)
    loss: dict[str, float] = Field(default_factory=dict)  # side -> the checked step's loss on this rank
    collective_ms: dict[str, float] | None = None
    error: ErrorInfo | None = None  # this rank's failure, where it is the one that failed


class DistributedResult(Lean):
    """A distributed experiment's ranks and what the gang did together.

    The result's own ``eager``/``compiled`` are the gang's steps: step i's time is the slowest rank's
    step i (ranks meet in collectives every step), so speedup, summary and compare read a distributed
    result as any other. ``throughput`` is samples (or tokens, ``throughput_unit``) per second for the
    whole gang, per side; ``disagreements`` says where ranks differ (graph counts, a recompile on one
    rank only); ``failed_rank`` is the rank whose failure ended the experiment.
    """

    config: DistributedConfig
    world_size: int
    backend: str  # torch.distributed's: nccl or gloo
    batch: BatchScope = "global"
    global_batch: int | None = None  # samples per step across the gang
    ranks: list[RankFigures] = Field(default_factory=list)
    throughput: dict[str, float] = Field(default_factory=dict)
    throughput_unit: Literal["samples/s", "tokens/s"] = "samples/s"
    disagreements: list[str] = Field(default_factory=list)
    failed_rank: int | None = None
    gang_id: str | None = None  # which gang of long-lived processes ran it
    gang_experiments_before: int | None = None  # experiments that gang ran before this one


class Result(Lean):
    """What one experiment produced, success or failure."""

    experiment_id: str
    target: str
    params: dict[str, Any]
    device: Literal["cuda", "cpu"] | None
    compile: CompileConfig
    timing: TimingConfig
    seed: int
    phase: Phase = "inference"
    precision: Precision = "fp32"
    gpu_model: str | None = None  # requested (None: any); the one used is worker.gpu_model
    replicate: int = 0  # which run of the experiment (0 .. replicates-1); each ran in another worker process
    attempts: int = 1
    lost_nodes: int = 0  # attempts that ended with the loss of their node (counted in attempts, not against retries)
    status: Status
    error: ErrorInfo | None = None
    eager: SideTiming | None = None
    compiled: SideTiming | None = None
    compile_latency_s: float | None = None  # the measured compile's first call; compile_cache says how it was served
    compile_cache: CompileCache | None = None
    speedup: float | None = None  # eager / compiled medians; a replay's: its weighted_speedup (traffic-weighted)
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
    check: CheckInfo | None = None
    check_note: str | None = None  # why correctness could not be judged, when correct is None
    work: WorkInfo | None = None
    inductor_options: dict[str, Any] = Field(default_factory=dict)  # inductor config differing from defaults
    requested: Resources | None = None  # what the experiment asked for
    reserved: Resources | None = None  # what the scheduler gave it
    started_at: float
    finished_at: float
    worker: WorkerInfo | None = None
    measurement: Measurement | None = None
    traffic: ReplayConfig | None = None  # the shape traffic the experiment asked to replay (Experiment.replay)
    replay: ReplayResult | None = None  # shape traffic replayed (Experiment.replay); its recompiles are no flaw
    decision: DecisionConfig | None = None  # the experiment's: how the summary weighs compile against calls
    trace: TraceInfo | None = None  # the measured compile's structured trace (Experiment.trace), beside the report
    distributed: DistributedResult | None = None  # a training step across ranks (Experiment.distributed)

    @property
    def config_label(self) -> str:
        """The configuration the result is ranked as in its group: its compile configuration and, for a
        distributed result, the strategy's options (``inductor+optimize_ddp=off``); the strategy and world
        size are its group's (``models.gpt training ddp x2``)."""
        return self.config_label_as(self.compile.cache)

    def config_label_as(self, cache: CacheState) -> str:
        """``config_label`` as it reads for this configuration compiled with the cache state ``cache``."""
        return config_label(self.compile, self.distributed, cache)


def config_label(compile: CompileConfig, distributed: DistributedResult | None, cache: CacheState) -> str:
    """The label of a result's configuration (``Result.config_label_as``), from the two fields it is made of: for
    a reader that holds those fields of a result and not the result (``export.harness_csv.CsvResult``)."""
    if distributed is None:
        return compile.label(cache)
    options = distributed.config.label().split("+")[1:]  # after "ddp x2"
    return "+".join([compile.label(cache), *options])


def result_identity(exp: Experiment) -> dict[str, Any]:
    """The fields a ``Result`` copies from the experiment it is the result of."""
    return {
        "experiment_id": exp.id,
        "target": exp.target,
        "params": exp.params,
        "compile": exp.compile,
        "timing": exp.timing,
        "seed": exp.seed,
        "phase": exp.phase,
        "precision": exp.precision,
        "gpu_model": exp.gpu_model,
        "decision": exp.decision,
        "traffic": exp.replay,
    }  # a distributed experiment's config travels in Result.distributed.config
