"""``compilebench``: a thin command line over ``orchestrator.api``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

# Heavy modules (torch, Ray, inductor) are imported inside the commands that need them, so
# that --help and the report-reading commands start at once.
if TYPE_CHECKING:
    from orchestrator.cluster import ClusterInfo
    from orchestrator.spec import Spec
    from tasks.models import Result

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark torch.compile against eager on every GPU of a Ray cluster (or on the CPU).",
)
_WIDTH = None if sys.stdout.isatty() else 160  # wide enough for the results table in logs and pipes
out_console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)


def _fail(message: str, code: int) -> typer.Exit:
    err_console.print(f"[bold red]error:[/bold red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _load(spec: Path) -> Spec:
    from orchestrator.spec import SpecError, load_spec

    try:
        return load_spec(spec)
    except SpecError as e:
        raise _fail(str(e), 2) from None


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the JSON report.")],
    address: Annotated[
        str | None, typer.Option(help="Ray cluster to join: 'auto', 'host:port' or 'ray://host:port'.")
    ] = None,
    num_gpus: Annotated[
        int | None, typer.Option(min=0, help="Logical GPUs of the local Ray instance (no --address).")
    ] = None,
    num_cpus: Annotated[int | None, typer.Option(min=1, help="CPUs of the local Ray instance (default: all).")] = None,
) -> None:
    """Run every experiment of SPEC and write the report to OUT."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator import api
    from orchestrator.cluster import ClusterError
    from orchestrator.report import results_table, summary_table

    if address and (num_gpus is not None or num_cpus is not None):
        raise _fail("--num-gpus and --num-cpus describe a local Ray instance; drop them with --address", 2)
    loaded = _load(spec)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console
    )
    task = progress.add_task("experiments", total=len(loaded.experiments))

    def on_start(spec: Spec, cluster: ClusterInfo) -> None:
        gpus = f", {cluster.gpus} GPU(s)" if cluster.gpus else ""
        err_console.print(f"{spec.name}: {len(spec.experiments)} experiments on {len(cluster.nodes)} node(s){gpus}")
        progress.start()

    def on_result(result: Result) -> None:
        progress.update(task, advance=1, description=f"{result.target} {result.status}")

    try:
        report = api.run(
            loaded, out, address=address, num_gpus=num_gpus, num_cpus=num_cpus, on_start=on_start, on_result=on_result
        )
    except ClusterError as e:
        raise _fail(str(e), 1) from None
    finally:
        progress.stop()
    out_console.print(results_table(report.results, title=report.name))
    if report.summary.geomean_by_config:
        out_console.print(summary_table(report.summary))
    for r in report.summary.recompiled:
        out_console.print(
            f"[yellow]recompiled[/yellow] {r.target} {r.config} ({r.experiment_id}): {'; '.join(r.reasons[:2])}"
        )
    counts = ", ".join(f"{n} {status}" for status, n in report.summary.counts.items() if n)
    out_console.print(f"{counts}. Report: {out}")


@app.command()
def validate(spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")]) -> None:
    """Check SPEC and list the experiments it expands to; runs nothing."""
    loaded = _load(spec)
    table = Table(title=f"{loaded.name}: {len(loaded.experiments)} experiments")
    for column in ("id", "target", "params", "device", "config"):
        table.add_column(column)
    for exp in loaded.experiments:
        params = " ".join(f"{k}={v}" for k, v in exp.params.items())
        table.add_row(exp.id, exp.target, params, exp.device, exp.compile.label())
    out_console.print(table)
    out_console.print(f"{spec}: valid, {len(loaded.experiments)} experiments")


@app.command()
def tasks() -> None:
    """List the built-in targets and their parameters."""
    from tasks.targets import REGISTRY, params_of

    table = Table(title="built-in targets")
    for column in ("target", "params (defaults)", "description"):
        table.add_column(column)
    for name, target in sorted(REGISTRY.items()):
        params = ", ".join(f"{k}={'required' if v is ... else v}" for k, v in params_of(target.factory).items())
        table.add_row(name, params, target.description)
    out_console.print(table)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
