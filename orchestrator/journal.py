"""The journal: one JSON line per finished result, appended and synced as each arrives."""

from __future__ import annotations

import os
from pathlib import Path

from tasks.models import Result


def journal_path(report: Path) -> Path:
    """``out/report.json`` → ``out/report.journal.jsonl``, next to the report."""
    return report.with_name(report.stem + ".journal.jsonl")


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", encoding="utf-8")

    def append(self, result: Result) -> None:
        self._file.write(result.model_dump_json() + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
