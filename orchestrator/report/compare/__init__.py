"""Two reports, experiment by experiment: what got faster, slower, newly fails or passes; a regression gate.

An experiment may have run several times (``replicates``), each run in another worker process. The
gate judges runs, never the calls inside one run: a run's per-call samples share its process, GPU,
clocks and compiled code, so thousands of them say nothing about the next run, and a test on them
(pseudo-replication) gives p ~ 0 for any shift.

- Speed: the speedup by default (``metric="speedup"``: a machine slower on both sides moves no
  speedup), the compiled median with ``metric="time"``. A side's value is the geometric mean of its
  ok runs' values. With at least ``MIN_RUNS`` ok runs on both sides, an experiment's p-value is Welch's
  t-test on the runs' log values; with fewer, its move is judged against the spread of the moves of the
  sweep's other experiments (an empirical null, from ``MIN_SWEEP`` experiments of a device model on), or
  against a stored A/A noise figure, or left untested (failing only beyond ``UNTESTED_BOUND``). The
  p-values of one comparison are adjusted together (Benjamini-Hochberg, q = ``FDR_Q``); a move counts when
  beyond the threshold and significant. A shift of a whole sweep is tested on its own (Wilcoxon) and is
  one verdict.
- Compile latency: with ``MIN_RUNS`` runs a side tested as speed is (Welch, its own FDR family), else
  one sample a side by its threshold; a regression only when asked (``gate_compile``).
- A newly failing experiment, or a graph-break count that grew, is always a regression.
- Experiments of BASE missing from NEW, or a NEW report whose run did not finish, fail the gate
  unless allowed (``allow_missing``): a gate that passes what it never saw passes anything.

The package holds the comparison's data (``models``: thresholds, changes, noise figures, the comparison and
its verdict), the noise one-run experiments are judged against (``noise``), the verdicts on speed and
compile latency (``verdicts``: the tests and the false discovery rate), the gate that matches the runs and
lists every change (``gate``), A/A noise figures measured and stored (``aa``) and how a comparison is shown
(``render``: the terminal, Markdown, JSON), each importing only those before it.
Its names are importable from here, as ``orchestrator.report.compare`` has always offered them.
"""

from __future__ import annotations

from orchestrator.report.compare.aa import NoiseError, measure_noise, read_noise, save_noise, store_noise
from orchestrator.report.compare.gate import (
    compare,
    decision_changes,
    environment_warnings,
    runs_by_experiment,
    timed,
)
from orchestrator.report.compare.models import (
    AA_NOISE,
    ALPHA,
    COMPILE_THRESHOLD,
    EMPIRICAL,
    FDR_Q,
    KIND_TITLES,
    MIN_NOISE_EXPERIMENTS,
    MIN_RUNS,
    MIN_SWEEP,
    ONE_RUN,
    ONE_SAMPLE,
    SPEED_THRESHOLD,
    SWEEP_THRESHOLD,
    UNTESTED,
    UNTESTED_BOUND,
    WELCH,
    WILCOXON,
    Change,
    Comparison,
    Kind,
    Metric,
    NoiseFigure,
    NoiseFile,
    SweepNoise,
    Thresholds,
)
from orchestrator.report.compare.noise import Move, judge
from orchestrator.report.compare.render import (
    as_json,
    compile_explanations,
    markdown,
    noise_lines,
    notes,
    print_comparison,
    rows,
    verdict,
)
from orchestrator.report.compare.verdicts import (
    Candidate,
    compile_candidate,
    compile_changes,
    compile_comparable,
    run_values,
    speed_candidate,
    speed_changes,
    untested_note,
)
from tasks.stats import WelchTest, welch_log

__all__ = [
    "AA_NOISE",
    "ALPHA",
    "COMPILE_THRESHOLD",
    "EMPIRICAL",
    "FDR_Q",
    "KIND_TITLES",
    "MIN_NOISE_EXPERIMENTS",
    "MIN_RUNS",
    "MIN_SWEEP",
    "ONE_RUN",
    "ONE_SAMPLE",
    "SPEED_THRESHOLD",
    "SWEEP_THRESHOLD",
    "UNTESTED",
    "UNTESTED_BOUND",
    "WELCH",
    "WILCOXON",
    "Candidate",
    "Change",
    "Comparison",
    "Kind",
    "Metric",
    "Move",
    "NoiseError",
    "NoiseFigure",
    "NoiseFile",
    "SweepNoise",
    "Thresholds",
    "WelchTest",
    "as_json",
    "compare",
    "compile_candidate",
    "compile_changes",
    "compile_comparable",
    "compile_explanations",
    "decision_changes",
    "environment_warnings",
    "judge",
    "markdown",
    "measure_noise",
    "noise_lines",
    "notes",
    "print_comparison",
    "read_noise",
    "rows",
    "run_values",
    "runs_by_experiment",
    "save_noise",
    "speed_candidate",
    "speed_changes",
    "store_noise",
    "timed",
    "untested_note",
    "verdict",
    "welch_log",
]
