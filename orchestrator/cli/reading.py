"""The commands that read what a sweep kept: ``report``, ``compare``, ``history`` and ``export``, and the
reading and page writing they share with ``run``. None of them needs Ray or torch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

import typer

from orchestrator.cli.common import err_console, fail, out_console

if TYPE_CHECKING:
    from pydantic import BaseModel

    from orchestrator.report import Report
    from orchestrator.report.cells import Rows
    from orchestrator.report.digest import Glance
    from orchestrator.report.html import DigestSections
    from orchestrator.report.skim import Page
    from tasks.forked import Beside
    from tasks.result import Result

_T = TypeVar("_T")
_M = TypeVar("_M", bound="BaseModel")


def _kept(read: Callable[[str], _T], path: str) -> _T:
    """``read(path)`` with the collector paused, and what it read frozen out of the cycle collector's scans
    (``gc.freeze``) before the collector is on again: a command reads reports once and keeps them to its end,
    and a big one is millions of objects, which the first collection after the read would otherwise walk (a
    second at 100,000 results). A report that cannot be read is exit 2, one line."""
    import gc

    from orchestrator.report import ReportError
    from tasks.heap import collector_paused

    with collector_paused():  # a reader's own pause inside it leaves the collector off until the freeze
        try:
            return read(path)
        except ReportError as e:
            raise fail(str(e), 2) from None
        finally:
            gc.freeze()


def _read_report(path: str) -> Report:
    """The report at ``path`` read whole (``io.read``), kept (``_kept``)."""
    from orchestrator.report import read

    return _kept(read, path)


def _read_outline(path: str) -> Report:
    """A big compressed report as the terminal shows it (``skim.load_outline``: the results its views list one by
    one, the rest from the summary), else the report at ``path`` read whole; kept (``_kept``)."""
    from orchestrator.report.skim import load_outline

    outline = _kept(load_outline, path)
    return outline if outline is not None else _read_report(path)


def _read_results_as(path: str, model: type[_M]) -> Sequence[Result | _M]:
    """A big compressed report's results validated as ``model``, the part of a result a command reads
    (``skim.load_results_as``), else the report at ``path`` read whole and its results; kept (``_kept``)."""
    from orchestrator.report.skim import load_results_as

    found = _kept(lambda p: load_results_as(p, model), path)
    return found if found is not None else _read_report(path).results


def _v3_chunks(path: str, **change: str | None) -> Iterator[bytes] | None:
    """``export.fanout.v3_chunks`` of the report at ``path``, a process a core this one may run on; None where the
    report is to be read whole. A report that cannot be read, or a result found not to validate as the pieces
    are made, is exit 2, one line."""
    import os

    from orchestrator.report import ReportError
    from orchestrator.report.export import ExportError
    from orchestrator.report.export.fanout import v3_chunks
    from tasks.isolation import steady_allocator

    # the cores this process may run on (a cpuset, taskset); where the system cannot say (macOS), every core
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    # glibc's heap kept, not each batch's megabytes mapped and given back: this process ends with the command
    # (its system time at 100,000 results: 2.3-2.9 s without, 1.6-1.9 s with, alternated)
    steady_allocator()
    try:
        chunks = v3_chunks(path, processes=cores, **change)
    except ReportError as e:
        raise fail(str(e), 2) from None
    if chunks is None:
        return None

    def checked(chunks: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from chunks
        except (ReportError, ExportError) as e:
            raise fail(str(e), 2) from None

    return checked(chunks)


def _read_glances(base: str, new: str) -> tuple[Glance, Glance]:
    """The two reports as the gate reads them (``skim.load_glances``: a compressed report's digests and its groups'
    decisions alone, the decisions read in a forked copy where that is safe), kept (``_kept``)."""
    from orchestrator.report.skim import load_glances

    first, second = _kept(lambda _: load_glances(base, new), base)
    return first, second


def write_html(
    report: Report,
    path: str,
    shown: Sequence[Rows] | None = None,
    page: Page | None = None,
    drawing: Beside[DigestSections] | None = None,
) -> None:
    """The report's page at ``path``; ``page``: a big compressed report's ``skim.load_page`` (``report`` being
    its outline), whose digests and sampled results the page is drawn from; ``drawing``: its sections of every
    result, started (``html.start_drawing``)."""
    from orchestrator.report.html import render_html

    digests, sampled = (page.digests, page.sampled) if page is not None else (None, None)
    _write_page(render_html(report, shown, digests, sampled, drawing), path)


def _read_page(path: str) -> Page | None:
    """A big compressed report as its page draws it (``skim.load_page``), kept (``_kept``); None where the report
    is to be read whole."""
    from orchestrator.report.html import MAX_SAMPLE_RESULTS
    from orchestrator.report.skim import load_page

    return _kept(lambda p: load_page(p, MAX_SAMPLE_RESULTS), path)


def _write_page(text: str | Iterable[str] | Iterable[bytes], path: str) -> None:
    """Write a page (or text in pieces, each written as it comes: str, or bytes of UTF-8) to a path or URL; a
    place that cannot take it is exit 2, one line."""
    from orchestrator.report.io import write_atomic_bytes
    from orchestrator.store.storage import StorageError

    pieces = [text] if isinstance(text, str) else text
    try:
        write_atomic_bytes(path, (piece if isinstance(piece, bytes) else bytes(piece, "utf-8") for piece in pieces))
    except StorageError as e:
        raise fail(f"cannot write {e}", 2) from None
    except OSError as e:
        raise fail(f"cannot write {path}: {e.strerror or e}", 2) from None


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

    # the terminal and the page read of a big report what they show (the page: every result's digest); the other
    # formats, every result
    page = _read_page(path) if format == "table" and html is not None else None
    if page is not None:
        loaded: Report = page.outline
    else:
        loaded = _read_outline(path) if format == "table" and html is None else _read_report(path)
    # the page's charts and table of every result are drawn beside this process (a fork, where that is safe) while
    # it works out the tables, prints them and draws the rest of the page
    drawing = None
    if html is not None:
        from orchestrator.report.html import start_drawing

        drawing = start_drawing(loaded, page.digests if page is not None else None)
    with drawing or nullcontext():
        # the terminal's tables and the page's, worked out once where both are drawn; the terminal alone makes the
        # rows it shows of a big report's long tables (``print_report``)
        shown = list(views(loaded)) if format == "table" and html is not None else None
        if format == "table":
            print_report(out_console, loaded, shown=shown)
        else:
            sys.stdout.write(markdown(loaded) if format == "markdown" else csv_text(loaded))
        if html is not None:
            write_html(loaded, html, shown, page, drawing)
            err_console.print(f"HTML: {html}", highlight=False)


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
        raise fail(f"--fdr {fdr:g}: the false discovery rate must be between 0 and 1 (e.g. 0.05)", 2)
    try:
        figures = read_noise(noise) if noise is not None else []
    except NoiseError as e:
        raise fail(f"--noise: {e}", 2) from None
    reports = _read_glances(base, new)
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
        raise fail(f"--save-noise: {e}", 2) from None
    for f in figures:
        err_console.print(
            f"A/A noise of {f.device_model} ({f.metric}): {f.spread:.1%} a run against a run, from {f.experiments} "
            f"pairs of runs -> {path}",
            highlight=False,
            soft_wrap=True,
        )


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
        raise fail(str(e), 2) from None
    try:
        found, count = history_of(reports, smallest)
    except ReportError as e:
        raise fail(str(e), 2) from None
    if format == "table":
        print_history(out_console, found, count)
    else:
        sys.stdout.write(json_text(found) if format == "json" else markdown(found, count))
    if html is not None:
        from orchestrator.report.history_html import render_history_html

        _write_page(render_history_html(found, count), html)
        err_console.print(f"HTML: {html}", highlight=False)


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
    from orchestrator.report.export import CsvResult, ExportError, check_format, export_chunks, results_csv

    try:
        check_format(format)
        if format == "csv":  # what the CSV reads of each result, of a big report; else every result whole
            chunks: Iterable[bytes] = [results_csv(_read_results_as(path, CsvResult)).encode()]
        else:  # a big compressed report's results encoded on every core; else the report read whole
            chunks = _v3_chunks(path, repo=repo, head_branch=head_branch, head_sha=head_sha) or export_chunks(
                _read_report(path), format, repo=repo, head_branch=head_branch, head_sha=head_sha
            )
    except ExportError as e:
        raise fail(str(e), 2) from None
    if out is None:
        sys.stdout.flush()
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        return
    _write_page(chunks, out)
    err_console.print(f"{format}: {out}", highlight=False)
