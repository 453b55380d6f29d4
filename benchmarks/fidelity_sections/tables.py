"""What the fidelity sections print alike: the e2e table (end to end and in one process), the drift
table (drift and heap), milliseconds as the tables show them, and the verdict against the
fidelity targets. Pure functions of the figures they are given; nothing here times anything."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from tasks.stats import median_ci

WITHIN_AT_100_US, WITHIN_AROUND_10_US = 0.05, 0.15  # the fidelity targets, by the reference's median


def fmt_ms(ms: float) -> str:
    """A median as the tables show it: microseconds below a millisecond."""
    return f"{ms * 1e3:.2f} us" if ms < 1 else f"{ms:.3f} ms"


def verdict(ratio: float, reference_ms: float) -> str:
    """``ok`` where ``ratio`` lies within the target for a call of ``reference_ms`` (5% from 100 us,
    15% below), else ``OUT (±bound)``."""
    bound = WITHIN_AT_100_US if reference_ms >= 0.1 else WITHIN_AROUND_10_US
    return "ok" if abs(ratio - 1) <= bound else f"OUT (±{bound:.0%})"


def e2e_table(
    labels: Sequence[str], ours: dict[tuple[int, str], list[float]], refs: dict[tuple[int, str], list[float]]
) -> list[str]:
    """The e2e table: per workload and side, both medians per run and the median over runs of their
    ratio, each run's compilebench median paired with the reference taken right after it."""
    rows = [
        "| workload | side | compilebench | per run | reference | per run | ratio | per run | target |",
        "| --- | --- | ---: | --- | ---: | --- | ---: | --- | --- |",
    ]
    for i, label in enumerate(labels):
        for side in ("eager", "compiled"):
            mine, theirs = ours.get((i, side)), refs.get((i, side))
            if not mine or not theirs:
                rows.append(f"| {label} | {side} | - | - | - | - | - | - | no result |")
                continue
            m, r = statistics.median(mine), statistics.median(theirs)
            ratios = [a / b for a, b in zip(mine, theirs, strict=True)]
            ratio = statistics.median(ratios)
            cells = [
                fmt_ms(m),
                ", ".join(fmt_ms(x) for x in mine),
                fmt_ms(r),
                ", ".join(fmt_ms(x) for x in theirs),
                f"{ratio:.3f}",
                ", ".join(f"{x:.3f}" for x in ratios),
            ]
            rows.append(f"| {label} | {side} | {' | '.join(cells)} | {verdict(ratio, r)} |")
    return rows


def drift_header() -> list[str]:
    return [
        "| workload | side | A/B: median of pairs | single pairs | within 3% | within 5% | A over the run "
        "| B over the run |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]


def drift_rows(label: str, series: dict[str, list[dict[str, float]]]) -> list[str]:
    """Per side: the pairs' ratios (A's window / B's window next to it), and each process's own movement."""
    rows = []
    for side in ("eager", "compiled"):
        a = [w[side] for w in series["a"]]
        b = [w[side] for w in series["b"]]
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        low, high = median_ci(ratios)
        cells = [
            f"{statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}] ({len(ratios)})",
            f"{min(ratios):.3f}-{max(ratios):.3f}",
            f"{sum(abs(r - 1) <= 0.03 for r in ratios)}/{len(ratios)}",
            f"{sum(abs(r - 1) <= 0.05 for r in ratios)}/{len(ratios)}",
            f"{max(a) / min(a):.2f}x",
            f"{max(b) / min(b):.2f}x",
        ]
        rows.append(f"| {label} | {side} | {' | '.join(cells)} |")
    return rows
