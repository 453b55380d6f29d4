"""The report: a versioned JSON envelope of results, a summary derived from them, a table."""

from __future__ import annotations

import os
import platform
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, Field
from rich.table import Table

from orchestrator.cluster import ClusterInfo, Node
from tasks.models import Result, Status
from tasks.stats import geomean, geomean_ci

SCHEMA_VERSION: Final = 1


class Environment(BaseModel):
    python: str
    torch: str
    ray: str
    platform: str
    cluster_address: str | None = None
    nodes: list[Node] = Field(default_factory=list)


class Best(BaseModel):
    experiment_id: str
    config: str
    params: dict[str, Any]
    speedup: float


class GeoMean(BaseModel):
    speedup: float
    ci: tuple[float, float]  # 95% bootstrap interval over every result's raw samples
    n: int
    targets: list[str]


class Recompiled(BaseModel):
    experiment_id: str
    target: str
    config: str
    reasons: list[str]


class Summary(BaseModel):
    counts: dict[str, int]
    recompiled: list[Recompiled]  # compiled timings not trusted: kept out of bests and means
    best_by_target: dict[str, Best]
    geomean_by_config: dict[str, GeoMean]
    geomean_by_device_model: dict[str, dict[str, GeoMean]]


class Report(BaseModel):
    schema_version: Literal[1] = SCHEMA_VERSION
    created_at: str
    name: str
    spec: dict[str, Any]
    environment: Environment
    results: list[Result]
    summary: Summary


def environment(cluster: ClusterInfo | None) -> Environment:
    import ray
    import torch

    return Environment(
        python=platform.python_version(),
        torch=torch.__version__,
        ray=ray.__version__,
        platform=platform.platform(),
        cluster_address=cluster.address if cluster else None,
        nodes=cluster.nodes if cluster else [],
    )


def build_report(name: str, spec: dict[str, Any], results: Sequence[Result], env: Environment) -> Report:
    return Report(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        name=name,
        spec=spec,
        environment=env,
        results=list(results),
        summary=summarize(results),
    )


def device_model(result: Result) -> str:
    """The hardware a result was measured on: the GPU's name, or the CPU's."""
    worker = result.worker
    if result.device == "cuda" and worker and worker.gpu_name:
        return worker.gpu_name
    return f"CPU ({worker.cpu_model})" if worker and worker.cpu_model else "CPU"


def summarize(results: Sequence[Result]) -> Summary:
    """Counts by status; per target the best configuration; geometric-mean speedups.

    Geometric means are taken over every ``ok`` result of a configuration, slowdowns
    included as they are (a 0.5x result pulls the mean down; nothing is clipped at 1).
    Results that compiled inside their timed window, or hit the recompile limit, are
    listed apart and kept out of the bests and the means.
    """
    counts = Counter({status: 0 for status in get_args(Status)})
    counts.update(r.status for r in results)
    recompiled = [
        Recompiled(experiment_id=r.experiment_id, target=r.target, config=r.config_label, reasons=r.recompile_reasons)
        for r in results
        if r.recompiled
    ]
    timed = [r for r in results if r.status == "ok" and r.speedup and not r.recompiled]

    best: dict[str, Best] = {}
    for r in timed:
        speedup = r.speedup or 0.0
        if r.target not in best or speedup > best[r.target].speedup:
            best[r.target] = Best(
                experiment_id=r.experiment_id, config=r.config_label, params=r.params, speedup=speedup
            )

    by_model: dict[str, list[Result]] = defaultdict(list)
    for r in timed:
        by_model[device_model(r)].append(r)
    return Summary(
        counts=dict(counts),
        recompiled=recompiled,
        best_by_target=best,
        geomean_by_config=_geomeans(timed),
        geomean_by_device_model={model: _geomeans(rs) for model, rs in sorted(by_model.items())},
    )


def _geomeans(results: Sequence[Result]) -> dict[str, GeoMean]:
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        groups[r.config_label].append(r)
    out = {}
    for config, rs in groups.items():
        pairs = [(r.eager.samples_ms, r.compiled.samples_ms) for r in rs if r.eager and r.compiled]
        out[config] = GeoMean(
            speedup=geomean([r.speedup for r in rs if r.speedup]),
            ci=geomean_ci(pairs),
            n=len(rs),
            targets=sorted({r.target for r in rs}),
        )
    return out


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, sync it, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a report is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(report: Report, path: Path) -> None:
    write_atomic(path, report.model_dump_json(indent=2) + "\n")


def load_report(path: Path) -> Report:
    return Report.model_validate_json(path.read_text())


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
