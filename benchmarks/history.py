"""Change detection on synthetic histories: how often a step is caught, how often a flat series alarms, by
series length and noise, on the seed the detector was tuned on and on a held-out one.

    python benchmarks/history.py [--lengths 6,8,12,30,60] [--cv 0.01,0.015,0.02,0.025] [--steps 200] [--flat 1000]
    python benchmarks/history.py --quick        # a few seconds: lengths 8 and 30, CV 1% and 2.5%, fewer series

Each series is a length of points (one a report) of lognormal noise of the given coefficient of variation,
with outliers: each point, with probability 2%, is moved by 10-50% up or down (a noisy neighbour, one
throttled night). Four kinds of series per length and noise level, each through
``orchestrator.report.changepoints.change_points`` with its defaults and the speed metrics' smallest change
(``orchestrator.report.history.MIN_CHANGE``), or ``--alpha``, ``--min-change``, ``--penalty``:

- 5% anywhere: a 5% step, up or down, at a random place with at least 3 points either side;
- 5% at the end: the same step 3 points before the end: the night the third report after it comes in;
- 10 sigma: a step of ten noise deviations (exp(10 sigma) - 1: 10.5% at 1%, 28% at 2.5%), 3 points before the end;
- flat: no step; a false alarm is a flat series in which any change is reported.

A step is caught when a change is reported at the step or up to 3 points after it. Each (seed, length,
noise) cell draws from its own generator, so a cell's figures do not depend on which others run. The
goal: every step kind caught in at least 90% of series, at most 1 false alarm per 100 flat series; the
detector's constants were tuned on ``TUNE_SEED`` and the figures are reported on ``HELD_OUT_SEED`` too.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.report.changepoints import ALPHA, MIN_SEGMENT, PENALTY, change_points, detectable
from orchestrator.report.history import MIN_CHANGE

STEP = 0.05  # the change to catch: 5%, up or down
SIGMAS = 10.0  # the large step, in noise deviations
LATE = 3  # a change reported up to 3 points after the step counts as caught
OUTLIER_RATE = 0.02  # share of points moved by an outlier
OUTLIER_SIZE = (0.10, 0.50)  # how far an outlier moves its point, relative
DETECTION_GOAL = 0.90
FALSE_ALARM_GOAL = 0.01
TUNE_SEED = 1  # the seed the constants of orchestrator/report/changepoints.py were tuned on
HELD_OUT_SEED = 2  # the seed they were not
SPEED_MIN_CHANGE = MIN_CHANGE["speedup"]


@dataclass(frozen=True)
class Row:
    seed: int
    length: int
    cv: float
    steps: int  # series of each step kind
    anywhere: int  # caught, of each kind
    at_end: int
    large: int
    flat: int
    alarms: int
    detectable: float  # the median over the flat series of the smallest step each could show

    def rate(self, caught: int) -> float:
        return caught / self.steps if self.steps else float("nan")

    @property
    def met(self) -> bool:
        caught = min(self.anywhere, self.at_end, self.large) >= DETECTION_GOAL * self.steps
        return caught and self.alarms <= FALSE_ALARM_GOAL * self.flat


def series(rng: np.random.Generator, length: int, cv: float, step_at: int | None, step: float = STEP) -> np.ndarray:
    """Lognormal noise of coefficient of variation ``cv`` around 1, outliers, and a ``step`` (up or down)
    from point ``step_at`` on."""
    sigma = np.sqrt(np.log1p(cv * cv))  # the lognormal's sigma for that CV
    values = np.exp(sigma * rng.standard_normal(length))
    outliers = rng.random(length) < OUTLIER_RATE
    moves = (1 + rng.uniform(*OUTLIER_SIZE, length)) ** rng.choice([-1, 1], length)
    values = np.where(outliers, values * moves, values)
    if step_at is not None:
        values[step_at:] *= (1 + step) ** rng.choice([-1, 1])
    return values


def measure(seed: int, length: int, cv: float, args: argparse.Namespace) -> Row:
    """One cell: ``args.steps`` series of each step kind and ``args.flat`` flat series."""
    options = {"alpha": args.alpha, "min_change": args.min_change, "min_segment": MIN_SEGMENT, "penalty": args.penalty}
    rng = np.random.default_rng([seed, length, round(cv * 10_000)])
    end = length - MIN_SEGMENT
    large = float(np.expm1(SIGMAS * np.sqrt(np.log1p(cv * cv))))

    def caught(values: np.ndarray, at: int) -> bool:
        return any(at <= split.index <= at + LATE for split in change_points(values, **options))

    anywhere = at_end = big = 0
    for _ in range(args.steps):
        at = int(rng.integers(MIN_SEGMENT, end + 1))
        anywhere += caught(series(rng, length, cv, at), at)
        at_end += caught(series(rng, length, cv, end), end)
        big += caught(series(rng, length, cv, end, large), end)
    alarms = 0
    floors = []
    for _ in range(args.flat):
        values = series(rng, length, cv, None)
        alarms += bool(change_points(values, **options))
        floors.append(detectable(values, args.alpha, args.min_change))
    floor = float(np.median(floors)) if floors else float("nan")
    return Row(seed, length, cv, args.steps, anywhere, at_end, big, args.flat, alarms, floor)


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| points | noise CV | 5% anywhere | 5% at the end | 10 sigma at the end | false alarms per 100 "
        "| detectable (median) | goal met |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.length} | {r.cv:.1%} | {r.rate(r.anywhere):.1%} | {r.rate(r.at_end):.1%} | {r.rate(r.large):.1%} "
            f"| {100 * r.alarms / r.flat:.1f} | {r.detectable:.1%} | {'yes' if r.met else 'no'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="6,8,12,30,60", help="points (reports) per series")
    parser.add_argument("--cv", default="0.01,0.015,0.02,0.025", help="noise levels (coefficients of variation)")
    parser.add_argument("--steps", type=int, default=200, help="series of each step kind per cell")
    parser.add_argument("--flat", type=int, default=1000, help="flat series per cell")
    parser.add_argument("--seeds", default=f"{TUNE_SEED},{HELD_OUT_SEED}", help="generator seeds, one table each")
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--min-change", type=float, default=SPEED_MIN_CHANGE)
    parser.add_argument("--penalty", type=float, default=PENALTY)
    parser.add_argument("--quick", action="store_true", help="lengths 8 and 30, CV 1%% and 2.5%%, 40 and 200 series")
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.cv, args.steps, args.flat = "8,30", "0.01,0.025", 40, 200
    lengths = [int(v) for v in args.lengths.split(",")]
    if min(lengths) < 2 * MIN_SEGMENT:
        parser.error(f"--lengths: every length must be at least {2 * MIN_SEGMENT}")
    cvs = [float(v) for v in args.cv.split(",")]
    seeds = [int(v) for v in args.seeds.split(",")]

    start = time.perf_counter()
    tables = {seed: [measure(seed, n, cv, args) for n in lengths for cv in cvs] for seed in seeds}
    elapsed = time.perf_counter() - start

    command = " ".join(["python benchmarks/history.py", *sys.argv[1:]])
    print(f"`{command}` ({elapsed:.0f} s)\n")
    print(f"series of {args.lengths} points (reports), outliers on {OUTLIER_RATE:.0%} of points (10-50%); ", end="")
    print(f"{args.steps} series of each step kind and {args.flat} flat series per cell")
    print(f"change_points: alpha {args.alpha}, min change {args.min_change:.0%}, min segment {MIN_SEGMENT}, ", end="")
    print(f"penalty {args.penalty} ln(n)")
    for seed, rows in tables.items():
        kind = {TUNE_SEED: "tuned on", HELD_OUT_SEED: "held out"}.get(seed, "other")
        print(f"\nseed {seed} ({kind}):\n")
        print("\n".join(table(rows)))
        worst = max(rows, key=lambda r: r.alarms / r.flat)
        print(f"\nseed {seed}: worst false-alarm rate {100 * worst.alarms / worst.flat:.1f} per 100 ", end="")
        print(
            f"({worst.length} points, CV {worst.cv:.1%}); goal met in {sum(r.met for r in rows)} of {len(rows)} cells"
        )


if __name__ == "__main__":
    main()
