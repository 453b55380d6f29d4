"""Rendering a report for people: terminal tables (rich), Markdown, CSV.

Each view is built once as plain rows of text (``Rows``) and then formatted; the HTML page
(``html.py``) formats the same rows. Numbers are rounded here and only here.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.machines.calibration import SLOW_THRESHOLD
from orchestrator.report.models import (
    ConfigDecision,
    Decision,
    DeviceSummary,
    GeoMean,
    Ranked,
    Report,
    Summary,
    group_label,
)
from orchestrator.report.summary import device_model
from tasks.models import Calibration, Result, SideTiming
from tasks.throughput import achieved

TIE_TEXT = "tie within noise"
REPLICATES_NOTE = (
    "95% CI over k runs: a Student t-interval on the log speedups of the experiment's k replicates, each run in "
    "another worker process (between runs; the speedup is their median); within one run: the bootstrap of that "
    "run's samples. within-run CI: the same figure's interval from each run's own samples alone. Ranking, ties "
    "and geometric means use the between-run interval where there is one."
)
DEVICE_NUMBERS = ("unchecked", "95% CI", "within-run CI", "GPU spread", "compile s", "memory ratio", "n")
SPREAD_NOTE = (
    "GPU spread: the fastest GPU's speedup over the slowest's, each GPU's the median of the replicates it ran."
)


@dataclass
class Rows:
    """A titled table of text cells; ``right`` names the columns to right-align; ``notes`` follow it."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    right: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------- views


def headline(report: Report) -> list[str]:
    """What a reader must see first: an interrupted run, environment warnings, the counts."""
    lines = []
    if not report.complete:
        lines.append("INCOMPLETE: the run did not finish; experiments of the spec may be missing from this report.")
    lines.extend(f"WARNING: {w}" for w in report.environment.warnings)
    lines.append(counts_text(report.summary, unchecked=sum(unchecked(r) for r in report.results)))
    return lines


def counts_text(summary: Summary, unchecked: int = 0) -> str:
    """``10 results: 9 ok, 1 compile_error``; ok results never checked for correctness said apart."""
    shown = ", ".join(
        f"{n} {status}" + (f" ({unchecked} unchecked)" if status == "ok" and unchecked else "")
        for status, n in summary.counts.items()
        if n
    )
    return f"{sum(summary.counts.values())} results: {shown or 'none'}"


def unchecked(r: Result) -> bool:
    """ok, but correctness was never judged (``correct: null``): not a pass."""
    return r.status == "ok" and r.correct is None


def has_replicates(results: Sequence[Result]) -> bool:
    """Some experiment ran more than once (a replicate number above 0)."""
    return any(r.replicate for r in results)


def slow_devices(calibration: Sequence[Calibration]) -> set[str]:
    """The ids of the calibration entries flagged slow."""
    return {c.id for c in calibration if c.slow}


def on_slow_device(r: Result, slow: set[str]) -> bool:
    """The result's worker calibrated slow: its own entry says so, or the report's entry of that id does."""
    entry = r.worker.calibration if r.worker else None
    return bool(entry and (entry.slow or entry.id in slow))


def results_rows(results: Sequence[Result], title: str = "results", calibration: Sequence[Calibration] = ()) -> Rows:
    """One row a result: times, speedup and interval, compile latency, achieved throughput, status.

    TFLOP/s and GB/s are the compiled side's (eager's: divide by the speedup), shown when some
    result counted that kind of work. The replicate (``r0``, ``r1``) sits beside the configuration
    when some experiment ran more than once; ``slow device`` marks a result whose worker's device
    calibrated slow (its own entry, or ``calibration``'s entry of the same id).
    """
    flops = any(r.work and r.work.flops for r in results)
    bytes_ = any(r.work and r.work.bytes for r in results)
    models = {device_model(r) for r in results}
    replicated = has_replicates(results)
    slow = slow_devices(calibration)
    headers = ["target", *(["device"] if len(models) > 1 else []), "config", *(["replicate"] if replicated else [])]
    headers += ["eager ms", "compiled ms", "speedup", "95% CI", "compile s", "cache"]
    headers += [*(["TFLOP/s"] if flops else []), *(["GB/s"] if bytes_ else [])]
    headers += ["breaks", "status", "notes"]
    rows = []
    for r in results:
        row = [group_label(r.target, r.params, r.phase, r.precision)]
        if len(models) > 1:
            row.append(device_model(r) or "-")
        row.append(r.config_label)
        if replicated:
            row.append(f"r{r.replicate}")
        row += [
            ms(r.eager.median_ms if r.eager else None),
            ms(r.compiled.median_ms if r.compiled else None),
            times(r.speedup),
            interval(r.speedup_ci),
            seconds(r.compile_latency_s),
            cache_text(r),
        ]
        rates = achieved(r.work, r.compiled.median_ms if r.compiled else None)
        row += [*([rate(rates.tflops)] if flops else []), *([rate(rates.gbps)] if bytes_ else [])]
        marks = [*notes(r), *(["slow device"] if on_slow_device(r, slow) else [])]
        row += ["-" if r.graph_breaks is None else str(r.graph_breaks), r.status, ", ".join(marks)]
        rows.append(row)
    right = {"eager ms", "compiled ms", "speedup", "95% CI", "compile s", "TFLOP/s", "GB/s", "breaks"}
    return Rows(title, headers, rows, right)


def cache_text(r: Result) -> str:
    """How the compile caches served the measured compile: ``warm: hit``, ``cold: miss``; the state
    alone for a result from before they were recorded."""
    if r.compile_latency_s is None:
        return "-"
    return r.compile_cache.label if r.compile_cache else r.compile.cache


def groups_rows(summary: Summary) -> Rows:
    """The best configuration of each group, and whether its lead is beyond noise.

    Where some configuration ran replicates, ``CI over`` says which interval ``95% CI`` is (over
    the runs, or within one run), the within-run interval sits beside it, and the GPU spread
    follows where replicates ran on two GPUs or more.
    """
    multi = len({g.device_model for g in summary.groups}) > 1
    ranked = [x for g in summary.groups for x in (g.best, g.runner_up) if x]
    between = any(x.ci_between for x in ranked)
    spread = any(x.spread for x in ranked)
    headers = [*(["device"] if multi else []), "target", "best config", "speedup", "95% CI"]
    headers += [*(["CI over", "within-run CI"] if between else []), *(["GPU spread"] if spread else [])]
    headers += ["runner-up", "runner-up speedup", "verdict", "not ok"]
    rows = []
    for g in summary.groups:
        best, second = g.best, g.runner_up
        if best is None:
            verdict = "no valid timing"
        elif second is None:
            verdict = "only one configuration timed" if len(g.ranked) < 2 else "no rival: the rest are cache twins"
        else:
            verdict = TIE_TEXT if g.tie else "best beyond noise"
        failed = ", ".join(f"{c}: {s}" for c, s in g.failed.items())
        row = [
            *([g.device_model] if multi else []),
            g.label,
            best.config if best else "-",
            times(best.speedup if best else None),
            interval(best.ci if best else None),
        ]
        if between:
            row += [ci_over(best) if best else "-", interval(best.ci_within if best else None)]
        if spread:
            row.append(spread_text(best.spread, best.gpus) if best else "-")
        row += [second.config if second else "-", times(second.speedup if second else None), verdict, failed]
        rows.append(row)
    right = {"speedup", "95% CI", "within-run CI", "GPU spread", "runner-up speedup"}
    notes = [REPLICATES_NOTE] if between else []
    notes += [SPREAD_NOTE] if spread else []
    return Rows("best configuration per group", headers, rows, right, notes)


def ship_rows(summary: Summary) -> Rows:
    """What to ship per group (``Group.decision``): the configuration or eager, the reason, its lower bound
    and break-even, every configuration's break-even in short, and the Pareto set. Groups of a summary
    written before decisions have none and no row."""
    decided = [g for g in summary.groups if g.decision is not None]
    multi = len({g.device_model for g in decided}) > 1
    weighed = any(g.decision and g.decision.calls for g in decided)
    headers = [*(["device"] if multi else []), "target", "ship", "lower bound", "break-even calls", "compile s"]
    headers += [*(["weighed over", "time for the calls"] if weighed else []), "reason"]
    headers += ["every configuration", "Pareto set"]
    rows = []
    shared: dict[str, list[str]] = {}  # a decision's note -> the groups that have it
    for g in decided:
        d = g.decision
        assert d is not None  # decided: for mypy
        chosen = d.config(d.recommend)
        row = [*([g.device_model] if multi else []), g.label, d.recommend, times(d.lower)]
        row += [break_even_text(chosen), seconds(chosen.compile_s if chosen else None)]
        if weighed:
            row += [f"{d.calls:,} calls" if d.calls else "lower bound", calls_time(d, chosen)]
        row += [d.reason, "; ".join(config_brief(c) for c in d.configs), ", ".join(d.pareto) or "-"]
        rows.append(row)
        for note in d.notes:
            shared.setdefault(note, []).append(g.label)
    notes = [SHIP_NOTE] if rows else []
    for note, labels in shared.items():
        where = "every group" if len(labels) == len(decided) > 1 else ", ".join(dict.fromkeys(labels))
        notes.append(f"{where}: {note}")
    right = {"lower bound", "break-even calls", "compile s", "time for the calls"}
    return Rows("what to ship", headers, rows, right, notes)


SHIP_NOTE = (
    "ship: of the configurations ok, checked correct and not recompiled in every run, the one with the highest "
    "lower 95% bound of speedup (over the runs where an experiment ran more than once), if it is above 1.0, else "
    "eager; with decision.calls N (or a replay's own calls), the one that serves N calls in the least time, "
    "compile included, if that is less than eager's and its speedup is beyond noise. break-even: compile latency "
    "over the time a call saves, with the compile latency named (a warm configuration is charged its cold "
    "twin's where the group measured one). Pareto set: not dominated on lower bound, compile latency and peak "
    "memory."
)


def break_even_text(c: ConfigDecision | None) -> str:
    """``1,234 (cold: miss)``: calls until the compile has paid for itself, and whose compile latency."""
    if c is None or c.break_even_calls is None:
        return "-"
    return f"{c.break_even_calls:,.0f}" + (f" ({c.compile_label})" if c.compile_label else "")


def calls_time(d: Decision, c: ConfigDecision | None) -> str:
    """The recommended configuration's time for the decision's calls against eager's: ``2.27 s vs 3.80 s``."""
    if c is None or c.calls_ms is None or c.eager_calls_ms is None:
        return "-"
    return f"{seconds(c.calls_ms / 1e3)} s vs eager {seconds(c.eager_calls_ms / 1e3)} s"


def config_brief(c: ConfigDecision) -> str:
    """One configuration in short: ``inductor >=1.87x, 910 calls`` or ``inductor+cold: compile_error``."""
    if not c.candidate:
        return f"{c.config}: {c.excluded or 'not a candidate'}"
    lower = f">={c.lower:.2f}x" if c.lower is not None else times(c.speedup)
    calls = "-" if c.break_even_calls is None else f"{c.break_even_calls:,.0f}"
    paid = "never pays" if c.break_even_calls is None else f"{calls} call" + ("" if calls == "1" else "s")
    return f"{c.config} {lower}, {paid}"


def replicates_rows(summary: Summary) -> Rows:
    """Every configuration whose figure is over replicates, ranked or not: its median speedup over the
    runs, the between-run interval beside the within-run one, and the GPU spread."""
    multi = len({g.device_model for g in summary.groups}) > 1
    headers = [*(["device"] if multi else []), "target", "config", "runs", "speedup (median)", "95% CI over runs"]
    headers += ["within-run CI", "GPU spread"]
    rows = [
        [
            *([g.device_model] if multi else []),
            g.label,
            x.config,
            str(x.replicates),
            times(x.speedup),
            interval(x.ci_between),
            interval(x.ci_within),
            spread_text(x.spread, x.gpus),
        ]
        for g in summary.groups
        for x in g.ranked
        if x.ci_between
    ]
    right = {"runs", "speedup (median)", "95% CI over runs", "within-run CI", "GPU spread"}
    return Rows("between runs: configurations with replicates", headers, rows, right, [REPLICATES_NOTE] if rows else [])


def ci_over(ranked: Ranked) -> str:
    """What a configuration's ranking interval is over: ``3 runs`` (its replicates) or ``one run``."""
    if ranked.ci_between is None:
        return "one run"
    return f"{ranked.replicates} runs" if ranked.replicates > 1 else "runs; some seeds one run"


def spread_text(spread: float | None, gpus: int = 0) -> str:
    if spread is None:
        return "-"
    return f"{spread:.3f}x" + (f" ({gpus} GPUs)" if gpus else "")


def device_rows(device: DeviceSummary) -> Rows:
    """Pass rate and geometric means of each configuration on one device model, over one set of groups.

    The pass rate counts results judged correct; ok results never checked get a column of their own
    when there are any. Where some group's figure comes from replicates, ``CI over`` says how many of
    the mean's groups are between runs, beside the within-run interval and the largest GPU spread.
    """
    comparable = bool(device.common)
    over = "common" if comparable else "own"
    means = [c.common if comparable else c.own for c in device.configs]
    checked_apart = any(c.unchecked for c in device.configs)
    between = any(g and g.between for g in means)
    spread = any(g and g.spread for g in means)
    headers = ["config", "pass rate", *(["unchecked"] if checked_apart else []), f"speedup ({over})", "95% CI"]
    headers += [*(["CI over", "within-run CI"] if between else []), *(["GPU spread"] if spread else [])]
    headers += ["compile s", "cache", "memory ratio", "n", "not ok"]
    rows = []
    for c, g in zip(device.configs, means, strict=True):
        passed = c.ok if c.passed is None else c.passed  # a summary written before: ok counted as passes
        row = [c.config, f"{passed}/{c.results} ({c.pass_rate:.0%})"]
        if checked_apart:
            row.append(str(c.unchecked or 0))
        row += [times(g.speedup if g else None), interval(g.ci if g else None)]
        if between:
            row += [mean_over(g), interval(g.ci_within if g else None)]
        if spread:
            row.append(spread_text(g.spread if g else None))
        row += [
            seconds(g.compile_latency_s if g else None),
            (g.compile_cache or "-") if g else "-",
            times(g.memory_ratio if g else None),
            str(g.n if g else 0),
            ", ".join(f"{n} {s}" for s, n in c.counts.items()),
        ]
        rows.append(row)
    notes = []
    if comparable:
        notes.append(
            f"Geometric means over the {len(device.common)} group(s) every configuration timed: "
            + ", ".join(device.common)
        )
    elif len(device.configs) > 1:
        notes.append(
            "No group was timed under every configuration: each mean is over the configuration's own "
            "groups (n) and the means are not comparable with each other."
        )
    if comparable:
        notes += [f"left out: {left.group} ({left.reason})" for left in device.left_out]
    if checked_apart or between:
        notes.append(
            "pass rate: results judged correct over all results, every replicate counted; "
            "unchecked: ok but never checked for correctness, not counted as passes."
        )
    if between:
        notes.append(
            "95% CI: combines each group's between-run interval (over its replicates) where it has one, "
            "else its within-run one; within-run CI: the same mean with within-run noise alone."
        )
    right = {f"speedup ({over})", *DEVICE_NUMBERS}
    return Rows(f"{device.device_model}: configurations", headers, rows, right, notes)


def mean_over(g: GeoMean | None) -> str:
    """What a geometric mean's interval is over: ``runs in every group`` (each group's replicates), ``one
    run``, or in how many of its groups it is over runs."""
    if g is None:
        return "-"
    if g.between == 0:
        return "one run"
    return "runs in every group" if g.between == g.n else f"runs in {g.between} of {g.n} groups"


def calibration_rows(calibration: Sequence[Calibration]) -> Rows:
    """Each calibrated worker's device: its probe's figures, and whether it is slow for its model, and why."""
    rows = [
        [
            c.id,
            c.model,
            ", ".join(f"{name} {figure(value)}" for name, value in c.figures.items()),
            "slow" if c.slow else "",
            "; ".join(c.slow_reasons),
        ]
        for c in calibration
    ]
    notes = [
        f"slow: a figure more than {SLOW_THRESHOLD:.0%} below the median of the other devices of the same model, "
        "or not measured where they measured it (the reasons say which)."
    ]
    return Rows("calibration", ["id", "model", "figures", "slow", "reasons"], rows, notes=notes)


def failures_rows(results: Sequence[Result]) -> Rows:
    """Every result that is not ok, with its error's type and first line."""
    rows = [
        [
            group_label(r.target, r.params, r.phase, r.precision),
            r.config_label,
            r.status,
            r.error.type.rsplit(".", 1)[-1] if r.error else "-",
            first_line(r.error.message) if r.error else (r.check_note or ""),
        ]
        for r in results
        if r.status != "ok"
    ]
    return Rows("failures", ["target", "config", "status", "error", "message"], rows)


def recompiled_rows(summary: Summary) -> Rows:
    rows = [[r.target, r.config, r.experiment_id, "; ".join(r.reasons[:2])] for r in summary.recompiled]
    return Rows(
        "recompiled inside the timed window (kept out of bests and means)",
        ["target", "config", "id", "reasons"],
        rows,
    )


def views(report: Report) -> Iterator[Rows]:
    """The summary views, in reading order; empty ones are skipped."""
    from orchestrator.report.replay import replay_rows  # here: it formats with this module's helpers

    summary = report.summary
    yield groups_rows(summary)
    ship = ship_rows(summary)
    if ship.rows:
        yield ship
    replayed = replay_rows(report.results)
    if replayed.rows:
        yield replayed
    replicated = replicates_rows(summary)
    if replicated.rows:
        yield replicated
    for device in summary.devices:
        yield device_rows(device)
    calibration = calibration_rows(report.environment.calibration)
    for extra in (calibration, recompiled_rows(summary), failures_rows(report.results)):
        if extra.rows:
            yield extra


# ------------------------------------------------------------------------------------- terminal


def rich_table(rows: Rows) -> Table:
    """The rows as a rich table; cells are plain text (never markup), failures and regressions in red."""
    table = Table(title=Text(rows.title, style="table.title"))
    for name in rows.headers:  # long words (configuration labels) wrap rather than lose their end
        table.add_column(name, justify="right" if name in rows.right else "left", overflow="fold")
    for row in rows.rows:
        cells = [
            Text(cell, style="red" if bad(header, cell) else "") for header, cell in zip(rows.headers, row, strict=True)
        ]
        table.add_row(*cells)
    return table


def bad(header: str, cell: str) -> bool:
    """A cell shown in red: a status other than ok, a regression, a slow device."""
    return (header == "status" and cell != "ok") or cell == "REGRESSION" or (header == "slow" and cell == "slow")


def results_table(
    results: Sequence[Result], title: str | None = None, calibration: Sequence[Calibration] = ()
) -> Table:
    return rich_table(results_rows(results, title or "results", calibration))


def summary_table(summary: Summary) -> Table:
    """The best configuration of each group (the device tables follow in ``print_report``)."""
    return rich_table(groups_rows(summary))


def print_report(console: Console, report: Report, results: bool = True) -> None:
    """The whole report on a terminal: warnings first, the results, then the summary."""
    for line in headline(report)[:-1]:
        console.print(Text(line, style="bold yellow"), soft_wrap=True)
    if results:
        console.print(results_table(report.results, title=report.name, calibration=report.environment.calibration))
    for view in views(report):
        console.print(rich_table(view))
        for note in view.notes:
            console.print(Text(f"  {note}"), soft_wrap=True)
    console.print(Text(headline(report)[-1]))


# ------------------------------------------------------------------------------------- markdown


def markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown, for pull requests and wikis."""
    out = [f"# {report.name}", ""]
    lines = headline(report)
    for line in lines[:-1]:  # each warning a quoted paragraph of its own
        out += [f"> **{line}**", ""]
    out += [lines[-1], "", markdown_table(results_rows(report.results, calibration=report.environment.calibration))]
    for view in views(report):
        out += ["", markdown_table(view)]
        out += [f"- {note}" for note in view.notes]
    env = report.environment
    out += ["", f"torch {env.torch}, Python {env.python}, Ray {env.ray}, {env.platform}; created {report.created_at}"]
    return "\n".join(out) + "\n"


def markdown_table(rows: Rows) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ") or " "

    lines = [f"**{rows.title}**", "", "| " + " | ".join(rows.headers) + " |"]
    lines.append("| " + " | ".join("---:" if h in rows.right else "---" for h in rows.headers) + " |")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows.rows]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ CSV

CSV_COLUMNS = [
    "experiment_id", "target", "params", "phase", "precision", "device", "device_model", "gpu_model",
    "backend", "mode", "fullgraph", "dynamic", "method", "cache", "options", "seed",
    "status", "error_type", "error_message", "correct",
    "eager_median_ms", "eager_min_ms", "eager_iqr_ms", "eager_n", "eager_first_call_ms", "eager_peak_memory_bytes",
    "compiled_median_ms", "compiled_min_ms", "compiled_iqr_ms", "compiled_n", "compiled_first_call_ms",
    "compiled_peak_memory_bytes", "speedup", "speedup_ci_low", "speedup_ci_high", "memory_ratio",
    "compile_latency_s", "graphs_compiled", "graph_count", "graph_breaks", "recompiled",
    "flops", "bytes", "eager_tflops", "eager_gbps", "compiled_tflops", "compiled_gbps",
    "attempts", "hostname", "gpu_name", "cpu_model", "started_at", "finished_at",
]  # fmt: skip


def csv_text(report: Report) -> str:
    """One row per result, flat columns (params and options as JSON), for spreadsheets and pandas.

    ``replicate`` follows ``experiment_id`` when some experiment ran more than once; ``calibration``
    (the worker's entry) and ``slow`` close the row when the report holds calibrated workers.
    """
    columns = list(CSV_COLUMNS)
    if has_replicates(report.results):
        columns.insert(1, "replicate")
    slow = slow_devices(report.environment.calibration)
    calibrated = bool(report.environment.calibration) or any(r.worker and r.worker.calibration for r in report.results)
    if calibrated:
        columns += ["calibration", "slow"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for r in report.results:
        row = csv_row(r)
        if calibrated:
            entry = r.worker.calibration if r.worker else None
            row |= {"calibration": entry.id if entry else None, "slow": on_slow_device(r, slow) if entry else None}
        writer.writerow(row)
    return buffer.getvalue()


def csv_row(r: Result) -> dict[str, Any]:
    def side(prefix: str, s: SideTiming | None) -> dict[str, Any]:
        keys = ("median_ms", "min_ms", "iqr_ms", "n", "first_call_ms", "peak_memory_bytes")
        return {f"{prefix}_{k}": getattr(s, k) if s else None for k in keys}

    work, worker, ci = r.work, r.worker, r.speedup_ci
    eager_rates = achieved(work, r.eager.median_ms if r.eager else None)
    compiled_rates = achieved(work, r.compiled.median_ms if r.compiled else None)
    return {
        "experiment_id": r.experiment_id,
        "replicate": r.replicate,
        "target": r.target,
        "params": json.dumps(r.params, sort_keys=True),
        "phase": r.phase,
        "precision": r.precision,
        "device": r.device,
        "device_model": device_model(r),
        "gpu_model": r.gpu_model,
        "backend": r.compile.backend,
        "mode": r.compile.mode,
        "fullgraph": r.compile.fullgraph,
        "dynamic": r.compile.dynamic,
        "method": r.compile.method,
        "cache": r.compile.cache,
        "options": json.dumps(r.compile.options, sort_keys=True) if r.compile.options else "",
        "seed": r.seed,
        "status": r.status,
        "error_type": r.error.type if r.error else None,
        "error_message": first_line(r.error.message) if r.error else None,
        "correct": r.correct,
        **side("eager", r.eager),
        **side("compiled", r.compiled),
        "speedup": r.speedup,
        "speedup_ci_low": ci[0] if ci else None,
        "speedup_ci_high": ci[1] if ci else None,
        "memory_ratio": r.memory_ratio,
        "compile_latency_s": r.compile_latency_s,
        "graphs_compiled": r.graphs_compiled,
        "graph_count": r.graph_count,
        "graph_breaks": r.graph_breaks,
        "recompiled": r.recompiled,
        "flops": work.flops if work else None,
        "bytes": work.bytes if work else None,
        "eager_tflops": eager_rates.tflops,
        "eager_gbps": eager_rates.gbps,
        "compiled_tflops": compiled_rates.tflops,
        "compiled_gbps": compiled_rates.gbps,
        "attempts": r.attempts,
        "hostname": worker.hostname if worker else None,
        "gpu_name": worker.gpu_name if worker else None,
        "cpu_model": worker.cpu_model if worker else None,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    }


# ------------------------------------------------------------------------------ number formatting


def notes(r: Result) -> list[str]:
    out = ["recompiled"] if r.recompiled else []
    noisy = [name for name, side in (("eager", r.eager), ("compiled", r.compiled)) if side and side.noisy]
    if noisy:
        out.append(f"noisy {'both' if len(noisy) == 2 else noisy[0]}")  # IQR over 10% of the median
    if r.status == "ok" and r.correct is None:
        out.append("unchecked")
    return out


def ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 0.1 else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def times(value: float | None) -> str:
    return "-" if not value else f"{value:.2f}x"


def interval(ci: tuple[float, float] | None) -> str:
    return "-" if not ci else f"{ci[0]:.2f}-{ci[1]:.2f}"


def figure(value: float) -> str:
    """A calibration figure: 3 significant digits, whole numbers from 100 up (``51.2``, ``2890``)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def rate(value: float | None) -> str:
    """An achieved rate (TFLOP/s, GB/s) to 3 significant digits; what is below 0.001 says so."""
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3g}"


def first_line(message: str, limit: int = 160) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
