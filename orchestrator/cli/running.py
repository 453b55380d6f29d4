"""The commands that run or check a sweep: ``run``, ``validate``, ``tasks`` and ``schema``.

Each parses its options, calls one library function (``orchestrator.api``, the spec's loader) and prints.
Heavy modules (torch, Ray, inductor) are imported inside the commands that need them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from orchestrator.cli.common import err_console, fail, out_console
from orchestrator.cli.reading import write_html

if TYPE_CHECKING:
    from orchestrator.api import RunPlan
    from orchestrator.plan.spec import Spec


def _load(spec: Path) -> Spec:
    from orchestrator.plan.spec import SpecError, load_spec

    try:
        return load_spec(spec)
    except SpecError as e:
        raise fail(str(e), 2) from None


def run(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    out: Annotated[
        str,
        typer.Option(
            "--out", "-o", help="Where to write the JSON report: a path, or a URL such as s3://bucket/run/r.json."
        ),
    ],
    address: Annotated[
        str | None, typer.Option(help="Ray cluster to join: 'auto', 'host:port' or 'ray://host:port'.")
    ] = None,
    num_gpus: Annotated[
        int | None, typer.Option(min=0, help="Logical GPUs of the local Ray instance (no --address).")
    ] = None,
    num_cpus: Annotated[int | None, typer.Option(min=1, help="CPUs of the local Ray instance (default: all).")] = None,
    html: Annotated[
        str | None, typer.Option("--html", help="Also write the report as one HTML page (a path or a URL).")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Keep the results in OUT's journal and run only the rest.")
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Start over, emptying OUT's journal and removing its traces (OUT.traces/)."),
    ] = False,
    pending_timeout: Annotated[
        float,
        typer.Option(min=0, help="With --address: seconds an experiment waits for a node that can hold it to join."),
    ] = 900.0,
    worker_start_timeout: Annotated[
        float,
        typer.Option(
            min=1,
            help="Seconds Ray may take to place and start a worker; three failed starts in a row and its "
            "experiments wait for a node that fits (unschedulable at once without --address).",
        ),
    ] = 600.0,
    worker_max_experiments: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Experiments a worker runs in its process before a fresh one replaces it (default 200; an "
            "experiment's own worker.max_experiments wins).",
        ),
    ] = None,
    worker_max_rss_growth_mb: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="MiB of resident memory a worker may gain before a fresh one replaces it (default 4096; an "
            "experiment's own worker.max_rss_growth_mb wins).",
        ),
    ] = None,
    working_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory shipped to every worker (user targets). Default with --address: the current one "
            "when the spec names a target by import path."
        ),
    ] = None,
    calibrate: Annotated[
        bool,
        typer.Option(
            "--calibrate",
            help="Every worker first probes its device (~1 s: GEMM TFLOP/s and copy GB/s on a GPU, matmul and "
            "copy on the CPU); a device over 5% below its model's median is flagged slow in the report.",
        ),
    ] = False,
    exclude_slow: Annotated[
        bool,
        typer.Option(
            "--exclude-slow",
            help="With calibration (implied): a worker whose device is slow runs nothing; the others run its queue.",
        ),
    ] = False,
    compile_cache: Annotated[
        str | None,
        typer.Option(
            "--compile-cache",
            help="Directory every node sees, or object-store URL (s3://bucket/compile-cache), where experiments "
            "with compile.cache: shared load and store their compile artifacts; checked writable before Ray starts.",
        ),
    ] = None,
) -> None:
    """Run every experiment of SPEC and write the report to OUT (its journal: OUT's name + .journal.jsonl, or
    the objects under OUT's name + .journal/ in an object store).

    Exit 0 when the sweep finished, 2 for a bad spec or usage, 1 when the cluster cannot be
    reached, 130 when interrupted (Ctrl-C, SIGTERM: the report holds what finished; --resume
    runs the rest).
    """
    from orchestrator import api
    from orchestrator.execution.cluster import ClusterError
    from orchestrator.plan.paths import out_problem
    from orchestrator.report import print_report
    from orchestrator.report.progress import RunProgress
    from orchestrator.store.storage import StorageError

    if address and (num_gpus is not None or num_cpus is not None):
        raise fail("--num-gpus and --num-cpus describe a local Ray instance; drop them with --address", 2)
    if resume and overwrite:
        raise fail("--resume keeps the journal's results and --overwrite discards them; choose one", 2)
    loaded = _load(spec)
    if problem := out_problem(out) or (out_problem(html, "--html") if html else None):
        raise fail(problem, 2)  # before Ray starts: a report that cannot be written would lose the sweep
    progress = RunProgress(len(loaded.experiments), err_console)

    plans: list[RunPlan] = []

    def on_start(plan: RunPlan) -> None:
        plans.append(plan)
        cluster, n = plan.cluster, len(plan.spec.experiments)
        runs = sum(e.replicates for e in plan.spec.experiments)
        gpus = f", {cluster.gpus} GPU(s)" if cluster.gpus else ""
        replicated = f" ({runs} runs with their replicates)" if runs != n else ""
        kept = f" ({len(plan.kept)} kept from the journal, {len(plan.todo)} to run)" if plan.kept else ""
        err_console.print(f"{plan.spec.name}: {n} experiments{replicated}{kept} on {len(cluster.nodes)} node(s){gpus}")
        for note in plan.notes:
            err_console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
        progress.progress.update(progress.task, total=len(plan.todo))
        progress.start()

    try:
        report = api.run(
            loaded,
            out,
            address=address,
            num_gpus=num_gpus,
            num_cpus=num_cpus,
            on_start=on_start,
            on_result=progress.on_result,
            resume=resume,
            overwrite=overwrite,
            pending_timeout_s=pending_timeout if address else 0.0,
            worker_start_timeout_s=worker_start_timeout,
            worker_limits=api.WorkerLimits(
                max_experiments=worker_max_experiments, max_rss_growth_mb=worker_max_rss_growth_mb
            ),
            working_dir=working_dir,
            calibrate=calibrate,
            exclude_slow=exclude_slow,
            compile_cache=compile_cache,
        )
    except (api.JournalError, api.CompileCacheError, api.SpecError) as e:
        raise fail(str(e), 2) from None
    except ClusterError as e:
        raise fail(str(e), 1) from None
    except StorageError as e:  # the report could not be written to its store; the journal holds every result
        raise fail(f"{e} (every result is in the journal: rerun with --resume to write the report)", 1) from None
    except api.RunInterrupted as e:
        progress.stop()
        print_report(out_console, e.report)
        total = sum(e.replicates for e in (plans[0].spec if plans else loaded).experiments)
        err_console.print(
            f"interrupted: {len(e.report.results)} of {total} runs finished. "
            f"Report (incomplete): {out}; rerun with --resume to run the rest",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    finally:
        progress.stop()
    for warning in report.environment.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    from orchestrator.report.views import views

    shown = list(views(report))  # the terminal's tables and the page's: worked out once
    print_report(out_console, report, shown=shown)
    if html is not None:
        write_html(report, html, shown)
    out_console.print(f"Report: {out}" + (f", {html}" if html else ""), highlight=False)


def validate(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    all_rows: Annotated[
        bool, typer.Option("--all", help="List every experiment, however many (past 40: a row per configuration).")
    ] = False,
    format: Annotated[
        Literal["table", "json"], typer.Option("--format", "-f", help="table, or json: every experiment's row.")
    ] = "table",
) -> None:
    """Check SPEC and list the experiments it expands to (past a screenful, a row per target and configuration);
    runs nothing."""
    from orchestrator.plan.listing import COLUMNS, SCREENFUL, SUMMARY_COLUMNS, experiment_row, rows_json, summary_rows

    loaded = _load(spec)
    if format == "json":
        sys.stdout.write(rows_json(loaded.experiments))
        return
    n = len(loaded.experiments)
    whole = all_rows or n <= SCREENFUL
    table = Table(title=f"{loaded.name}: {n} experiments" + ("" if whole else ", by target and configuration"))
    for column in COLUMNS if whole else SUMMARY_COLUMNS:
        table.add_column(column, justify="right" if column == "experiments" else "left")
    for row in [experiment_row(e) for e in loaded.experiments] if whole else summary_rows(loaded.experiments):
        table.add_row(*row)
    out_console.print(table)
    if not whole:
        out_console.print("every experiment: --all (a table row each) or --format json", highlight=False)
    every = sum(e.gpu_model == "all" for e in loaded.experiments)
    later = f" ({every} run once on each GPU model of the cluster, counted once here)" if every else ""
    out_console.print(f"{spec}: valid, {n} experiments{later}")


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


def schema() -> None:
    """Print the JSON Schema of the spec file, for editors (VS Code's YAML extension) and validators."""
    import json

    from orchestrator.plan.schema import spec_schema

    sys.stdout.write(json.dumps(spec_schema(), indent=2) + "\n")
