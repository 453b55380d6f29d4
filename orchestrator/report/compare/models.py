"""The comparison's data: the gate's thresholds and defaults, one change between two reports, and the
comparison with its verdict (``Comparison.fails``).

Plain data, built by the gate (``gate``) and shown by ``render``; imports nothing of ``orchestrator``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

SPEED_THRESHOLD = 0.05  # relative change of the speedup or the compiled median (PyTorch's dashboard: 0.95x)
COMPILE_THRESHOLD = 0.15  # relative change of compile latency (PyTorch's dashboard alerts at 1.15x)
ALPHA = 0.05  # two-sided, on the runs (as Google Benchmark's compare.py, which tests repetitions)
MIN_RUNS = 3  # ok runs a side for a test: with 2, Welch's df can fall to 1 (t_0.975 = 12.7), one run decides
ONE_RUN = "one run per side: run-to-run noise not measured"
WELCH = "Welch's t on log per-run values"

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
]
KIND_TITLES: dict[str, str] = {
    "new_failure": "newly failing",
    "slower": "slower",
    "breaks_grew": "more graph breaks",
    "compile_slower": "compile latency up",
    "new_pass": "newly passing",
    "faster": "faster",
    "breaks_fell": "fewer graph breaks",
    "compile_faster": "compile latency down",
    "status_changed": "failing differently",
    "recommendation": "what to ship changed",
}


@dataclass(frozen=True)
class Thresholds:
    speed: float = SPEED_THRESHOLD
    compile: float = COMPILE_THRESHOLD
    alpha: float = ALPHA
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
    test: str | None = None  # speed: WELCH, or "threshold" (too few runs for a test)
    p_value: float | None = None  # from the runs only; None when they are too few
    note: str = ""  # e.g. ONE_RUN
    phases: str = ""  # compile latency: the phases that account for 80% of the move (compile_phases.explain)
    regression: bool


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
