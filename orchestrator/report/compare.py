"""Two reports, experiment by experiment: what got faster, slower, newly fails or passes; a regression gate.

A slowdown is a regression only when it is both beyond a threshold and significant on the raw
samples (two-sided Mann-Whitney U, as Google Benchmark's ``tools/compare.py`` does). A newly
failing experiment, or a graph-break count that grew, is always a regression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.report.models import Report, group_label
from orchestrator.report.render import Rows, first_line, markdown_table, ms, rich_table, seconds, times
from orchestrator.report.summary import device_model
from tasks.models import Result

SPEED_THRESHOLD = 0.05  # relative change of the compiled median or the speedup (PyTorch's dashboard: 0.95x)
COMPILE_THRESHOLD = 0.15  # relative change of compile latency (PyTorch's dashboard alerts at 1.15x)
ALPHA = 0.05  # two-sided Mann-Whitney U, as Google Benchmark's compare.py
_MISSING = object()
MIN_SAMPLES = 9  # Google Benchmark warns below 9 repetitions: the U test has little power with fewer

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
}


@dataclass(frozen=True)
class Thresholds:
    speed: float = SPEED_THRESHOLD
    compile: float = COMPILE_THRESHOLD
    alpha: float = ALPHA
    gate_compile: bool = False  # compile latency is one measurement per side: gate on it only when asked


class Change(BaseModel):
    """One thing that moved between the two reports for one experiment."""

    kind: Kind
    experiment_id: str
    target: str  # the target with its params, phase and precision
    config: str
    device_model: str | None
    base: str  # the old and new values, as text
    new: str
    change: str  # "+20.1%", "0 -> 2", ...
    p_value: float | None = None
    regression: bool


class Comparison(BaseModel):
    base: str  # the reports' names and where they came from
    new: str
    thresholds: dict[str, float | bool]
    matched: int
    changes: list[Change]
    warnings: list[str] = Field(default_factory=list)  # environments that differ, too few samples, ...
    only_in_base: list[str] = Field(default_factory=list)  # experiment labels
    only_in_new: list[str] = Field(default_factory=list)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]


def compare(
    base: Report, new: Report, thresholds: Thresholds | None = None, names: tuple[str, str] = ("", "")
) -> Comparison:
    """Match the two reports' results by experiment id and list every change beyond the thresholds.

    - Speed (both ok): slower when the compiled median grew, or the speedup shrank, by more than
      ``thresholds.speed`` and the Mann-Whitney U test on the raw samples (compiled samples; for
      the speedup, each round's eager/compiled ratio) gives p < ``alpha``. Faster likewise.
    - Status: ok -> anything else is a new failure (a regression); anything else -> ok is a new pass.
    - Graph breaks: a count that grew is a regression.
    - Compile latency: a move beyond ``thresholds.compile`` is listed, with how the caches served
      it (``warm: hit``, ``cold: miss``); a regression only with ``gate_compile`` (one measurement a
      side: no test of significance is possible). Warm never meets cold (their ids differ), and a
      pair the caches served differently (a hit against a miss) is not compared but warned about.
    """
    t = thresholds or Thresholds()
    base_by_id = {r.experiment_id: r for r in base.results}
    new_by_id = {r.experiment_id: r for r in new.results}
    changes: list[Change] = []
    not_compared: list[str] = []
    few_samples = 0
    for exp_id, b in base_by_id.items():
        n = new_by_id.get(exp_id)
        if n is None:
            continue
        changes.extend(_status_changes(b, n))
        changes.extend(_break_changes(b, n))
        speed, few = _speed_changes(b, n, t)
        changes.extend(speed)
        few_samples += few
        compiled, apart = _compile_changes(b, n, t)
        changes.extend(compiled)
        not_compared += [apart] if apart else []
    order = list(KIND_TITLES)
    changes.sort(key=lambda c: (not c.regression, order.index(c.kind)))
    warnings = environment_warnings(base, new)
    if few_samples:
        warnings.append(
            f"{few_samples} experiment(s) have fewer than {MIN_SAMPLES} samples on a side: the significance "
            "test has little power; raise timing.repeats"
        )
    if not_compared:
        shown = "; ".join(not_compared[:3]) + (f"; and {len(not_compared) - 3} more" if len(not_compared) > 3 else "")
        warnings.append(f"{len(not_compared)} compile latency pair(s) served differently by the caches: {shown}")
    return Comparison(
        base=names[0] or base.name,
        new=names[1] or new.name,
        thresholds={"speed": t.speed, "compile": t.compile, "alpha": t.alpha, "gate_compile": t.gate_compile},
        matched=len(base_by_id.keys() & new_by_id.keys()),
        changes=changes,
        warnings=warnings,
        only_in_base=[_label(r) for i, r in base_by_id.items() if i not in new_by_id],
        only_in_new=[_label(r) for i, r in new_by_id.items() if i not in base_by_id],
    )


def environment_warnings(base: Report, new: Report) -> list[str]:
    """Differences that make the two reports measure different things: hardware, versions, threads, options."""
    warnings = []
    for report, which in ((base, "base"), (new, "new")):
        if not report.complete:
            warnings.append(f"the {which} report is incomplete (its run did not finish)")
    models = [sorted({device_model(r) or "unknown" for r in rep.results}) for rep in (base, new)]
    if models[0] != models[1]:
        warnings.append(f"device models differ: {', '.join(models[0])} vs {', '.join(models[1])}")
    for key in ("torch", "triton", "cuda"):
        versions = [_versions(rep, key) for rep in (base, new)]
        if versions[0] and versions[1] and versions[0] != versions[1]:
            warnings.append(f"{key} versions differ: {', '.join(versions[0])} vs {', '.join(versions[1])}")
    threads = [sorted({r.worker.threads for r in rep.results if r.worker}) for rep in (base, new)]
    if threads[0] and threads[1] and threads[0] != threads[1]:
        shown = [", ".join(map(str, t)) for t in threads]
        warnings.append(f"worker threads differ: {shown[0]} vs {shown[1]}")
    new_by_id = {r.experiment_id: r for r in new.results}
    keys: set[str] = set()
    differ = []
    for b in base.results:
        n = new_by_id.get(b.experiment_id)
        if n is not None and b.inductor_options != n.inductor_options:
            differ.append(b)
            both = b.inductor_options.keys() | n.inductor_options.keys()
            keys |= {k for k in both if b.inductor_options.get(k, _MISSING) != n.inductor_options.get(k, _MISSING)}
    if differ:
        warnings.append(
            f"compile options (inductor config) differ for {len(differ)} experiment(s) in "
            f"{', '.join(sorted(keys))} (e.g. {_label(differ[0])})"
        )
    return warnings


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when there is nothing to test (empty, or every value tied)."""
    from scipy.stats import mannwhitneyu

    if not a or not b:
        return 1.0
    p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    return 1.0 if math.isnan(p) else p


def _status_changes(b: Result, n: Result) -> list[Change]:
    if b.status == n.status:
        return []
    message = first_line(n.error.message, 100) if n.error else ""
    if b.status == "ok":
        return [_change("new_failure", n, b.status, n.status, message, regression=True)]
    if n.status == "ok":
        return [_change("new_pass", n, b.status, n.status, "", regression=False)]
    return [_change("status_changed", n, b.status, n.status, message, regression=False)]


def _break_changes(b: Result, n: Result) -> list[Change]:
    if b.graph_breaks is None or n.graph_breaks is None or b.graph_breaks == n.graph_breaks:
        return []
    grew = n.graph_breaks > b.graph_breaks
    kind: Kind = "breaks_grew" if grew else "breaks_fell"
    return [_change(kind, n, str(b.graph_breaks), str(n.graph_breaks), f"{n.graph_breaks - b.graph_breaks:+d}", grew)]


def _speed_changes(b: Result, n: Result, t: Thresholds) -> tuple[list[Change], int]:
    """Slower or faster on the compiled median or the speedup: beyond the threshold and significant."""
    if b.status != "ok" or n.status != "ok" or not (b.compiled and n.compiled and b.speedup and n.speedup):
        return [], 0
    few = int(min(len(b.compiled.samples_ms), len(n.compiled.samples_ms)) < MIN_SAMPLES)
    time_ratio = n.compiled.median_ms / b.compiled.median_ms
    speedup_ratio = n.speedup / b.speedup
    slower_time = time_ratio > 1 + t.speed
    faster_time = time_ratio < 1 - t.speed
    slower_speedup = speedup_ratio < 1 - t.speed
    faster_speedup = speedup_ratio > 1 + t.speed
    p_time = mann_whitney_p(b.compiled.samples_ms, n.compiled.samples_ms) if slower_time or faster_time else 1.0
    p_speedup = mann_whitney_p(_round_speedups(b), _round_speedups(n)) if slower_speedup or faster_speedup else 1.0
    base_text = f"{ms(b.compiled.median_ms)} ms, {times(b.speedup)}"
    new_text = f"{ms(n.compiled.median_ms)} ms, {times(n.speedup)}"
    moved = f"time {_percent(time_ratio)}, speedup {_percent(speedup_ratio)}"
    if (slower_time and p_time < t.alpha) or (slower_speedup and p_speedup < t.alpha):
        p = min(p for p, hit in ((p_time, slower_time), (p_speedup, slower_speedup)) if hit)
        return [_change("slower", n, base_text, new_text, moved, regression=True, p=p)], few
    if (faster_time and p_time < t.alpha) or (faster_speedup and p_speedup < t.alpha):
        p = min(p for p, hit in ((p_time, faster_time), (p_speedup, faster_speedup)) if hit)
        return [_change("faster", n, base_text, new_text, moved, regression=False, p=p)], few
    return [], few


def compile_comparable(b: Result, n: Result) -> str | None:
    """None when the two compile latencies were served alike (the same cache state, and each layer
    hit or missed alike); else why they measure different things. A report from before caches were
    recorded compares by state alone."""
    if b.compile.cache != n.compile.cache:
        return f"cache {b.compile.cache} vs {n.compile.cache}"
    if b.compile_cache and n.compile_cache and b.compile_cache.outcome != n.compile_cache.outcome:
        return f"{b.compile_cache.label} vs {n.compile_cache.label}"
    return None


def _compile_changes(b: Result, n: Result, t: Thresholds) -> tuple[list[Change], str | None]:
    """A compile-latency move beyond the threshold, labelled with how the caches served it; a pair
    served differently (a hit against a miss) is never compared: the reason comes back instead."""
    if not (b.compile_latency_s and n.compile_latency_s):
        return [], None
    apart = compile_comparable(b, n)
    if apart is not None:
        return [], f"{_label(n)}: compile latencies not compared ({apart})"
    ratio = n.compile_latency_s / b.compile_latency_s
    if abs(ratio - 1) <= t.compile:
        return [], None
    slower = ratio > 1
    kind: Kind = "compile_slower" if slower else "compile_faster"
    how = n.compile_cache.label if n.compile_cache else n.compile.cache
    base_text, new_text = f"{seconds(b.compile_latency_s)} s", f"{seconds(n.compile_latency_s)} s ({how})"
    return [_change(kind, n, base_text, new_text, _percent(ratio), regression=slower and t.gate_compile)], None


def _round_speedups(r: Result) -> list[float]:
    """One speedup per timing round: eager and compiled are interleaved, so sample i of each side pairs up."""
    assert r.eager and r.compiled  # callers check
    e, c = r.eager.samples_ms, r.compiled.samples_ms
    if len(e) == len(c):
        return [x / y for x, y in zip(e, c, strict=True) if y > 0]
    return [r.eager.median_ms / y for y in c if y > 0]


def _change(
    kind: Kind, r: Result, base: str, new: str, change: str, regression: bool, p: float | None = None
) -> Change:
    return Change(
        kind=kind,
        experiment_id=r.experiment_id,
        target=group_label(r.target, r.params, r.phase, r.precision),
        config=r.config_label,
        device_model=device_model(r),
        base=base,
        new=new,
        change=change,
        p_value=p,
        regression=regression,
    )


def _versions(report: Report, key: str) -> list[str]:
    found = {r.worker.versions[key] for r in report.results if r.worker and key in r.worker.versions}
    if key == "torch" and report.environment.torch not in ("", "unknown"):
        found.add(report.environment.torch)
    return sorted(found)


def _label(r: Result) -> str:
    return f"{group_label(r.target, r.params, r.phase, r.precision)} [{r.config_label}]"


def _percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


# ------------------------------------------------------------------------------------- rendering


def verdict(c: Comparison) -> str:
    n = len(c.regressions)
    if n:
        return f"REGRESSION: {n} regression(s) in {c.matched} matched experiment(s)"
    return f"no regressions in {c.matched} matched experiment(s)"


def rows(c: Comparison) -> Rows:
    headers = ["", "what", "target", "config", "base", "new", "change", "p"]
    body = [
        [
            "REGRESSION" if ch.regression else "",
            KIND_TITLES[ch.kind],
            ch.target,
            ch.config,
            ch.base,
            ch.new,
            ch.change,
            "-" if ch.p_value is None else f"{ch.p_value:.2g}",
        ]
        for ch in c.changes
    ]
    return Rows(f"{c.base} -> {c.new}", headers, body, {"change", "p"})


def notes(c: Comparison) -> list[str]:
    t = c.thresholds
    out = [
        f"thresholds: {t['speed']:.0%} on the compiled median or the speedup (and Mann-Whitney U p < {t['alpha']}), "
        f"{t['compile']:.0%} on compile latency ({'gated' if t['gate_compile'] else 'reported, not gated'})"
    ]
    if c.only_in_base:
        out.append(f"only in base ({len(c.only_in_base)}): {', '.join(c.only_in_base[:10])}")
    if c.only_in_new:
        out.append(f"only in new ({len(c.only_in_new)}): {', '.join(c.only_in_new[:10])}")
    return out


def print_comparison(console: Console, c: Comparison) -> None:
    for w in c.warnings:
        console.print(Text(f"WARNING: {w}", style="bold yellow"), soft_wrap=True)
    if c.changes:
        table: Table = rich_table(rows(c))
        console.print(table)
    else:
        console.print(Text(f"{c.base} -> {c.new}: nothing moved beyond the thresholds"))
    for line in notes(c):
        console.print(Text(line), soft_wrap=True)
    style = "bold red" if c.regressions else "bold green"
    console.print(Text(verdict(c), style=style))


def markdown(c: Comparison) -> str:
    """The comparison as a pull-request comment."""
    icon = ":x:" if c.regressions else ":white_check_mark:"
    out = [f"### {icon} {verdict(c)}", ""]
    out += [f"> :warning: **{w}**" for w in c.warnings]
    if c.warnings:
        out.append("")
    out.append(markdown_table(rows(c)) if c.changes else "Nothing moved beyond the thresholds.")
    out += [""] + [f"- {line}" for line in notes(c)]
    return "\n".join(out) + "\n"
