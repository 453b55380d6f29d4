"""A report in other tools' formats: PyTorch's OSS benchmark database records (``pytorch-v3``) and the
dynamo harness's performance CSV (``csv``); ``compilebench export`` writes either.

Imports run one way: ``mapping`` (how compilebench's fields are named there), then ``pytorch_v3`` and
``harness_csv``, each a format; this module picks one. No Ray, no torch.
"""

from __future__ import annotations

import json
from typing import Final

from orchestrator.report.export.harness_csv import COLUMNS, csv_text
from orchestrator.report.export.mapping import ExportError
from orchestrator.report.export.pytorch_v3 import records
from orchestrator.report.models import Report

__all__ = ["COLUMNS", "FORMATS", "ExportError", "check_format", "csv_text", "export_text", "records"]

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
    check_format(format)
    if format == "pytorch-v3":
        found = records(report, repo=repo, head_branch=head_branch, head_sha=head_sha)
        return json.dumps(found, indent=2, allow_nan=False) + "\n"
    if format == "csv":
        return csv_text(report)
    raise AssertionError(format)  # check_format admits only the formats above


def check_format(format: str) -> None:
    """Raises ``ExportError`` for a format this module does not write."""
    if format not in FORMATS:
        raise ExportError(f"--format: unknown format {format!r} (choose {' or '.join(FORMATS)})")
