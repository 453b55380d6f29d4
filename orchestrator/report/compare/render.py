"""A comparison shown to people and programs: its verdict in one line, the changes as a table with the
gate's notes, on a terminal (rich), as a pull-request comment (Markdown) or as JSON.

Imports the comparison's data (``compare.models``) and the cells; the gate is not needed to show what
it found.
"""

from __future__ import annotations

import json
import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.report.cells import Rows, clipped, markdown_table, rich_table
from orchestrator.report.compare.models import KIND_TITLES, UNTESTED, WELCH, Change, Comparison, SweepNoise
from tasks.stats import HEAVY_TAIL_SHARE, HEAVY_TAIL_Z, SHOULDERS


def verdict(c: Comparison) -> str:
    """One line: the regressions, then what NEW lacks (failing the gate unless allowed)."""
    n = len(c.regressions)
    sweeping = sum(ch.kind == "sweep_slower" for ch in c.regressions)
    judged = f"{n} regression(s)" if n else "no regressions"
    judged += f" ({sweeping} of them the whole sweep's shift)" if sweeping else ""
    judged += f" in {c.matched} matched experiment(s)"
    gaps = [f"{len(c.missing)} experiment(s) of base missing from new"] if c.missing else []
    gaps += ["the new run did not finish"] if c.incomplete else []
    lacking = ", ".join(gaps) + (" (allowed)" if c.allow_missing else "")
    if n:
        return f"REGRESSION: {judged}" + (f"; {lacking}" if gaps else "")
    if gaps and c.blocked:
        return f"INCOMPLETE: {lacking}; {judged}"
    return judged + (f"; {lacking}" if gaps else "")


def compile_explanations(c: Comparison) -> list[str]:
    """With ``gate_compile``, a line per compile-latency move: what moved and the phases that account
    for 80% of it (``inductor +0.38 s (76%), aot_autograd +0.08 s (16%)``), printed beside the verdict."""
    if not c.thresholds.get("gate_compile"):
        return []
    moved = [ch for ch in c.changes if ch.kind in ("compile_slower", "compile_faster")]
    return [
        f"{ch.target} [{ch.config}]: compile {ch.change} ({ch.base} -> {ch.new})"
        + (f": {ch.phases}" if ch.phases else ": no phase breakdown on both sides")
        for ch in moved
    ]


def rows(c: Comparison) -> Rows:
    """One row a change: its verdict, what moved, the runs behind each side, the raw and the adjusted p."""
    headers = ["", "what", "target", "config", "base", "new", "change", "runs", "p", "p adj"]
    body = [
        [
            "REGRESSION" if ch.regression else "",
            KIND_TITLES[ch.kind],
            ch.target,
            ch.config,
            ch.base,
            ch.new,
            ch.change,
            f"{ch.runs[0]} experiments" if ch.kind.startswith("sweep") else f"{ch.runs[0]} vs {ch.runs[1]}",
            _p_cell(ch),
            f"{ch.p_adjusted:.2g}" if ch.p_adjusted is not None else "-",
        ]
        for ch in c.changes
    ]
    return Rows(f"{c.base} -> {c.new}", headers, body, {"change", "runs", "p", "p adj"})


def _p_cell(ch: Change) -> str:
    """The raw p; "untested" for a speed move with no noise to test it against, "one sample" for a compile
    latency of one run a side."""
    if ch.p_value is not None:
        return f"{ch.p_value:.2g}"
    if ch.test != UNTESTED:
        return "-"
    return "one sample" if ch.kind.startswith("compile") and ch.runs == (1, 1) else "untested"


def notes(c: Comparison) -> list[str]:
    t = c.thresholds
    gated = "the speedup" if t["metric"] == "speedup" else "the compiled median"
    gate = "gated" if t["gate_compile"] else "reported, not gated"
    out = [
        f"gate: {gated} moving by more than {t['speed']:.0%} and significant at a false discovery rate of "
        f"{t['fdr']:g} (Benjamini-Hochberg over the comparison's {c.tests.get('speed', 0)} speed p-value(s): p adj): "
        f"with {t['min_runs']} or more ok runs on both sides by {WELCH}, with fewer against the noise below; "
        f"a sweep's median move beyond {t['sweep']:.0%} (Wilcoxon p < {t['fdr']:g}) is one verdict; compile "
        f"latency {t['compile']:.0%} ({gate}; with {t['min_runs']} or more runs a side {WELCH}, its own "
        "family of p-values, else one sample a side by the threshold alone)"
    ]
    out += noise_lines(c)
    if c.runs:
        counts = sorted(c.runs.items(), key=lambda kv: -kv[1])
        out.append("runs per experiment (base vs new): " + ", ".join(f"{k} for {v}" for k, v in counts))
    if c.missing:
        out.append(f"missing from new ({len(c.missing)}): {', '.join(c.missing[:10])}")
    if c.only_in_new:
        out.append(f"only in new ({len(c.only_in_new)}): {', '.join(c.only_in_new[:10])}")
    return out


def noise_lines(c: Comparison) -> list[str]:
    """Per device model, what its experiments without replicates were judged against."""
    return [_noise_line(noise, c) for noise in c.noise]


def _shape(noise: SweepNoise) -> str:
    """The null's shape where it is not normal."""
    if noise.df is None:
        return ""
    return (
        f", heavy-tailed: more moves {SHOULDERS[0]:g}-{SHOULDERS[1]:g} spreads out than a normal's share, or "
        f"more than {HEAVY_TAIL_SHARE:.0%} beyond {HEAVY_TAIL_Z:g} spreads, so Student's t with {noise.df:.1f} "
        "degrees of freedom fitted to the tails"
    )


def _noise_line(noise: SweepNoise, c: Comparison) -> str:
    fewer = f"fewer than {c.thresholds['min_runs']} runs a side"
    head = f"noise on {noise.device_model}: {noise.experiments} experiment(s) with {fewer}"
    spread = f"{noise.spread or 0.0:.1%} a run against a run"
    if noise.source == "sweep":
        scaled = _shape(noise)
        if noise.se_spread is not None:
            between = f", with a run-to-run part of {noise.between:.1%} beyond them" if noise.between else ""
            scaled = (
                f"; each move, less the median, judged in units of its own noise, its runs' standard error from "
                f"their samples' IQR{between}: spread {noise.se_spread:.2f} of them{scaled}"
            )
        return (
            f"{head} judged against the sweep's own noise (empirical null): {noise.metric} moves centred on "
            f"{math.expm1(noise.centre):+.1%}, spread {spread} (1.4826 MAD){scaled}; the whole sweep's "
            f"median move {math.expm1(noise.shift or 0.0):+.1%} (Wilcoxon p={noise.shift_p:.2g})"
        )
    if noise.source == "aa" and noise.figure is not None:
        f = noise.figure
        return (
            f"{head} judged against the A/A noise figure, {spread} ({f.metric}, from {f.experiments} pairs of "
            f"runs, {f.base} vs {f.new}, {f.measured_at}): {noise.why}"
        )
    return f"{head}, untested: {noise.why}; a slowdown fails only beyond {c.thresholds['untested_bound']:.0%}"


def print_comparison(console: Console, c: Comparison) -> None:
    for w in c.warnings:
        console.print(Text(f"WARNING: {w}", style="bold yellow"), soft_wrap=True)
    if c.changes:  # regressions come first: past a screenful the rest are counted, every one in markdown or json
        view = clipped(rows(c), rest="every change with --format markdown or json")
        table: Table = rich_table(view)
        console.print(table)
        for note in view.notes:
            console.print(Text(note), soft_wrap=True)
    else:
        console.print(Text(f"{c.base} -> {c.new}: nothing moved beyond the thresholds"))
    for line in notes(c):
        console.print(Text(line), soft_wrap=True)
    style = "bold red" if c.fails else "bold green"
    console.print(Text(verdict(c), style=style))
    for line in compile_explanations(c):
        console.print(Text(f"  {line}"), soft_wrap=True)


def markdown(c: Comparison) -> str:
    """The comparison as a pull-request comment."""
    icon = ":x:" if c.fails else ":white_check_mark:"
    out = [f"### {icon} {verdict(c)}", ""]
    explained = compile_explanations(c)
    out += [f"- {line}" for line in explained] + ([""] if explained else [])
    out += [f"> :warning: **{w}**" for w in c.warnings]
    if c.warnings:
        out.append("")
    out.append(markdown_table(rows(c)) if c.changes else "Nothing moved beyond the thresholds.")
    out += [""] + [f"- {line}" for line in notes(c)]
    return "\n".join(out) + "\n"


def as_json(c: Comparison) -> str:
    """The comparison as JSON: its fields, the verdict, and whether the gate fails."""
    data = {**c.model_dump(mode="json"), "regressions": len(c.regressions), "fails": c.fails, "verdict": verdict(c)}
    return json.dumps(data, indent=2) + "\n"
