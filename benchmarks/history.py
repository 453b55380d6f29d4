"""Change detection on synthetic histories: how often a 5% step is caught, how often a flat series alarms.

    python benchmarks/history.py [--length 30] [--steps 400] [--flat 1000] [--cv 0.01,0.015,0.02,0.025,0.03]
    python benchmarks/history.py --quick        # a few seconds: fewer series, two noise levels

Each series is ``--length`` points (one a report) of lognormal noise of the given coefficient of
variation, with outliers: each point, with probability 2%, is moved by 10-50% up or down (a noisy
neighbour, one throttled night). A step series has a 5% step, up or down, at a random position that
leaves at least 5 points either side; a flat series has none. Every series goes through
``orchestrator.report.changepoints.change_points`` with its defaults (or ``--alpha``, ``--min-segment``,
``--permutations``, ``--penalty``).

- caught: a change is reported at the step or within 3 points after it (index s .. s + 3);
- within 3: a change within 3 points either side of the step;
- split alone: where ``change_points`` would place the step without its test (told there is exactly one),
  in s .. s + 3: how well the noise lets the step be placed at all, apart from whether it is significant;
- false alarms: flat series in which any change is reported, per 100.

The goal: caught in at least 90% of step series, at most 1 false alarm per 100 flat series.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.report.changepoints import (
    ALPHA,
    MIN_SEGMENT,
    PENALTY,
    PERMUTATIONS,
    change_points,
    clean,
    split_gains,
)

STEP = 0.05  # the change to catch: 5%, up or down
MARGIN = 5  # fewest points either side of the step
LATE = 3  # a change reported up to 3 points after the step counts as caught
OUTLIER_RATE = 0.02  # share of points moved by an outlier
OUTLIER_SIZE = (0.10, 0.50)  # how far an outlier moves its point, relative
DETECTION_GOAL = 0.90
FALSE_ALARM_GOAL = 0.01


@dataclass(frozen=True)
class Row:
    cv: float
    steps: int
    caught: int
    within: int
    located: int
    flat: int
    alarms: int

    @property
    def met(self) -> bool:
        return self.caught >= DETECTION_GOAL * self.steps and self.alarms <= FALSE_ALARM_GOAL * self.flat


def series(rng: np.random.Generator, length: int, cv: float, step_at: int | None) -> np.ndarray:
    """Lognormal noise of coefficient of variation ``cv`` around 1, outliers, and a 5% step at ``step_at``."""
    sigma = np.sqrt(np.log1p(cv * cv))  # the lognormal's sigma for that CV
    values = np.exp(sigma * rng.standard_normal(length))
    outliers = rng.random(length) < OUTLIER_RATE
    moves = (1 + rng.uniform(*OUTLIER_SIZE, length)) ** rng.choice([-1, 1], length)
    values = np.where(outliers, values * moves, values)
    if step_at is not None:
        values[step_at:] *= (1 + STEP) ** rng.choice([-1, 1])
    return values


def split_alone(values: np.ndarray, min_segment: int) -> int:
    """Where ``change_points`` would place a single step, without its test: the least-squares split of the
    cleaned log series (``orchestrator.report.changepoints.clean``), leaving ``min_segment`` points either side."""
    gains = split_gains(clean(np.log(values))[None, :], min_segment)[0]
    return int(np.argmax(gains)) + min_segment


def measure(cv: float, args: argparse.Namespace, rng: np.random.Generator) -> Row:
    options = {
        "alpha": args.alpha,
        "min_segment": args.min_segment,
        "permutations": args.permutations,
        "penalty": args.penalty,
    }
    caught = within = located = 0
    for _ in range(args.steps):
        at = int(rng.integers(MARGIN, args.length - MARGIN + 1))
        values = series(rng, args.length, cv, at)
        found = [split.index for split in change_points(values, **options)]
        caught += any(at <= i <= at + LATE for i in found)
        within += any(abs(i - at) <= LATE for i in found)
        located += at <= split_alone(values, args.min_segment) <= at + LATE
    alarms = sum(bool(change_points(series(rng, args.length, cv, None), **options)) for _ in range(args.flat))
    return Row(cv, args.steps, caught, within, located, args.flat, alarms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=30, help="points (reports) per series")
    parser.add_argument("--steps", type=int, default=400, help="step series per noise level")
    parser.add_argument("--flat", type=int, default=1000, help="flat series per noise level")
    parser.add_argument("--cv", default="0.01,0.015,0.02,0.025,0.03", help="noise levels (coefficients of variation)")
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--min-segment", type=int, default=MIN_SEGMENT)
    parser.add_argument("--permutations", type=int, default=PERMUTATIONS)
    parser.add_argument("--penalty", type=float, default=PENALTY)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="40 step and 100 flat series at CV 1%% and 3%%")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.flat, args.cv = 40, 100, "0.01,0.03"
    if args.length < 2 * MARGIN + 1:
        parser.error(f"--length must be at least {2 * MARGIN + 1}")
    cvs = [float(v) for v in args.cv.split(",")]
    rng = np.random.default_rng(args.seed)

    start = time.perf_counter()
    rows = [measure(cv, args, rng) for cv in cvs]
    elapsed = time.perf_counter() - start

    command = " ".join(["python benchmarks/history.py", *sys.argv[1:]])
    print(f"`{command}` ({elapsed:.0f} s)\n")
    print(
        f"series of {args.length} points (reports), a {STEP:.0%} step at point {MARGIN}..{args.length - MARGIN}, ",
        end="",
    )
    print(f"outliers on {OUTLIER_RATE:.0%} of points (10-50%)")
    print(
        f"change_points: alpha {args.alpha}, min segment {args.min_segment}, {args.permutations} permutations, ", end=""
    )
    print(f"penalty {args.penalty} ln(n)\n")
    print(
        "| noise CV | step series | caught (step .. +3) | within 3 | split alone | flat series "
        "| false alarms per 100 | goal met |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(
            f"| {r.cv:.1%} | {r.steps} | {r.caught / r.steps:.1%} | {r.within / r.steps:.1%} "
            f"| {r.located / r.steps:.1%} | {r.flat} | {100 * r.alarms / r.flat:.1f} | {'yes' if r.met else 'no'} |"
        )
    print(f"\ndetection rate: {', '.join(f'{r.caught / r.steps:.1%} at CV {r.cv:.1%}' for r in rows)}")
    print(f"false-alarm rate: {', '.join(f'{100 * r.alarms / r.flat:.1f} per 100 at CV {r.cv:.1%}' for r in rows)}")


if __name__ == "__main__":
    main()
