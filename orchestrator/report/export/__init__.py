"""A report in other tools' formats: PyTorch's OSS benchmark database records (``pytorch-v3``) and the
dynamo harness's performance CSV (``csv``); ``compilebench export`` writes either.

Imports run one way: ``mapping`` (how compilebench's fields are named there) and ``strings`` (a value as a
string of the database's maps), then ``pytorch_v3`` and ``harness_csv``, each a format, then ``fanout`` (the v3
records of a big compressed report, made by a process a core, which the command uses and this module does not
import); this module picks a format. No Ray, no torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from orchestrator.report.export.harness_csv import COLUMNS, CsvResult, csv_text, results_csv
from orchestrator.report.export.mapping import ExportError
from orchestrator.report.export.pytorch_v3 import iter_record_lines, records
from orchestrator.report.models import Report

__all__ = [
    "COLUMNS",
    "FORMATS",
    "CsvResult",
    "ExportError",
    "check_format",
    "csv_text",
    "export_chunks",
    "export_text",
    "records",
    "results_csv",
]

FORMATS: Final = ("pytorch-v3", "csv")


def export_text(
    report: Report,
    format: str,
    *,
    repo: str | None = None,
    head_branch: str | None = None,
    head_sha: str | None = None,
) -> str:
    """The report as text in ``format``: a JSON list of v3 records, or the harness's CSV. ``repo``,
    ``head_branch`` and ``head_sha`` go in the v3 records' top level (the CSV has no place for them).
    Raises ``ExportError`` for an unknown format, or a report whose time stamp is not ISO 8601."""
    return b"".join(export_chunks(report, format, repo=repo, head_branch=head_branch, head_sha=head_sha)).decode()


def export_chunks(
    report: Report,
    format: str,
    *,
    repo: str | None = None,
    head_branch: str | None = None,
    head_sha: str | None = None,
) -> Iterator[bytes]:
    """``export_text`` in pieces of UTF-8, a v3 record at a time: a JSON list with each record compact on a
    line of its own (``pytorch_v3.iter_record_lines``), written as they are made. Raises ``ExportError`` as
    ``export_text`` does, before the first piece."""
    check_format(format)
    if format == "csv":
        return iter([csv_text(report).encode()])
    found = iter_record_lines(report, repo=repo, head_branch=head_branch, head_sha=head_sha)
    first = next(found, None)  # the time stamp is checked here, before anything is written
    return _json_list(first, found)


def _json_list(first: bytes | None, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first is None:
        yield b"[]\n"
        return
    yield b"[\n" + first
    for record in rest:
        yield b",\n" + record
    yield b"\n]\n"


def check_format(format: str) -> None:
    """Raises ``ExportError`` for a format this module does not write."""
    if format not in FORMATS:
        raise ExportError(f"--format: unknown format {format!r} (choose {' or '.join(FORMATS)})")
