"""The comparison's data: the gate's thresholds and defaults, one change between two reports, the noise
one-run experiments were judged against, an A/A noise figure, and the comparison with its verdict
(``Comparison.fails``).

Plain data, built by the gate (``gate``) and shown by ``render``; imports nothing of ``orchestrator``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SPEED_THRESHOLD = 0.05  # relative change of the speedup or the compiled median (PyTorch's dashboard: 0.95x)
COMPILE_THRESHOLD = 0.15  # relative change of compile latency (PyTorch's dashboard alerts at 1.15x)
ALPHA = 0.05  # two-sided, one test on its own (as Google Benchmark's compare.py, which tests repetitions)
FDR_Q = 0.05  # Benjamini-Hochberg: the expected share of false discoveries among the experiments flagged
MIN_RUNS = 3  # ok runs a side for a test: with 2, Welch's df can fall to 1 (t_0.975 = 12.7), one run decides
MIN_SWEEP = 20  # one-run experiments of a device model for the sweep to measure its own noise: 1.4826 MAD of n
# values is uncertain by about 1.17/sqrt(n) (26% at 20, 37% at 10), and below 20 a handful of real changes
# is a large share of the values the null is measured from
SWEEP_THRESHOLD = 0.02  # the median change across a sweep's experiments that counts (when significant): it is
# estimated from every experiment at once, so a shift below the per-experiment 5% is measurable and real
# (every experiment 5% slower in time moves the speedup by 4.8%, under the 5% threshold)
UNTESTED_BOUND = 0.25  # with no noise measured or stored, a change fails the gate only beyond this: five times
# the 5% threshold, several times the run-to-run spread of one run on a quiet machine (1-5%), so a change this
# large is not noise there; on a busy shared machine (this 2-core one: 16-20% a run) even this is not safe
MIN_NOISE_EXPERIMENTS = 10  # A/A experiment pairs a stored noise figure needs (its spread uncertain by ~37%)
ONE_RUN = "one run per side: run-to-run noise not measured"
ONE_SAMPLE = "one sample a side: judged by the threshold alone"
WELCH = "Welch's t on log per-run values"
EMPIRICAL = "the sweep's own noise (empirical null)"
AA_NOISE = "the A/A noise figure"
UNTESTED = "threshold"  # no noise measured or stored: the threshold alone, no p-value
WILCOXON = "Wilcoxon signed-rank on the log changes"

Metric = Literal["speedup", "time"]
Kind = Literal[
    "slower",
    "faster",
    "new_failure",
    "new_pass",
    "status_changed",
    "breaks_grew",
    "breaks_fell",
    "compile_slower",
    "compile_faster",
    "recommendation",
    "sweep_slower",
    "sweep_faster",
]
KIND_TITLES: dict[str, str] = {
    "sweep_slower": "the whole sweep slower",
    "new_failure": "newly failing",
    "slower": "slower",
    "breaks_grew": "more graph breaks",
    "compile_slower": "compile latency up",
    "new_pass": "newly passing",
    "faster": "faster",
    "breaks_fell": "fewer graph breaks",
    "compile_faster": "compile latency down",
    "sweep_faster": "the whole sweep faster",
    "status_changed": "failing differently",
    "recommendation": "what to ship changed",
}


@dataclass(frozen=True)
class Thresholds:
    speed: float = SPEED_THRESHOLD
    compile: float = COMPILE_THRESHOLD
    fdr: float = FDR_Q  # the false discovery rate q of each family of tests (speed; compile latency)
    sweep: float = SWEEP_THRESHOLD  # the median change across a sweep that counts
    gate_compile: bool = False  # compile latency is one measurement per run: gate on it only when asked
    metric: Metric = "speedup"  # what the speed gate judges: the speedup, or the compiled median ("time")
    allow_missing: bool = False  # experiments missing from NEW, or NEW incomplete: warned, not failed


class Change(BaseModel):
    """One thing that moved between the two reports for one experiment."""

    kind: Kind
    experiment_id: str
    target: str  # the target with its params, phase and precision
    config: str
    device_model: str | None
    base: str  # the old and new values, as text
    new: str
    change: str  # "speedup -10.0% (time +0.2%)", "0 -> 2", ...
    runs: tuple[int, int]  # runs behind each side (for speed: the ok runs compared)
    test: str | None = None  # WELCH, EMPIRICAL, AA_NOISE, WILCOXON (the whole sweep), or UNTESTED
    p_value: float | None = None  # raw; None when untested
    p_adjusted: float | None = None  # Benjamini-Hochberg over the comparison's tests of the same kind
    note: str = ""  # e.g. ONE_RUN
    phases: str = ""  # compile latency: the phases that account for 80% of the move (compile_phases.explain)
    regression: bool


class NoiseFigure(BaseModel):
    """Run-to-run noise measured by an A/A comparison (two runs of the same code, ``compare --save-noise``):
    the robust SD about 0 of the log change of one run against one, per device model and metric."""

    model_config = ConfigDict(extra="forbid")

    device_model: str
    metric: Metric
    spread: float  # 1.4826 median |log change|: a whole run's drift is kept in, as a later comparison meets it
    experiments: int  # pairs of runs it was measured from
    base: str  # the A/A pair's reports
    new: str
    measured_at: str  # UTC, ISO 8601


class NoiseFile(BaseModel):
    """What ``compare --save-noise FILE`` writes and ``compare --noise FILE`` reads."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    figures: list[NoiseFigure] = Field(default_factory=list)


class SweepNoise(BaseModel):
    """How one device model's experiments with fewer than ``MIN_RUNS`` runs a side were judged: against the
    sweep's own spread (``sweep``), a stored A/A figure (``aa``), or not at all (``none``: untested)."""

    device_model: str
    metric: Metric
    experiments: int  # judged so
    source: Literal["sweep", "aa", "none"]
    centre: float = 0.0  # the log change the null is centred on: the sweep's median (0 for an A/A figure)
    spread: float | None = None  # SD of the log change of one run against one
    # source "sweep", each change standardized by its own noise (``compare.noise.standardized``): the SD of the
    # standardized changes (1 where a run-to-run part was fitted), and that part, the SD of the log change a
    # run against a run beyond the runs' own standard errors (0: their samples account for all of it)
    se_spread: float | None = None
    between: float | None = None
    df: float | None = None  # source "sweep" with heavy tails: the Student's t null's degrees of freedom
    figure: NoiseFigure | None = None  # source "aa"
    shift: float | None = None  # source "sweep": the median log change across the experiments
    shift_p: float | None = None  # and Wilcoxon's p for it
    why: str = ""  # source "none", or why the sweep's own spread could not serve


class Comparison(BaseModel):
    base: str  # the reports' names and where they came from
    new: str
    thresholds: dict[str, bool | int | float | str]
    matched: int
    changes: list[Change]
    warnings: list[str] = Field(default_factory=list)  # environments that differ, untested moves, missing runs...
    missing: list[str] = Field(default_factory=list)  # experiments of base that new lacks (labels)
    only_in_new: list[str] = Field(default_factory=list)
    incomplete: bool = False  # the new report's run did not finish
    allow_missing: bool = False  # missing experiments and an incomplete new report warn instead of failing
    runs: dict[str, int] = Field(default_factory=dict)  # "3 vs 3" -> matched experiments with so many runs a side
    noise: list[SweepNoise] = Field(default_factory=list)  # per device model: how one-run experiments were judged
    tests: dict[str, int] = Field(default_factory=dict)  # family -> p-values Benjamini-Hochberg adjusted together

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]

    @property
    def blocked(self) -> bool:
        """NEW misses experiments of BASE, or did not finish, and that is not allowed."""
        return not self.allow_missing and bool(self.missing or self.incomplete)

    @property
    def fails(self) -> bool:
        """The gate's verdict: a regression, or (without ``allow_missing``) NEW lacking experiments or unfinished."""
        return bool(self.regressions) or self.blocked
