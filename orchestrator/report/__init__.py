"""The report side: data models (no Ray), summary statistics, rendering, reading and writing.

Importable without Ray or a GPU: ``compilebench report`` and ``compare`` read reports anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from orchestrator.report.io import load_report, write_atomic, write_report
from orchestrator.report.models import (
    SCHEMA_VERSION,
    Best,
    Environment,
    GeoMean,
    Node,
    Recompiled,
    Report,
    Summary,
)
from orchestrator.report.render import results_table, summary_table
from orchestrator.report.summary import device_model, summarize
from tasks.models import Result

__all__ = [
    "SCHEMA_VERSION",
    "Best",
    "Environment",
    "GeoMean",
    "Node",
    "Recompiled",
    "Report",
    "Summary",
    "build_report",
    "device_model",
    "load_report",
    "results_table",
    "summarize",
    "summary_table",
    "write_atomic",
    "write_report",
]


def build_report(
    name: str, spec: dict[str, Any], results: Sequence[Result], env: Environment, complete: bool = True
) -> Report:
    return Report(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        name=name,
        spec=spec,
        environment=env,
        results=list(results),
        summary=summarize(results),
        complete=complete,
    )
