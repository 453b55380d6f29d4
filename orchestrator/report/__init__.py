"""The report side: data models (no Ray), summary statistics, views and their formats, comparison, history,
reading and writing.

Importable without Ray, torch or a GPU: ``compilebench report`` and ``compare`` read reports anywhere.
Imports run one way: each module imports only modules listed before it.

- ``models``: the versioned report envelope and its summary;
- ``cells``: numbers rounded for people, ``Rows`` of text cells, and their rich and Markdown tables;
- ``decision``, then ``summary``: what to ship per group; statistics derived from the results;
- ``digest``: what the regression gate reads of each result, kept as columns in a compressed report;
- ``points``: a report's points in history's series, kept in the history file beside each report;
- ``io``: atomic writes, reading any schema version (compressed or not) or a run's journal;
- ``skim``: reading part of a big compressed report, what a command shows of it;
- ``replay``, ``ranks``, then ``views``: each table a reader sees, as ``Rows``, in reading order;
- ``render``: the terminal, Markdown, CSV; ``page``, ``charts``, then ``html``: one self-contained page;
- ``compile_phases``, then ``compare``: two reports, experiment by experiment, as a regression gate;
- ``changepoints``, ``history``, then ``history_html``: series across reports and where they changed;
- ``progress``: the live line of a running sweep;
- ``export``: a report in other tools' formats (PyTorch's benchmark database, the dynamo harness's CSV).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from orchestrator.report.io import (
    ReportError,
    load_journal,
    load_report,
    read,
    write_atomic,
    write_report,
)
from orchestrator.report.models import (
    SCHEMA_VERSION,
    ConfigSummary,
    DeviceSummary,
    Environment,
    GeoMean,
    Group,
    LeftOut,
    Node,
    Ranked,
    Recompiled,
    Report,
    Summary,
)
from orchestrator.report.render import csv_text, markdown, print_report, results_table, summary_table
from orchestrator.report.summary import device_model, summarize
from tasks.heap import collector_paused
from tasks.models import Result

__all__ = [
    "SCHEMA_VERSION",
    "ConfigSummary",
    "DeviceSummary",
    "Environment",
    "GeoMean",
    "Group",
    "LeftOut",
    "Node",
    "Ranked",
    "Recompiled",
    "Report",
    "ReportError",
    "Summary",
    "build_report",
    "csv_text",
    "device_model",
    "load_journal",
    "load_report",
    "markdown",
    "print_report",
    "read",
    "results_table",
    "summarize",
    "summary_table",
    "write_atomic",
    "write_report",
]


def build_report(
    name: str, spec: dict[str, Any], results: Sequence[Result], env: Environment, complete: bool = True
) -> Report:
    """The report of ``results``, summarised with the cycle collector paused (``collector_paused``): the
    summary of 100,000 results allocates millions of objects, and each collection on the way would walk every
    result again (6 s with it paused, 12 s without)."""
    with collector_paused():
        summary = summarize(results)
    return Report(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        name=name,
        spec=spec,
        environment=env,
        results=list(results),
        summary=summary,
        complete=complete,
    )
