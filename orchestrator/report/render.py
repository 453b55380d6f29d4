"""Rendering a report for people: terminal tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from orchestrator.report.models import Summary
from tasks.models import Result


def results_table(results: Sequence[Result], title: str | None = None) -> Table:
    """target, config, eager ms, compiled ms, speedup, breaks, status: one row a result."""
    table = Table(title=title)
    for name, justify in [
        ("target", "left"),
        ("params", "left"),
        ("config", "left"),
        ("eager ms", "right"),
        ("compiled ms", "right"),
        ("speedup", "right"),
        ("95% CI", "right"),
        ("breaks", "right"),
        ("status", "left"),
        ("notes", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(
            r.target,
            _params_text(r.params),
            r.config_label,
            _ms(r.eager.median_ms if r.eager else None),
            _ms(r.compiled.median_ms if r.compiled else None),
            f"{r.speedup:.2f}x" if r.speedup else "-",
            f"{r.speedup_ci[0]:.2f}-{r.speedup_ci[1]:.2f}" if r.speedup_ci else "-",
            "-" if r.graph_breaks is None else str(r.graph_breaks),
            r.status if r.status == "ok" else f"[red]{r.status}[/red]",
            ", ".join(_notes(r)),
        )
    return table


def summary_table(summary: Summary) -> Table:
    """Geometric-mean speedup of each configuration, with its interval, per device model."""
    table = Table(title="geometric-mean speedup by configuration")
    for name, justify in [("device", "left"), ("config", "left"), ("speedup", "right"), ("95% CI", "right")]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("n", justify="right")
    table.add_column("targets")
    for model, configs in summary.geomean_by_device_model.items():
        for config, g in configs.items():
            table.add_row(
                model, config, f"{g.speedup:.2f}x", f"{g.ci[0]:.2f}-{g.ci[1]:.2f}", str(g.n), ", ".join(g.targets)
            )
    return table


def _notes(r: Result) -> list[str]:
    notes = ["[yellow]recompiled[/yellow]"] if r.recompiled else []
    noisy = [name for name, side in (("eager", r.eager), ("compiled", r.compiled)) if side and side.noisy]
    if noisy:
        notes.append(f"noisy:{'+'.join(noisy)}")
    if r.compile.cache == "cold":
        notes.append(f"cold compile {r.compile_latency_s:.1f}s" if r.compile_latency_s else "cold")
    return notes


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 0.1 else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())
