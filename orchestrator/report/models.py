"""The report's data: a versioned JSON envelope of results and the summary derived from them.

Nothing here imports Ray or torch: a report can be read, rendered and compared anywhere.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.machines.nodes import Environment as Environment  # the execution side builds it; a report holds it
from orchestrator.machines.nodes import Node as Node  # the scheduler's too; listed in a report's environment
from tasks.models import Lean, Phase, Precision, ReplayConfig, Result

# 2: summary by group and device model, pass rates; version 1 reports are upgraded on load. 3: the same fields, kept
# compressed where the name ends .gz (r.json.gz) with a history file beside it; version 2 reports are read as they are.
SCHEMA_VERSION: Final = 3


class Kept(Lean):
    """A report model that drops the fields of a newer version (as every report model does), at a ``Lean``
    model's memory: the models a summary holds one or more of per group."""

    model_config = ConfigDict(extra="ignore")


class Ranked(Kept):
    """One configuration's valid timing inside a group.

    With replicates (an experiment run k >= 2 times, each in another worker process), ``speedup`` is
    the median of the replicates' speedups and ``ci`` the between-run interval over them (Student's t
    on log speedup, k-1 degrees of freedom); without, the result's own figure and interval.
    """

    experiment_id: str
    config: str
    speedup: float
    ci: tuple[float, float] | None = None  # 95%: the interval the ranking used (ci_between if set, else ci_within)
    replicates: int = 1  # valid timings per experiment behind the figure (the fewest, where seeds are combined)
    ci_within: tuple[float, float] | None = None  # 95% from within-run noise alone (the results' own intervals)
    ci_between: tuple[float, float] | None = None  # 95% over the replicates; None with fewer than 2 valid
    spread: float | None = None  # fastest GPU's speedup / slowest's, over the replicates; None on one GPU
    gpus: int = 0  # distinct GPUs the replicates ran on (as their workers name them)


class ConfigDecision(Kept):
    """One configuration of a group as the decision weighs it (``orchestrator.report.decision``).

    ``speedup``, ``lower``: the group's ranking figure and the lower end of its 95% interval (``Ranked``);
    ``eager_ms``, ``compiled_ms``: per call (a replay's: weighted by its traffic); ``compile_s``: the
    compile the break-even is charged (a replay's: every compile of its first pass), ``compile_label``
    how it was served and whose it is; ``peak_memory_bytes``: the compiled side's, where measured.
    """

    config: str
    candidate: bool  # ok, checked correct and not recompiled in every result: it may be shipped
    excluded: str | None = None  # why it may not be: "failed its check", "compile_error", "unchecked", ...
    speedup: float | None = None
    lower: float | None = None  # lower end of the 95% interval that ranks (between runs where there are replicates)
    interval: Literal["between runs", "within run"] | None = None  # which interval ``lower`` is of
    eager_ms: float | None = None
    compiled_ms: float | None = None
    compile_s: float | None = None
    compile_label: str | None = None  # "warm: hit", "cold: miss, from inductor+cold": see decision
    peak_memory_bytes: int | None = None
    break_even_calls: float | None = None  # compile / (eager - compiled per call); None where not faster
    calls_ms: float | None = None  # with calls: compile + calls x per call (a replay at its own calls: its total)
    eager_calls_ms: float | None = None  # with calls: eager's time for as many calls, as measured beside it
    pays_within_calls: bool | None = None  # with calls: calls_ms < eager_calls_ms; None without calls
    pareto: bool = False  # not dominated among the candidates (``Decision.pareto_on``)


class Decision(Kept):
    """What to ship for one group: a configuration, or ``eager``, and why.

    ``basis``: ``lower_bound``, the candidate with the highest lower 95% bound of speedup if that
    bound exceeds 1.0; ``calls``, the candidate that serves ``calls`` calls in the least time, compile
    included, if that is less than eager's. ``pareto``: the candidates not dominated on ``pareto_on``.
    """

    recommend: str  # a configuration label as the group's results name it, or "eager": stable, comparable
    reason: str
    basis: Literal["lower_bound", "calls"]
    calls: int | None = None  # the calls the choice was weighed over; None: by lower bound alone
    lower: float | None = None  # the recommended configuration's lower 95% bound of speedup
    configs: list[ConfigDecision] = Field(default_factory=list)  # every configuration of the group, as run
    pareto: list[str] = Field(default_factory=list)  # configuration labels
    pareto_on: list[str] = Field(default_factory=list)  # the figures compared: "speedup lower bound", ...
    notes: list[str] = Field(default_factory=list)  # what the figures stand on where it is not the default

    def config(self, label: str) -> ConfigDecision | None:
        """The entry of one configuration, or None."""
        return next((c for c in self.configs if c.config == label), None)


class Group(Kept):
    """Results that measure the same thing: one target, its params, device model, phase and precision, and for
    distributed experiments one strategy at one world size.

    Only inside a group are configurations ranked against each other.
    """

    target: str
    params: dict[str, Any]
    device_model: str
    phase: Phase
    precision: Precision
    results: int  # results in the group, any status, every replicate counted
    best: Ranked | None  # the highest speedup among valid timings; None when there is none
    runner_up: Ranked | None = None  # the next in ``ranked`` that is not the best compiled with another cache state
    ranked: list[Ranked] = Field(default_factory=list)  # every configuration with a valid timing, fastest first
    tie: bool = False  # the best's 95% interval (``ci``: between-run where there is one) overlaps the runner-up's
    failed: dict[str, str] = Field(default_factory=dict)  # config -> status, for results that are not ok
    decision: Decision | None = None  # what to ship; None in a summary written before decisions
    traffic: str | None = None  # replays only: the traffic replayed (``traffic_label``); a group of its own
    gang: str | None = None  # distributed only: strategy and world size (``gang_label``); a group of its own

    @property
    def label(self) -> str:
        return group_title(self.target, self.params, self.phase, self.precision, self.gang, self.traffic)


class LeftOut(BaseModel):
    """A group kept out of a device model's geometric means, and why."""

    group: str
    reason: str


class GeoMean(BaseModel):
    """Geometric means of one configuration over a set of groups."""

    speedup: float
    ci: tuple[float, float]  # 95%: from the groups' between-run intervals where there are replicates, else within-run
    ci_within: tuple[float, float] | None = None  # 95% from the results' own intervals alone (measurement noise)
    between: int = 0  # groups whose figure comes from replicates (between-run); the other n - between: within-run
    spread: float | None = None  # the largest GPU-to-GPU spread among the groups (see Ranked.spread)
    compile_latency_s: float | None = None  # over results whose caches served them alike (compile_cache)
    compile_cache: str | None = None  # how: "warm: hit", "cold: miss"; "warm: mixed" where they differed
    memory_ratio: float | None = None  # eager peak / compiled peak; None where no result measured memory
    n: int
    targets: list[str]


class ConfigSummary(BaseModel):
    """One configuration on one device model: how often it passed and how fast it was."""

    config: str
    results: int  # every result, each replicate of an experiment counted: 3 replicates are 3 results
    ok: int
    passed: int | None = None  # ok and judged correct (correct: true); None in a summary written before it
    unchecked: int | None = None  # ok but never checked (correct: null): not passes; None as passed
    pass_rate: float  # passed / results (a summary written before passed: ok / results)
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
    schema_version: Literal[2, 3] = SCHEMA_VERSION  # 2 read as it is, then marked 3 (``io.load_report``)
    created_at: str
    name: str
    spec: dict[str, Any]
    environment: Environment
    results: list[Result]
    summary: Summary
    complete: bool = True  # False: the run was interrupted; experiments of the spec are missing


class Outline(Report):
    """A big report as a terminal shows it (``skim.load_outline``): everything but its results, and of those only
    the ones a view lists one by one (those not ok, replays, distributed runs, traced runs); every other table
    is drawn from the summary, and the page's table of every result and its charts from the digests
    (``skim.load_page``). ``result_count``: how many results the report holds; ``unchecked``: how many of them
    are ok and were never judged correct. Never written: a report is read whole for anything else."""

    result_count: int
    unchecked: int


def group_label(
    target: str, params: dict[str, Any], phase: str = "inference", precision: str = "fp32", gang: str | None = None
) -> str:
    """``seed.foo3 shape=[4096, 4096]``, with phase and precision only where they are not the defaults, and a
    distributed experiment's strategy and world size (``models.gpt training ddp x2``)."""
    parts = [target, *(f"{k}={v}" for k, v in params.items())]
    if phase != "inference":
        parts.append(phase)
    if precision != "fp32":
        parts.append(precision)
    if gang is not None:
        parts.append(gang)
    return " ".join(parts)


def group_title(
    target: str, params: dict[str, Any], phase: str, precision: str, gang: str | None, traffic: str | None
) -> str:
    """A summary group's name (``Group.label``): its ``group_label``, and a replay's traffic after it
    (``seed.foo3 replay(seq: 8 values, 1,000 calls)``), a group of its own."""
    return group_label(target, params, phase, precision, gang) + (f" replay({traffic})" if traffic else "")


def gang_label(r: Result) -> str | None:
    """A distributed result's strategy and world size, ``ddp x2``: what its group is measured at (a result
    at world size 2 is never ranked against one at world size 1); None for a result of one process."""
    if r.distributed is None:
        return None
    return f"{r.distributed.config.strategy} x{r.distributed.config.world_size}"


def result_group(r: Result) -> str:
    """The label of the group a result belongs to (``group_label`` of its target, params, phase, precision and,
    distributed, strategy and world size)."""
    return group_label(r.target, r.params, r.phase, r.precision, gang_label(r))


def traffic_label(traffic: ReplayConfig | None) -> str | None:
    """``seq: 8 values, 1,000 calls``: the shape traffic a replay served, or None for no replay."""
    if traffic is None:
        return None
    weights = "" if traffic.weights is None else ", weighted"
    return f"{traffic.param}: {len(traffic.values)} values{weights}, {traffic.calls:,} calls"
