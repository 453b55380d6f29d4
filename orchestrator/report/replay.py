"""Replay results for people: one row per replay, and which policy serves the traffic fastest.

A replay result (``Result.replay``, from ``tasks.replay``) served one seeded sequence of calls
eagerly and compiled from the first call, the two sides taking turns a block of calls at a time.
Its first-pass speedup, eager's total over the compiled total (every compile included), compares
the two within one run, so that load that differs between runs does not decide. Results that
replayed the same traffic (the same target, params, seed, values, weights and number of calls, on
the same device model) differ only in their compile policy: ``verdict`` names the one with the
highest first-pass speedup, or eager when none is above 1. Numbers are rounded by the cells
(``cells``), as every view's are. A view like the others (``views`` lists it in reading order), with
the charts of the HTML page reading its traffic groups; it imports only the cells, the models and
the summary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from orchestrator.report.cells import Rows, interval, seconds, times
from orchestrator.report.models import result_group
from orchestrator.report.summary import device_model
from tasks.models import ReplayResult, Result

REPLAY_NOTE = (
    "first pass: the seeded sequence served by both sides taking turns, a block of calls each, every call timed "
    "alone, the compiled side from a fresh compile (every compile and recompile included); first-pass speedup: "
    "eager total / compiled total. weighted speedup: warm, per size, weighted by traffic, with its 95% bootstrap "
    "interval. break-even: the calls after which compiling has paid for its compile time at the warm weighted saving."
)


def replay_rows(results: Sequence[Result]) -> Rows:
    """One row per replay result: its traffic, both first passes, its compiles, its steady-state figures."""
    headers = ["target", "config", "calls", "eager total s", "compiled total s", "first-pass speedup", "compile s"]
    headers += ["recompiles", "limit hit", "weighted speedup", "95% CI", "break-even calls", "status"]
    rows = []
    for r, rp in replayed(results):
        rows.append(
            [
                result_group(r),
                r.config_label,
                f"{rp.calls:,}",
                seconds(rp.total_ms.get("eager", 0.0) / 1e3),
                seconds(rp.total_ms.get("compiled", 0.0) / 1e3),
                times(first_pass_speedup(rp)),
                seconds(rp.compile_s),
                str(rp.recompiles),
                "yes" if rp.recompile_limit_hit else "no",
                times(rp.weighted_speedup),
                interval(rp.weighted_speedup_ci),
                "-" if rp.break_even_calls is None else f"{rp.break_even_calls:,.0f}",
                r.status,
            ]
        )
    right = {"calls", "eager total s", "compiled total s", "first-pass speedup", "compile s", "recompiles"}
    right |= {"weighted speedup", "95% CI", "break-even calls"}
    notes = [REPLAY_NOTE, *verdicts(results)] if rows else []
    return Rows("shape-traffic replay", headers, rows, right, notes)


def replayed(results: Sequence[Result]) -> list[tuple[Result, ReplayResult]]:
    """The results that hold a replay, each with it (a failed replay holds none: the failures table
    lists it)."""
    return [(r, r.replay) for r in results if r.replay is not None]


def first_pass_speedup(rp: ReplayResult) -> float | None:
    """Eager's first-pass total over the compiled side's, every compile included: above 1 when
    compiling paid for itself within the replayed calls."""
    eager, compiled = rp.total_ms.get("eager"), rp.total_ms.get("compiled")
    return eager / compiled if eager and compiled else None


def verdict(results: Sequence[Result]) -> str | None:
    """Per replayed traffic, which policy served its calls fastest, compile included (``verdicts``),
    one line each; None without replay results."""
    lines = verdicts(results)
    return "\n".join(lines) if lines else None


def verdicts(results: Sequence[Result]) -> list[str]:
    """For each traffic some results replayed: the ``ok`` policy with the highest first-pass
    speedup, or eager when none is above 1, with every policy's figure beside it:
    ``blocks.mlp dim=8, 1,000 calls: inductor serves them fastest, compile included: 1.43x eager
    (15.4 s against 22.1 s); inductor+static 0.81x``."""
    lines = []
    for group in traffic_groups(results):
        first, traffic = group[0]
        ratios = {r.config_label: (first_pass_speedup(rp) or 0.0, rp) for r, rp in group if r.status == "ok"}
        ranked = sorted(ratios, key=lambda name: ratios[name][0], reverse=True)
        label = f"{result_group(first)}, {traffic.calls:,} calls"
        if not ranked or ratios[ranked[0]][0] <= 1.0:
            others = ", ".join(f"{name} {times(ratios[name][0])}" for name in ranked)
            took = f"every policy took longer ({others})" if ranked else "no policy ran them"
            lines.append(f"{label}: eager serves them fastest, compile included: {took}")
            continue
        best = ranked[0]
        ratio, rp = ratios[best]
        eager_s, compiled_s = rp.total_ms["eager"] / 1e3, rp.total_ms["compiled"] / 1e3
        figures = f"{times(ratio)} eager ({seconds(compiled_s)} s against {seconds(eager_s)} s)"
        others = "; " + ", ".join(f"{name} {times(ratios[name][0])}" for name in ranked[1:]) if ranked[1:] else ""
        lines.append(f"{label}: {best} serves them fastest, compile included: {figures}{others}")
    return lines


def traffic_groups(results: Sequence[Result]) -> list[list[tuple[Result, ReplayResult]]]:
    """Replay results that served the same sequence on the same device model, in report order:
    the same target, params, phase, precision, seed, calls and weighted values."""
    groups: dict[str, list[tuple[Result, ReplayResult]]] = {}
    for r, rp in replayed(results):
        traffic = [(s.value, round(s.weight, 9)) for s in rp.per_shape]
        identity = [r.target, r.params, r.phase, r.precision, r.seed, rp.param, rp.calls, traffic, device_model(r)]
        groups.setdefault(json.dumps(identity, sort_keys=True, default=str), []).append((r, rp))
    return list(groups.values())
