"""Two reports, experiment by experiment: what got faster, slower, newly fails or passes; a regression gate.

An experiment may have run several times (``replicates``), each run in another worker process. The
gate judges runs, never the calls inside one run: a run's per-call samples share its process, GPU,
clocks and compiled code, so thousands of them say nothing about the next run, and a test on them
(pseudo-replication) gives p ~ 0 for any shift.

- Speed: the speedup by default (``metric="speedup"``: a machine slower on both sides moves no
  speedup), the compiled median with ``metric="time"``. A side's value is the geometric mean of its
  ok runs' values. With at least ``MIN_RUNS`` ok runs on both sides, a move is a regression when it
  is beyond the threshold and Welch's t-test on the runs' log values gives p < alpha; with fewer, by
  the threshold alone, with no p-value, and the comparison says that run-to-run noise was not measured.
- A newly failing experiment, or a graph-break count that grew, is always a regression.
- Experiments of BASE missing from NEW, or a NEW report whose run did not finish, fail the gate
  unless allowed (``allow_missing``): a gate that passes what it never saw passes anything.

The package holds the comparison's data (``models``: thresholds, changes, the comparison and its
verdict), the gate that finds the changes (``gate``: the statistics and the verdicts) and how a
comparison is shown (``render``: the terminal, Markdown, JSON), each importing only those before it.
Its names are importable from here, as ``orchestrator.report.compare`` has always offered them.
"""

from __future__ import annotations

from orchestrator.report.compare.gate import (
    compare,
    compile_comparable,
    decision_changes,
    environment_warnings,
    run_values,
    runs_by_experiment,
    speed_change,
    untested_note,
)
from orchestrator.report.compare.models import (
    ALPHA,
    COMPILE_THRESHOLD,
    KIND_TITLES,
    MIN_RUNS,
    ONE_RUN,
    SPEED_THRESHOLD,
    WELCH,
    Change,
    Comparison,
    Kind,
    Metric,
    Thresholds,
)
from orchestrator.report.compare.render import (
    as_json,
    compile_explanations,
    markdown,
    notes,
    print_comparison,
    rows,
    verdict,
)
from tasks.stats import WelchTest, welch_log

__all__ = [
    "ALPHA",
    "COMPILE_THRESHOLD",
    "KIND_TITLES",
    "MIN_RUNS",
    "ONE_RUN",
    "SPEED_THRESHOLD",
    "WELCH",
    "Change",
    "Comparison",
    "Kind",
    "Metric",
    "Thresholds",
    "WelchTest",
    "as_json",
    "compare",
    "compile_comparable",
    "compile_explanations",
    "decision_changes",
    "environment_warnings",
    "markdown",
    "notes",
    "print_comparison",
    "rows",
    "run_values",
    "runs_by_experiment",
    "speed_change",
    "untested_note",
    "verdict",
    "welch_log",
]
