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

from orchestrator.report.models import DeviceSummary, Report, Summary, group_label
from orchestrator.report.summary import device_model
from tasks.models import Result, SideTiming
from tasks.throughput import achieved

TIE_TEXT = "tie within noise"


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
    lines.append(counts_text(report.summary))
    return lines


def counts_text(summary: Summary) -> str:
    shown = ", ".join(f"{n} {status}" for status, n in summary.counts.items() if n)
    return f"{sum(summary.counts.values())} results: {shown or 'none'}"


def results_rows(results: Sequence[Result], title: str = "results") -> Rows:
    """One row a result: times, speedup and interval, compile latency, achieved throughput, status.

    TFLOP/s and GB/s are the compiled side's (eager's: divide by the speedup), shown when some
    result counted that kind of work.
    """
    flops = any(r.work and r.work.flops for r in results)
    bytes_ = any(r.work and r.work.bytes for r in results)
    models = {device_model(r) for r in results}
    headers = ["target", *(["device"] if len(models) > 1 else []), "config"]
    headers += ["eager ms", "compiled ms", "speedup", "95% CI", "compile s", "cache"]
    headers += [*(["TFLOP/s"] if flops else []), *(["GB/s"] if bytes_ else [])]
    headers += ["breaks", "status", "notes"]
    rows = []
    for r in results:
        row = [group_label(r.target, r.params, r.phase, r.precision)]
        if len(models) > 1:
            row.append(device_model(r) or "-")
        row += [
            r.config_label,
            ms(r.eager.median_ms if r.eager else None),
            ms(r.compiled.median_ms if r.compiled else None),
            times(r.speedup),
            interval(r.speedup_ci),
            seconds(r.compile_latency_s),
            cache_text(r),
        ]
        rates = achieved(r.work, r.compiled.median_ms if r.compiled else None)
        row += [*([rate(rates.tflops)] if flops else []), *([rate(rates.gbps)] if bytes_ else [])]
        row += ["-" if r.graph_breaks is None else str(r.graph_breaks), r.status, ", ".join(notes(r))]
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
    """The best configuration of each group, and whether its lead is beyond noise."""
    multi = len({g.device_model for g in summary.groups}) > 1
    headers = [*(["device"] if multi else []), "target", "best config", "speedup", "95% CI"]
    headers += ["runner-up", "runner-up speedup", "verdict", "not ok"]
    rows = []
    for g in summary.groups:
        best, second = g.best, g.runner_up
        if best is None:
            verdict = "no valid timing"
        elif second is None:
            verdict = "only one configuration timed"
        else:
            verdict = TIE_TEXT if g.tie else "best beyond noise"
        failed = ", ".join(f"{c}: {s}" for c, s in g.failed.items())
        rows.append(
            [
                *([g.device_model] if multi else []),
                g.label,
                best.config if best else "-",
                times(best.speedup if best else None),
                interval(best.ci if best else None),
                second.config if second else "-",
                times(second.speedup if second else None),
                verdict,
                failed,
            ]
        )
    return Rows("best configuration per group", headers, rows, {"speedup", "95% CI", "runner-up speedup"})


def device_rows(device: DeviceSummary) -> Rows:
    """Pass rate and geometric means of each configuration on one device model, over one set of groups."""
    comparable = bool(device.common)
    over = "common" if comparable else "own"
    headers = ["config", "pass rate", f"speedup ({over})", "95% CI", "compile s", "cache", "memory ratio", "n"]
    headers.append("not ok")
    rows = []
    for c in device.configs:
        g = c.common if comparable else c.own
        rows.append(
            [
                c.config,
                f"{c.ok}/{c.results} ({c.pass_rate:.0%})",
                times(g.speedup if g else None),
                interval(g.ci if g else None),
                seconds(g.compile_latency_s if g else None),
                (g.compile_cache or "-") if g else "-",
                times(g.memory_ratio if g else None),
                str(g.n if g else 0),
                ", ".join(f"{n} {s}" for s, n in c.counts.items()),
            ]
        )
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
    right = {f"speedup ({over})", "95% CI", "compile s", "memory ratio", "n"}
    return Rows(f"{device.device_model}: configurations", headers, rows, right, notes)


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
    summary = report.summary
    yield groups_rows(summary)
    for device in summary.devices:
        yield device_rows(device)
    for extra in (recompiled_rows(summary), failures_rows(report.results)):
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
            Text(cell, style="red" if (header == "status" and cell != "ok") or cell == "REGRESSION" else "")
            for header, cell in zip(rows.headers, row, strict=True)
        ]
        table.add_row(*cells)
    return table


def results_table(results: Sequence[Result], title: str | None = None) -> Table:
    return rich_table(results_rows(results, title or "results"))


def summary_table(summary: Summary) -> Table:
    """The best configuration of each group (the device tables follow in ``print_report``)."""
    return rich_table(groups_rows(summary))


def print_report(console: Console, report: Report, results: bool = True) -> None:
    """The whole report on a terminal: warnings first, the results, then the summary."""
    for line in headline(report)[:-1]:
        console.print(Text(line, style="bold yellow"), soft_wrap=True)
    if results:
        console.print(results_table(report.results, title=report.name))
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
    out += [lines[-1], "", markdown_table(results_rows(report.results))]
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
    """One row per result, flat columns (params and options as JSON), for spreadsheets and pandas."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in report.results:
        writer.writerow(csv_row(r))
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


def rate(value: float | None) -> str:
    """An achieved rate (TFLOP/s, GB/s) to 3 significant digits; what is below 0.001 says so."""
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3g}"


def first_line(message: str, limit: int = 160) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
