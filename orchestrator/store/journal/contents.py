"""What a journal is and holds, at the bottom of the package: where it lies beside its report, the
first result of each run it holds (``JournalContents``, keyed by ``RunKey``), and its one error.

Imports only ``orchestrator.store.storage`` (for locations) and the result model; reading and both
logs build on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from orchestrator.store.storage import Location, join, name_of, parent
from tasks.models import Result

JOURNAL_SUFFIX = ".journal.jsonl"  # a local journal: one file beside the report
OBJECT_JOURNAL_SUFFIX = ".journal"  # a journal in a store: a prefix of objects beside the report

RunKey = tuple[str, int]  # (experiment id, replicate): one run of an experiment


def run_key(result: Result) -> RunKey:
    return (result.experiment_id, result.replicate)


@overload
def journal_path(report: Path) -> Path: ...
@overload
def journal_path(report: str) -> str: ...
def journal_path(report: Location) -> Location:
    """Beside the report: ``out/r.json`` → ``out/r.journal.jsonl``; ``s3://b/run/r.json`` → ``s3://b/run/r.journal``.

    A ``str`` is a URL (``orchestrator.store.storage.location`` turns local strings into paths).
    """
    if isinstance(report, Path):
        return report.with_name(report.stem + JOURNAL_SUFFIX)
    return join(parent(report), Path(name_of(report)).stem + OBJECT_JOURNAL_SUFFIX)


class JournalError(RuntimeError):
    """The journal cannot be used as asked; the message is one line meant for the user."""


@dataclass
class JournalContents:
    """What a journal holds: the first result of each run (experiment id, replicate), in journal order."""

    results: dict[RunKey, Result] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # one line per line (or object) skipped or repeated

    def __len__(self) -> int:
        return len(self.results)

    def keep(self, result: Result) -> bool:
        """Add ``result`` unless its run is there already (then False: a repeat, as a journal keeps the first)."""
        key = run_key(result)
        if key in self.results:
            return False
        self.results[key] = result
        return True

    def with_results(self, results: Iterable[Result]) -> JournalContents:
        """What the journal holds once ``results`` were appended to these contents (a run's, after those it
        resumed), without reading it back; these contents stay as they are."""
        after = JournalContents(dict(self.results), list(self.warnings))
        for result in results:
            after.keep(result)
        return after


def refusal(where: str, contents: JournalContents) -> JournalError:
    """The error of a run that finds an earlier run's journal at ``where`` and was told neither to resume
    nor to overwrite it."""
    held = f"holds {len(contents)} result(s)" if len(contents) else "is the journal"
    return JournalError(
        f"{where} already {held} of an earlier run: "
        "pass --resume to keep them and run the rest, or --overwrite to start over"
    )
