"""What the regression gate reads of each result (``Digest``), and of a report (``Glance``): the figures of
100,000 results without the results themselves.

``compare`` judges runs by a handful of fields each: the experiment and its replicate, its group and
configuration labels, status, speedup, medians, compile latency and how the caches served it, graph breaks,
and what its worker was. A ``Digest`` holds those, derived from a ``Result`` (``digest``). A compressed
report (``io.REPORT_SUFFIX``) carries its results' digests as columns in its head, before the results
(``columns``; ``skim.load_glance`` reads that head and stops), so that comparing two reports of 100,000
results neither decompresses nor validates a single result. Any other report is read whole and digested.

The digests are derived data, as the summary is: written from the results by ``io.write_report``, read
back through ``DigestColumns`` (each column typed, all of one length), never edited on their own.
Imports the report's models and the summary's device model; nothing that draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, model_validator

from orchestrator.report.models import Environment, Report, Summary, group_title, result_group
from orchestrator.report.summary import device_model, summarize
from tasks.experiment import Phase, Precision
from tasks.result import Result
from tasks.stats import log_median_se
from tasks.text import first_line

VERSION_KEYS: Final = ("torch", "triton", "cuda")  # a worker's versions that compare warns about when they differ
ERROR_LIMIT: Final = 100  # characters of an error's first line a digest keeps (what a change shows)


@dataclass(slots=True)
class Digest:
    """One result as the gate reads it. The names a ``Result`` has mean what they mean there; ``group``
    and ``config`` are its labels (``result_group``, ``Result.config_label``), ``error`` the first line of
    its error ('' for none), ``cache_state``/``cache_outcome`` its ``compile_cache``'s (None where it has
    none), ``traced`` whether it has a trace, ``threads`` and ``versions`` its worker's.

    Derived data that nothing sets once made, but not ``frozen``: a frozen dataclass sets each of its 33 fields
    through ``object.__setattr__``, and making the 100,000 digests of a report's columns took 0.75 s that way,
    0.16 s this one (``compare`` makes two reports' worth)."""

    experiment_id: str
    replicate: int
    group: str
    config: str
    device_model: str | None
    status: str
    error: str
    speedup: float | None
    eager_ms: float | None
    compiled_ms: float | None
    compile_latency_s: float | None
    cache: str
    cache_state: str | None
    cache_outcome: str | None
    compile_breakdown: dict[str, float]
    graph_breaks: int | None
    traced: bool
    threads: int | None
    versions: dict[str, str]
    inductor_options: dict[str, Any]
    # the standard errors of log(median) of each side within its run (``tasks.stats.log_median_se``): how far
    # this run's own samples let its median move; None where a side was not timed (or in digests written
    # before they were kept)
    eager_se: float | None = None
    compiled_se: float | None = None
    # what the terminal's report reads of each result (``skim.load_outline``): whether it was judged correct, and
    # whether it holds a replay or a distributed run (the views that list such results one by one); None in
    # digests written before these were kept
    correct: bool | None = None
    replayed: bool | None = None
    distributed: bool | None = None
    # what the page reads of each result besides (``html``: the table of every result and the charts drawn from
    # every result): the speedup's interval, whether it recompiled while timed, which sides were noisy, the work
    # of a call (``WorkInfo``; None for none counted), the worker's calibration entry and whether it calibrated
    # slow; all None in digests written before these were kept
    speedup_ci: tuple[float, float] | None = None
    recompiled: bool | None = None
    eager_noisy: bool | None = None
    compiled_noisy: bool | None = None
    flops: int | None = None
    work_bytes: int | None = None
    calibration: str | None = None
    calibration_slow: bool | None = None

    @property
    def timed(self) -> bool:
        """Ok with both sides timed: what speed is judged on."""
        return self.status == "ok" and self.compiled_ms is not None and self.eager_ms is not None and bool(self.speedup)

    @property
    def cache_label(self) -> str | None:
        """``warm: hit``, as ``CompileCache.label``; None where the result recorded no caches."""
        return None if self.cache_state is None else f"{self.cache_state}: {self.cache_outcome}"

    @property
    def label(self) -> str:
        """``target params [config]``, as warnings name an experiment."""
        return f"{self.group} [{self.config}]"


FIELDS: Final = tuple(f.name for f in fields(Digest))
# the columns the page reads of every result (``Digest``'s last eight): a report whose digests lack one is read whole
PAGE_FIELDS: Final = FIELDS[FIELDS.index("speedup_ci") :]


def digest(r: Result) -> Digest:
    """What the gate reads of ``r``."""
    worker = r.worker
    return Digest(
        experiment_id=r.experiment_id,
        replicate=r.replicate,
        group=result_group(r),
        config=r.config_label,
        device_model=device_model(r),
        status=r.status,
        error=first_line(r.error.message, limit=ERROR_LIMIT) if r.error else "",
        speedup=r.speedup,
        eager_ms=r.eager.median_ms if r.eager else None,
        compiled_ms=r.compiled.median_ms if r.compiled else None,
        compile_latency_s=r.compile_latency_s,
        cache=r.compile.cache,
        cache_state=r.compile_cache.state if r.compile_cache else None,
        cache_outcome=r.compile_cache.outcome if r.compile_cache else None,
        compile_breakdown=r.compile_breakdown,
        graph_breaks=r.graph_breaks,
        traced=r.trace is not None,
        threads=worker.threads if worker else None,
        versions={k: worker.versions[k] for k in VERSION_KEYS if k in worker.versions} if worker else {},
        inductor_options=r.inductor_options,
        eager_se=log_median_se(r.eager) if r.eager else None,
        compiled_se=log_median_se(r.compiled) if r.compiled else None,
        correct=r.correct,
        replayed=r.replay is not None,
        distributed=r.distributed is not None,
        speedup_ci=r.speedup_ci,
        recompiled=r.recompiled,
        eager_noisy=r.eager.noisy if r.eager else None,
        compiled_noisy=r.compiled.noisy if r.compiled else None,
        flops=r.work.flops if r.work else None,
        work_bytes=r.work.bytes if r.work else None,
        calibration=calibration.id if (calibration := worker.calibration if worker else None) else None,
        calibration_slow=calibration.slow if calibration else None,
    )


class Digests:
    """Each result's digest worked out as the result arrives (``add``: a run's results, as they come back), so
    that the report written at the run's end does not work out 100,000 of them at once; ``of`` gives the digest
    of that very object, None for any other (a copy, a result read back from an earlier run's journal)."""

    def __init__(self) -> None:
        self._by_run: dict[tuple[str, int], tuple[Result, Digest]] = {}

    def add(self, result: Result) -> None:
        self._by_run[(result.experiment_id, result.replicate)] = (result, digest(result))

    def of(self, result: Result) -> Digest | None:
        entry = self._by_run.get((result.experiment_id, result.replicate))
        return entry[1] if entry is not None and entry[0] is result else None


class GateColumns(BaseModel):
    """The digest columns the gate reads (``skim.load_glance``): each a list in result order, all of one length;
    the page's (``PAGE_FIELDS``) are skipped as they are parsed (``DigestColumns`` validates them too)."""

    model_config = ConfigDict(extra="ignore")

    experiment_id: list[str]
    replicate: list[int]
    group: list[str]
    config: list[str]
    device_model: list[str | None]
    status: list[str]
    error: list[str]
    speedup: list[float | None]
    eager_ms: list[float | None]
    compiled_ms: list[float | None]
    compile_latency_s: list[float | None]
    cache: list[str]
    cache_state: list[str | None]
    cache_outcome: list[str | None]
    compile_breakdown: list[dict[str, float]]
    graph_breaks: list[int | None]
    traced: list[bool]
    threads: list[int | None]
    versions: list[dict[str, str]]
    inductor_options: list[dict[str, Any]]
    eager_se: list[float | None] | None = None  # None: digests written before these columns were kept
    compiled_se: list[float | None] | None = None
    correct: list[bool | None] | None = None
    replayed: list[bool] | None = None
    distributed: list[bool] | None = None

    @model_validator(mode="after")
    def _one_length(self) -> GateColumns:
        lengths = {name: len(column) for name in FIELDS if (column := getattr(self, name, None)) is not None}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"digest columns of different lengths: {lengths}")
        return self

    def digests(self) -> list[Digest]:
        """A ``Digest`` a result; a column not read (or not kept) is None in each."""
        count = len(self.experiment_id)
        cols = (column if (column := getattr(self, name, None)) is not None else [None] * count for name in FIELDS)
        return [Digest(*row) for row in zip(*cols, strict=True)]


class DigestColumns(GateColumns):
    """Digests as a report's head keeps them: one list per ``Digest`` field, in result order, all of one
    length. Validated as any part of a report is: a column of the wrong type or length, or one of no
    ``Digest`` field, is a bad report."""

    model_config = ConfigDict(extra="forbid")

    speedup_ci: list[tuple[float, float] | None] | None = None
    recompiled: list[bool] | None = None
    eager_noisy: list[bool | None] | None = None
    compiled_noisy: list[bool | None] | None = None
    flops: list[int | None] | None = None
    work_bytes: list[int | None] | None = None
    calibration: list[str | None] | None = None
    calibration_slow: list[bool | None] | None = None


def columns(digests: Sequence[Digest]) -> dict[str, list[Any]]:
    """The digests as ``DigestColumns`` holds them (JSON-ready)."""
    return {name: [getattr(d, name) for d in digests] for name in FIELDS}


class DecisionGlance(BaseModel):
    """What the gate reads of a group's ``Decision``: what it recommends and why. The rest of it (every
    configuration's figures, the Pareto set) is skipped unread."""

    recommend: str
    reason: str


class GroupGlance(BaseModel):
    """What the gate reads of a summary's ``Group``: what names it (``label``, as ``Group.label``), its
    device model, how many results it holds and its decision; its ranking is skipped unread."""

    target: str
    params: dict[str, Any]
    device_model: str
    phase: Phase
    precision: Precision
    results: int
    decision: DecisionGlance | None = None
    traffic: str | None = None
    gang: str | None = None

    @property
    def label(self) -> str:
        """As ``Group.label``."""
        return group_title(self.target, self.params, self.phase, self.precision, self.gang, self.traffic)


class SummaryGlance(BaseModel):
    """A report's summary as the gate reads it (``skim.load_glance``): its groups' labels and decisions alone.
    At 100,000 results the summary is 100 MB of JSON, most of it rankings and per-configuration figures the
    gate never reads: the fields named here are validated, every other is skipped as it is parsed (the
    pydantic default for unknown fields, rather than ``Lean``'s ``forbid``), a third of the whole summary's
    time."""

    groups: list[GroupGlance]


# What the gate reads of a summary: each decided group's recommendation, why, and how many results it holds, by
# its device model and label (``decided``)
Decided = dict[tuple[str, str], tuple[str, str, int]]


def decided(summary: Summary | SummaryGlance) -> Decided:
    """Each group's decision, by (device model, label): (what it recommends, why, how many results it holds).
    Plain tuples: ``skim.load_glances`` has them worked out in a forked copy and sent back (50,000 groups: a tenth
    of a second pickled, where their models took two)."""
    return {
        (g.device_model, g.label): (g.decision.recommend, g.decision.reason, g.results)
        for g in summary.groups
        if g.decision is not None
    }


@dataclass
class Glance:
    """A report as the gate reads it: what it is (name, whether its run finished, where it ran), its groups'
    decisions (``decided``: of the whole ``Summary`` of a report read whole, of ``SummaryGlance`` of one read up
    to its results) and one digest a result."""

    name: str
    complete: bool
    environment: Environment
    decided: Decided
    digests: list[Digest]


def glance(report: Report) -> Glance:
    """A report read whole, as the gate reads it. A summary written before decisions is derived again from
    the results (the gate compares decisions)."""
    summary = report.summary
    if any(g.decision is None for g in summary.groups):
        summary = summarize(report.results)
    return Glance(
        report.name, report.complete, report.environment, decided(summary), [digest(r) for r in report.results]
    )


def as_glance(report: Report | Glance) -> Glance:
    """``glance`` of a report read whole; a glance as it is."""
    return glance(report) if isinstance(report, Report) else report
