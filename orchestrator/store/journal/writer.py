"""The journal of one run, open for writing: ``Journal`` picks the log for its location (a local file,
``file_log``; a prefix in a store, ``object_log``), opens it by the run's choice (``resume``,
``overwrite``, or neither on an empty journal) and appends each result durably: one at a time
(``append``), or written as they arrive and synced once per group (``write``, ``sync``).

The top of the package: it imports both logs and nothing imports it but the package itself.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.store.journal.contents import JournalError
from orchestrator.store.journal.file_log import FileLog
from orchestrator.store.journal.object_log import LEASE_RENEW_S, ObjectLog
from orchestrator.store.storage import Location, location
from tasks.models import Result


class Journal:
    """The journal of one run, open for writing and held by this run alone for as long as it lasts.

    ``path``: a local ``*.journal.jsonl`` (a ``str`` that is no URL counts as local) or the URL of
    a prefix in an object store (``journal_path`` of the report's location). ``resume``: keep what
    the journal holds (``previous``) and add after it. ``overwrite``: empty it. Neither, on a
    journal that already holds something: ``JournalError``, before anything else has started.
    ``lease_renew_s``: how often a run on a store renews its lease (``LEASE_RENEW_S``).
    """

    def __init__(
        self, path: Location, *, resume: bool = False, overwrite: bool = False, lease_renew_s: float = LEASE_RENEW_S
    ) -> None:
        if resume and overwrite:
            raise JournalError("resume and overwrite exclude each other: keep the earlier results, or start over")
        self.path: Location = location(path)
        self._log: FileLog | ObjectLog = (
            FileLog(self.path) if isinstance(self.path, Path) else ObjectLog(self.path, lease_renew_s)
        )
        self.previous = self._log.open(resume=resume, overwrite=overwrite)

    def append(self, result: Result) -> None:
        """Record ``result`` durably (synced, or stored) before returning."""
        self._log.append(result)

    def write(self, result: Result) -> None:
        """Record ``result`` so that this process's death does not lose it (a local line handed to the
        OS, an object stored); durable across a host's crash once ``sync`` returns. A run commits
        in groups: ``write`` each result as it arrives, ``sync`` once for the group."""
        self._log.write(result)

    def text_of(self, result: Result) -> bytes | None:
        """The JSON text of ``result`` as this run wrote it to a local journal (that very object: what
        ``model_dump_json`` gave), for the report to write as it is; None for any other result, and for a journal
        in a store."""
        return self._log.text_of(result) if isinstance(self._log, FileLog) else None

    def sync(self) -> None:
        """Make every result written so far durable (a local journal's ``fsync``; a store's are)."""
        self._log.sync()

    def close(self) -> None:
        self._log.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
