"""``compilebench``: a thin command line over ``orchestrator.api``."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.console import Console
from rich.table import Table

# Heavy modules (torch, Ray, inductor) are imported inside the commands that need them, so
# that --help and the report-reading commands start at once.
if TYPE_CHECKING:
    from orchestrator.api import RunPlan
    from orchestrator.plan.spec import Spec
    from orchestrator.report import Report
    from orchestrator.report.cells import Rows
    from orchestrator.report.digest import Glance

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark torch.compile against eager on every GPU of a Ray cluster (or on the CPU).",
)
# In logs and pipes: room for the results table's 14 columns with no number or verdict wrapped.
_WIDTH = None if sys.stdout.isatty() else 200
out_console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)


def _fail(message: str, code: int) -> typer.Exit:
    err_console.print(f"[bold red]error:[/bold red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _load(spec: Path) -> Spec:
    from orchestrator.plan.spec import SpecError, load_spec

    try:
        return load_spec(spec)
    except SpecError as e:
        raise _fail(str(e), 2) from None


@app.command()
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
        raise _fail("--num-gpus and --num-cpus describe a local Ray instance; drop them with --address", 2)
    if resume and overwrite:
        raise _fail("--resume keeps the journal's results and --overwrite discards them; choose one", 2)
    loaded = _load(spec)
    if problem := out_problem(out) or (out_problem(html, "--html") if html else None):
        raise _fail(problem, 2)  # before Ray starts: a report that cannot be written would lose the sweep
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
        raise _fail(str(e), 2) from None
    except ClusterError as e:
        raise _fail(str(e), 1) from None
    except StorageError as e:  # the report could not be written to its store; the journal holds every result
        raise _fail(f"{e} (every result is in the journal: rerun with --resume to write the report)", 1) from None
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
        _write_html(report, html, shown)
    out_console.print(f"Report: {out}" + (f", {html}" if html else ""), highlight=False)


@app.command()
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


def _read_report(path: str) -> Report:
    """The report at ``path``, its objects frozen out of the cycle collector's scans (``gc.freeze``) before the
    collector is on again: a command reads reports once and keeps them to its end, and a big one is millions
    of objects, which the first collection after the read would otherwise walk (a second at 100,000 results)."""
    import gc

    from orchestrator.report import ReportError, read
    from tasks.heap import collector_paused

    with collector_paused():  # read()'s own pause inside it leaves the collector off until the freeze
        try:
            report = read(path)
        except ReportError as e:
            raise _fail(str(e), 2) from None
        finally:
            gc.freeze()
    return report


def _read_glance(path: str) -> Glance:
    """The report at ``path`` as the gate reads it (``io.load_glance``: a compressed report's digests alone),
    frozen out of the cycle collector's scans as ``_read_report`` does."""
    import gc

    from orchestrator.report import ReportError
    from orchestrator.report.io import load_glance
    from tasks.heap import collector_paused

    with collector_paused():
        try:
            report = load_glance(path)
        except ReportError as e:
            raise _fail(str(e), 2) from None
        finally:
            gc.freeze()
    return report


def _write_html(report: Report, path: str, shown: Sequence[Rows] | None = None) -> None:
    from orchestrator.report.html import render_html

    _write_page(render_html(report, shown), path)


def _write_page(text: str | Iterable[str], path: str) -> None:
    """Write a page (or text in pieces, each written as it comes) to a path or URL; a place that cannot take it
    is exit 2, one line."""
    from orchestrator.report.io import write_atomic_bytes
    from orchestrator.store.storage import StorageError

    pieces = [text] if isinstance(text, str) else text
    try:
        write_atomic_bytes(path, (bytes(piece, "utf-8") for piece in pieces))
    except StorageError as e:
        raise _fail(f"cannot write {e}", 2) from None
    except OSError as e:
        raise _fail(f"cannot write {path}: {e.strerror or e}", 2) from None


@app.command()
def report(
    path: Annotated[
        str,
        typer.Argument(
            help="A report (JSON), or the journal (*.journal.jsonl; *.journal/ in a store) of a run that died; "
            "a path or a URL."
        ),
    ],
    format: Annotated[
        Literal["table", "markdown", "csv"], typer.Option("--format", "-f", help="table, markdown, or csv.")
    ] = "table",
    html: Annotated[
        str | None, typer.Option("--html", help="Also write one self-contained HTML page (a path or a URL).")
    ] = None,
) -> None:
    """Show a report again: tables, Markdown or CSV (one row a result), and an HTML page. Needs no Ray."""
    from orchestrator.report import csv_text, markdown, print_report
    from orchestrator.report.views import views

    loaded = _read_report(path)
    shown = list(views(loaded)) if format == "table" else None  # the terminal's tables and the page's: once
    if format == "table":
        print_report(out_console, loaded, shown=shown)
    else:
        sys.stdout.write(markdown(loaded) if format == "markdown" else csv_text(loaded))
    if html is not None:
        _write_html(loaded, html, shown)
        err_console.print(f"HTML: {html}", highlight=False)


@app.command()
def compare(
    base: Annotated[str, typer.Argument(help="The report to compare against (e.g. main's); a path or a URL.")],
    new: Annotated[str, typer.Argument(help="The report under test; a path or a URL.")],
    threshold: Annotated[
        float, typer.Option(min=0, help="Relative change of the gated metric (--metric) that counts.")
    ] = 0.05,
    metric: Annotated[
        Literal["speedup", "time"],
        typer.Option(help="Gate on the speedup (a machine slower on both sides passes) or the compiled median."),
    ] = "speedup",
    compile_threshold: Annotated[
        float, typer.Option(min=0, help="Relative change of compile latency that counts.")
    ] = 0.15,
    gate_compile: Annotated[
        bool, typer.Option(help="Count compile latency beyond its threshold as a regression (one sample a run).")
    ] = False,
    allow_missing: Annotated[
        bool,
        typer.Option(help="Experiments of BASE missing from NEW, or NEW incomplete: a warning instead of exit 1."),
    ] = False,
    fdr: Annotated[
        float,
        typer.Option(
            "--fdr",
            help="False discovery rate q: a move counts when its Benjamini-Hochberg adjusted p is below q (0 < Q < 1).",
        ),
    ] = 0.05,
    sweep_threshold: Annotated[
        float, typer.Option(min=0, help="Median change across a sweep's experiments that counts as a sweep-wide move.")
    ] = 0.02,
    noise: Annotated[
        str | None,
        typer.Option(
            "--noise",
            help="A/A noise figures (from --save-noise) for device models with too few experiments to measure "
            "their own noise; a path or a URL.",
        ),
    ] = None,
    save_noise: Annotated[
        str | None,
        typer.Option(
            "--save-noise",
            help="BASE and NEW are two runs of the same code: store their run-to-run noise per device model in this "
            "file (other device models' figures in it are kept).",
        ),
    ] = None,
    format: Annotated[
        Literal["table", "markdown", "json"], typer.Option("--format", "-f", help="table, markdown or json.")
    ] = "table",
) -> None:
    """Compare two reports experiment by experiment. Exit 1 on a regression or on experiments missing from NEW,
    0 otherwise, 2 for unreadable input or a bad option."""
    from orchestrator.report.compare import NoiseError, Thresholds, as_json, markdown, print_comparison, read_noise
    from orchestrator.report.compare import compare as compare_reports

    if not 0 < fdr < 1:
        raise _fail(f"--fdr {fdr:g}: the false discovery rate must be between 0 and 1 (e.g. 0.05)", 2)
    try:
        figures = read_noise(noise) if noise is not None else []
    except NoiseError as e:
        raise _fail(f"--noise: {e}", 2) from None
    reports = _read_glance(base), _read_glance(new)
    thresholds = Thresholds(
        speed=threshold,
        compile=compile_threshold,
        fdr=fdr,
        sweep=sweep_threshold,
        gate_compile=gate_compile,
        metric=metric,
        allow_missing=allow_missing,
    )
    names = (str(base), str(new))
    result = compare_reports(*reports, thresholds, names=names, noise=figures)
    if save_noise is not None:
        _save_noise(save_noise, *reports, names)
    if format == "table":
        print_comparison(out_console, result)
    else:
        sys.stdout.write(markdown(result) if format == "markdown" else as_json(result))
    raise typer.Exit(1 if result.fails else 0)


def _save_noise(path: str, base: Glance, new: Glance, names: tuple[str, str]) -> None:
    """Store an A/A pair's noise in ``path`` and say what was stored; exit 2 with one line when it cannot."""
    from orchestrator.report.compare import NoiseError, store_noise

    try:
        figures = store_noise(path, base, new, names)
    except NoiseError as e:
        raise _fail(f"--save-noise: {e}", 2) from None
    for f in figures:
        err_console.print(
            f"A/A noise of {f.device_model} ({f.metric}): {f.spread:.1%} a run against a run, from {f.experiments} "
            f"pairs of runs -> {path}",
            highlight=False,
            soft_wrap=True,
        )


@app.command()
def history(
    reports: Annotated[
        list[str],
        typer.Argument(
            help="Reports: files, directories (their *.json reports) or globs ('runs/*.json'), local or URLs "
            "('s3://bucket/nightly/*.json')."
        ),
    ],
    format: Annotated[
        Literal["table", "markdown", "json"], typer.Option("--format", "-f", help="table, markdown, or json.")
    ] = "table",
    html: Annotated[
        str | None,
        typer.Option("--html", help="Also write one self-contained HTML page charting every series (a path or URL)."),
    ] = None,
    min_change: Annotated[
        list[str] | None,
        typer.Option(
            "--min-change",
            help="The smallest change to report, METRIC=SIZE ('speedup=3%', 'compile_s_cold=0.1') or SIZE for every "
            "metric; repeatable. Defaults: 2% for speedup, eager_ms and compiled_ms, 5% for compile latencies.",
        ),
    ] = None,
) -> None:
    """Follow every measurement across REPORTS in time order (created_at) and find where it changed.

    One series per target, params, configuration, device model, phase and precision, and metric
    (speedup, eager_ms, compiled_ms, compile_s_cold, compile_s_warm, compile_s_shared); each change point with the
    report where it starts, the levels before and after, and a p-value; each series with its noise and the
    smallest step it could have shown. Exit 2 for unreadable input or a bad --min-change.
    """
    from orchestrator.report import ReportError
    from orchestrator.report.history import history_of, json_text, markdown, min_changes, print_history

    try:
        smallest = min_changes(min_change or [])
    except ValueError as e:
        raise _fail(str(e), 2) from None
    try:
        found, count = history_of(reports, smallest)
    except ReportError as e:
        raise _fail(str(e), 2) from None
    if format == "table":
        print_history(out_console, found, count)
    else:
        sys.stdout.write(json_text(found) if format == "json" else markdown(found, count))
    if html is not None:
        from orchestrator.report.history_html import render_history_html

        _write_page(render_history_html(found, count), html)
        err_console.print(f"HTML: {html}", highlight=False)


@app.command()
def export(
    path: Annotated[str, typer.Argument(help="A report (JSON), or the journal of a run that died; a path or a URL.")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="pytorch-v3: a JSON list of PyTorch OSS benchmark database records (oss_ci_benchmark_v3); "
            "csv: the dynamo harness's performance CSV (check_perf_csv.py reads it).",
        ),
    ] = "pytorch-v3",
    out: Annotated[str | None, typer.Option("--out", "-o", help="Write to this path or URL instead of stdout.")] = None,
    repo: Annotated[
        str | None, typer.Option(help="pytorch-v3: the repository of the change measured (e.g. pytorch/pytorch).")
    ] = None,
    head_branch: Annotated[str | None, typer.Option(help="pytorch-v3: its branch.")] = None,
    head_sha: Annotated[str | None, typer.Option(help="pytorch-v3: its commit.")] = None,
) -> None:
    """Write a report in another tool's format: one record per result and metric for PyTorch's benchmark
    database, or one CSV row per result in the dynamo harness's columns. Needs no Ray. Exit 2 for an
    unknown format, unreadable input or an --out that cannot be written."""
    from orchestrator.report.export import ExportError, check_format, export_chunks

    try:
        check_format(format)
        chunks = export_chunks(_read_report(path), format, repo=repo, head_branch=head_branch, head_sha=head_sha)
    except ExportError as e:
        raise _fail(str(e), 2) from None
    if out is None:
        for chunk in chunks:
            sys.stdout.write(chunk)
        return
    _write_page(chunks, out)
    err_console.print(f"{format}: {out}", highlight=False)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec file, for editors (VS Code's YAML extension) and validators."""
    import json

    from orchestrator.plan.schema import spec_schema

    sys.stdout.write(json.dumps(spec_schema(), indent=2) + "\n")


def main() -> None:
    import faulthandler
    import signal

    if hasattr(signal, "SIGUSR1"):  # kill -USR1 <pid>: every thread's stack on stderr, for a driver that seems stuck
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
