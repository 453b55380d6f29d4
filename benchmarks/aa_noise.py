"""The regression gate against real run-to-run noise: A/A false alarms, injected slowdowns caught, and
the smallest change each target lets the gate see.

    python benchmarks/aa_noise.py                  # 7 runs of 3 targets x 3 replicates (~11 min on 2 busy cores)
    python benchmarks/aa_noise.py --quick          # 3 runs of one small target x 3 replicates (a smoke test)
    python benchmarks/aa_noise.py --reports DIR    # the tables again, from an earlier run's --out DIR
    python benchmarks/aa_noise.py --simulate       # the candidate tests on simulated runs of known noise

Runs one spec (CPU, inductor, ``replicates: 3``: each replicate in another worker process) through
``compilebench run``, each run a fresh local Ray instance. Some runs set ``AA_EXTRA`` (0.05, 0.10):
``benchmarks.aa_targets:chain``'s compiled side then does 5% or 10% more work while its eager side
does not (its experiment id is unchanged); the other targets ignore it, so for them every pair of
runs is an A/A pair. Runs alternate (A, 5%, 10%, A, ...) so that drift over the session hits each
kind alike. Every pair of runs is then compared with ``orchestrator.report.compare.compare``, what
``compilebench compare`` runs, at its defaults (5%, Welch's t on the runs' log values, alpha 0.05),
gating on the speedup (the default) and on the compiled median (``--metric time``). Printed:

- the extra work injected, measured in this process (one thread, as a worker runs): compiled ``chain``
  with and without the extra, interleaved, CPU time of blocks of calls, median of the ratios;
- false alarms over all A/A comparisons (any speed change flagged, slower or faster) with 3 runs a
  side, beside what one run a side would have said (replicate 0 of each run): by the threshold alone,
  as the gate lists an untested move of a sweep too small to measure its own noise (one that fails only
  beyond 25%), and by a Mann-Whitney U test on the per-call speedups, as it judged it
  before (pairs of runs share runs, so comparisons are not independent);
- detection: the share of A -> slowed comparisons of ``chain`` flagged slower, per injected extra;
- each target's minimum detectable effect: from the pooled between-replicate SD s of its log values,
  the smallest ratio Welch's test flags at alpha 0.05 with 3 runs a side and equal spreads,
  exp(t_{0.975, 4} * s * sqrt(2/3)); the gate flags a change only beyond the threshold as well.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aa_targets import EXTRA_ENV  # noqa: E402
from orchestrator.report import Report, read  # noqa: E402
from orchestrator.report.compare import (  # noqa: E402
    ALPHA,
    MIN_RUNS,
    SPEED_THRESHOLD,
    Metric,
    Thresholds,
    compare,
    run_values,
    runs_by_experiment,
)
from tasks.stats import welch_log  # noqa: E402

CHAIN = "benchmarks.aa_targets:chain"
REPLICATES = 3
EXTRAS = (0.05, 0.10)  # the compiled side's injected extra work
FULL_ORDER = (0.0, 0.05, 0.10, 0.0, 0.05, 0.10, 0.0)  # 3 A runs, 2 of each slowdown, alternating
QUICK_ORDER = (0.0, 0.0, 0.10)
MEASURE_ROUNDS, QUICK_MEASURE_ROUNDS = 60, 10  # blocks of calls per variant for the in-process measurement
MEASURE_CALLS = 20  # calls per block: ~13 ms of CPU time per block
SIMULATED = 20_000  # simulated pairs of 3 runs a side per case (--simulate): rates to about +-0.3%

FULL_SPEC = f"""\
name: aa-noise
defaults:
  device: cpu
  replicates: {REPLICATES}
  timing: {{warmup: 3, repeats: 30}}
experiments:
  - target: seed.foo3
    params: {{shape: [1024, 1024]}}
  - target: blocks.mlp
  - target: {CHAIN}
"""
QUICK_SPEC = f"""\
name: aa-noise-quick
defaults:
  device: cpu
  replicates: {REPLICATES}
  timing: {{warmup: 2, repeats: 10}}
experiments:
  - target: {CHAIN}
    params: {{n: 4096}}
"""


@dataclass(frozen=True)
class Run:
    extra: float  # AA_EXTRA of the run (0: none)
    report: Report


def run_spec(spec: Path, out: Path, extra: float) -> Run:
    """One ``compilebench run`` of the spec with ``AA_EXTRA`` set to ``extra`` (unset for 0)."""
    env = {k: v for k, v in os.environ.items() if k != EXTRA_ENV}
    if extra:
        env[EXTRA_ENV] = str(extra)
    cmd = [sys.executable, "-m", "orchestrator", "run", str(spec), "--out", str(out), "--overwrite"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"run {out.name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return Run(extra, read(out))


def measure_extra(extras: Sequence[float], rounds: int, n: int) -> dict[float, float]:
    """The compiled side's extra work as run, per injected fraction: compiled ``chain`` built with each
    fraction, one thread; per round, a block of calls of each variant timed in CPU time (thread_time,
    which a busy machine's other processes disturb less than wall time), each over the block of the
    variant without extra; the median of the ratios over rounds, minus 1."""
    import torch

    from benchmarks import aa_targets

    torch.set_num_threads(1)
    variants = {}
    for extra in (0.0, *extras):
        os.environ[EXTRA_ENV] = str(extra)
        fn, (x,) = aa_targets.chain("cpu", n=n)
        compiled = torch.compile(fn)
        compiled(x)
        variants[extra] = (compiled, x)
    os.environ.pop(EXTRA_ENV, None)

    def block(extra: float) -> float:
        fn, x = variants[extra]
        start = time.thread_time()
        for _ in range(MEASURE_CALLS):
            fn(x)
        return time.thread_time() - start

    ratios: dict[float, list[float]] = {e: [] for e in extras}
    for _ in range(rounds):
        base = block(0.0)
        for extra in extras:
            ratios[extra].append(block(extra) / base)
    return {extra: statistics.median(r) - 1 for extra, r in ratios.items()}


def log_values(report: Report, metric: Metric) -> dict[str, list[float]]:
    """Each experiment's ok runs' log speedups (or log compiled medians: "time"), by experiment id."""
    return {
        exp_id: [math.log(v) for v in run_values([r for r in results if r.status == "ok"], metric)]
        for exp_id, results in runs_by_experiment(report).items()
    }


def first_runs(report: Report) -> Report:
    """The report as if every experiment had run once: replicate 0 of each."""
    return report.model_copy(update={"results": [r for r in report.results if r.replicate == 0]})


def flagged(base: Report, new: Report, exp_id: str, metric: Metric = "speedup") -> str | None:
    """The speed change the gate (at its defaults, gating ``metric``) lists for the experiment, or None."""
    kinds = [c.kind for c in compare(base, new, Thresholds(metric=metric)).changes if c.experiment_id == exp_id]
    return next((k for k in kinds if k in ("slower", "faster")), None)


def old_gate_flags(base: Report, new: Report, exp_id: str) -> bool:
    """The gate before replicates, on replicate 0 of each side: the speedup beyond the threshold and a
    two-sided Mann-Whitney U test on the per-round speedups (eager sample / compiled sample) p < alpha."""
    from scipy.stats import mannwhitneyu

    b, n = (next(r for r in rep.results if r.experiment_id == exp_id and r.replicate == 0) for rep in (base, new))
    if not (b.speedup and n.speedup and b.eager and b.compiled and n.eager and n.compiled):
        return False
    if abs(n.speedup / b.speedup - 1) <= SPEED_THRESHOLD:
        return False
    rounds = [[e / c for e, c in zip(r.eager.samples_ms, r.compiled.samples_ms, strict=False)] for r in (b, n)]
    return float(mannwhitneyu(rounds[0], rounds[1], alternative="two-sided").pvalue) < ALPHA


def minimum_detectable(sd: float, runs: int = REPLICATES, alpha: float = ALPHA) -> float:
    """The smallest ratio Welch's t-test on log values flags with ``runs`` a side of equal spread ``sd``, minus 1:
    ``tasks.stats.welch_log``'s ``detectable`` for two sides of ``runs`` values whose logs have sample SD ``sd``,
    which is exp(t_{1-alpha/2, 2(runs-1)} * sd * sqrt(2/runs)) (equal spreads: Welch's df is 2(runs-1))."""
    if math.isnan(sd):
        return math.nan
    spread = [i - (runs - 1) / 2 for i in range(runs)]  # evenly spaced about 0, then scaled to sample SD sd
    values = [math.exp(sd * x / statistics.stdev(spread)) for x in spread]
    return welch_log(values, values, alpha).detectable - 1


def pooled_sd(groups: Sequence[Sequence[float]]) -> float:
    """The pooled sample SD of several groups (each with its own mean): sqrt(sum (k-1) s^2 / sum (k-1))."""
    usable = [g for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in usable)
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in usable) / dof) if dof else math.nan


def labels(report: Report) -> dict[str, str]:
    return {r.experiment_id: r.target + "".join(f" {k}={v}" for k, v in r.params.items()) for r in report.results}


def false_alarms(runs: Sequence[Run]) -> list[list[str]]:
    """Per target: A/A comparisons (pairs of runs with the same extra; any pair for targets that ignore it),
    and how many each gate flagged: 3 runs a side on the speedup and on time, 1 run a side by the
    threshold alone, and 1 run a side by the U test on calls."""
    names = labels(runs[0].report)
    rows = []
    total = [0] * 5
    for exp_id, name in names.items():
        pairs = [(a, b) for a, b in itertools.combinations(runs, 2) if a.extra == b.extra or not name.startswith(CHAIN)]
        counts = [
            len(pairs),
            sum(flagged(a.report, b.report, exp_id) is not None for a, b in pairs),
            sum(flagged(a.report, b.report, exp_id, "time") is not None for a, b in pairs),
            sum(flagged(first_runs(a.report), first_runs(b.report), exp_id) is not None for a, b in pairs),
            sum(old_gate_flags(a.report, b.report, exp_id) for a, b in pairs),
        ]
        total = [t + c for t, c in zip(total, counts, strict=True)]
        rows.append([name, *map(str, counts)])
    rows.append(["all", *map(str, total)])
    return rows


def detection(runs: Sequence[Run], measured: dict[float, float]) -> list[list[str]]:
    """Per injected extra: A -> slowed comparisons of chain, the moves seen (geometric means over the
    comparisons) and how many the gate flagged slower, on the speedup and on time."""
    exp_id = next(i for i, name in labels(runs[0].report).items() if name.startswith(CHAIN))
    rows = []
    for extra in sorted({r.extra for r in runs} - {0.0}):
        pairs = [(a, b) for a in runs if a.extra == 0 for b in runs if b.extra == extra]
        row = [f"+{extra:.0%}", f"{measured.get(extra, math.nan):+.1%}"]
        for metric in ("speedup", "time"):
            moves = [
                statistics.fmean(log_values(b.report, metric)[exp_id])
                - statistics.fmean(log_values(a.report, metric)[exp_id])
                for a, b in pairs
            ]
            caught = sum(flagged(a.report, b.report, exp_id, metric) == "slower" for a, b in pairs)
            row += [f"{math.exp(statistics.fmean(moves)) - 1:+.1%}", f"{caught}/{len(pairs)}"]
        rows.append(row)
    return rows


def detectable(runs: Sequence[Run]) -> list[list[str]]:
    """Per target: the pooled between-replicate SD over every run of its log speedup and of its log compiled
    median, and the smallest change Welch's test flags with 3 runs a side (the gate: at least the threshold)."""
    rows = []
    for exp_id, name in labels(runs[0].report).items():
        speedups = [log_values(r.report, "speedup")[exp_id] for r in runs]
        row = [name, f"{math.exp(statistics.fmean(x for g in speedups for x in g)):.2f}x"]
        for metric in ("speedup", "time"):
            sd = pooled_sd([log_values(r.report, metric)[exp_id] for r in runs])
            mde = minimum_detectable(sd)
            row += [f"{sd:.1%}", f"{mde:.1%}"]
        rows.append(row)
    return rows


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def run_all(out: Path, quick: bool) -> None:
    """Measure the injected extra, run the spec in ``ORDER``, and note in ``out/session.json`` what
    the analysis needs beside the reports: the order, the extras measured, the time and the load."""
    spec = out / "aa-noise.yaml"
    spec.write_text(QUICK_SPEC if quick else FULL_SPEC)
    order = QUICK_ORDER if quick else FULL_ORDER
    start, load = time.monotonic(), os.getloadavg()[0]
    extras = sorted(set(order) - {0.0})
    measured = measure_extra(extras, QUICK_MEASURE_ROUNDS if quick else MEASURE_ROUNDS, 4096 if quick else 2**14)
    for i, extra in enumerate(order):
        run_spec(spec, out / f"run{i}-extra{extra:g}.json", extra)
    session = {
        "order": order,
        "measured": {str(e): m for e, m in measured.items()},
        "seconds": time.monotonic() - start,
        "load": [load, os.getloadavg()[0]],
    }
    (out / "session.json").write_text(json.dumps(session, indent=2) + "\n")


def read_runs(out: Path) -> tuple[list[Run], dict[str, Any]]:
    """The runs ``run_all`` left in ``out``, in the order they ran, and its ``session.json``."""
    session = json.loads((out / "session.json").read_text())
    order = [float(e) for e in session["order"]]
    return [Run(extra, read(out / f"run{i}-extra{extra:g}.json")) for i, extra in enumerate(order)], session


def analyse(out: Path, command: str) -> None:
    """Print the three tables from the reports and ``session.json`` in ``out``."""
    runs, session = read_runs(out)
    order = [run.extra for run in runs]
    measured = {float(e): m for e, m in session["measured"].items()}
    load = session["load"]
    print(f"$ {command}")
    print(
        f"{len(runs)} runs ({', '.join(f'{e:+.0%}' if e else 'A' for e in order)}), {REPLICATES} replicates each, "
        f"on {platform.machine()} with {os.cpu_count()} cores in {session['seconds']:.0f} s (load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after); gate at its defaults: beyond {SPEED_THRESHOLD:.0%} and "
        f"Welch p < {ALPHA} with >= {MIN_RUNS} runs a side; reports in {out}\n"
    )
    print("False alarms over A/A comparisons (speed changes flagged, slower or faster):\n")
    headers = ["target", "A/A pairs", "3 runs, speedup", "3 runs, time", "1 run, threshold", "1 run, U on calls"]
    print(markdown(headers, false_alarms(runs)) + "\n")
    print(f"Injected slowdowns of the compiled side ({CHAIN}), A -> slowed:\n")
    headers = ["injected", "measured in-process", "speedup moved", "flagged", "compiled median moved", "flagged (time)"]
    print(markdown(headers, detection(runs, measured)) + "\n")
    print(f"Minimum detectable effect ({REPLICATES} runs a side, alpha {ALPHA}), from the between-replicate spread:\n")
    headers = ["target", "speedup", "SD of log speedup", "MDE speedup", "SD of log compiled median", "MDE time"]
    print(markdown(headers, detectable(runs)))


def simulate(trials: int = SIMULATED, seed: int = 0) -> list[list[str]]:
    """How often each test flags pairs of 3 runs a side drawn with log-normal noise of a known SD and
    a known shift (none: each flag is a false alarm): Welch's t on the log values (the gate's test),
    Student's t (equal variances assumed), the gate (Welch and beyond the threshold), and Mann-Whitney
    U (whose smallest two-sided p for 3 against 3 is 0.1). The last row's sides differ in spread."""
    import numpy as np
    from scipy.stats import mannwhitneyu, ttest_ind

    rng = np.random.default_rng(seed)
    cases = [(sd, sd, shift) for sd in (0.02, 0.05) for shift in (0.0, 0.05, 0.10)] + [(0.01, 0.06, 0.0)]
    rows = []
    for sd_base, sd_new, shift in cases:
        base = rng.normal(0.0, sd_base, (trials, REPLICATES))
        new = rng.normal(math.log1p(shift), sd_new, (trials, REPLICATES))
        welch = ttest_ind(base, new, axis=1, equal_var=False).pvalue < ALPHA
        student = ttest_ind(base, new, axis=1, equal_var=True).pvalue < ALPHA
        beyond = np.abs(np.exp(new.mean(axis=1) - base.mean(axis=1)) - 1) > SPEED_THRESHOLD
        u = mannwhitneyu(base, new, axis=1, alternative="two-sided").pvalue < ALPHA
        spread = f"{sd_base:.0%}" if sd_base == sd_new else f"{sd_base:.0%} vs {sd_new:.0%}"
        rates = (welch, student, welch & beyond, u)
        rows.append([spread, f"+{shift:.0%}", *(f"{np.mean(r):.1%}" for r in rates)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs of one small target: a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="where the specs and reports go (default: a temp dir)")
    parser.add_argument("--reports", type=Path, default=None, help="print the tables of an earlier run's --out again")
    parser.add_argument("--simulate", action="store_true", help="only the tests' rates on simulated runs (seconds)")
    args = parser.parse_args()
    if args.simulate:
        print(
            f"$ python benchmarks/aa_noise.py --simulate\n{SIMULATED} simulated pairs of {REPLICATES} runs a side "
            f"per row, log-normal run-to-run noise; share flagged at alpha {ALPHA}:\n"
        )
        headers = [
            "SD of a run",
            "shift",
            "Welch (log)",
            "Student (log)",
            f"gate: Welch and > {SPEED_THRESHOLD:.0%}",
            "Mann-Whitney U",
        ]
        print(markdown(headers, simulate()))
        return
    if args.reports is not None:
        analyse(args.reports, f"python benchmarks/aa_noise.py --reports {args.reports}")
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="aa-noise-"))
    out.mkdir(parents=True, exist_ok=True)
    run_all(out, args.quick)
    analyse(out, "python benchmarks/aa_noise.py" + (" --quick" if args.quick else ""))


if __name__ == "__main__":
    main()
