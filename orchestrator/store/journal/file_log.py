"""The local journal: one file of JSON lines beside the report (``out/r.json`` → ``out/r.journal.jsonl``),
appended to line by line (each line reaches the OS as it is written, so the process's death loses
none), synced when the run commits (``sync``: once per group of lines), and written by one driver at
a time.

The lock is ``flock``, exclusive and non-blocking: the kernel releases it when the process dies, even
by SIGKILL, so a second run on the same ``--out`` is refused rather than interleaving lines, and a
killed run never leaves a lock behind. A resumed run whose journal ends in a line cut short starts
its own lines on a line of their own: the newline goes before its first line, so that until it writes, the file
is as it found it (a resume refused once the journal is read, for a bad spec, changes nothing), and a journal
file it neither created nor emptied is never removed. The text of each result written is found again by
``text_of``: the report of the run writes it as it is, not dumped a second time. Imports ``contents`` and
``reading`` of the package.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import BinaryIO

from orchestrator.store.journal.contents import JournalContents, JournalError, refusal
from orchestrator.store.journal.reading import read_journal
from tasks.models import Result


class FileLog:
    """A local journal: one file, appended to and synced, locked with ``flock``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # (experiment id, replicate) -> the result this process wrote, where its line starts, its length
        self._written: dict[tuple[str, int], tuple[Result, int, int]] = {}
        self._reader: BinaryIO | None = None
        self._cut = False  # the journal ended in a line cut short: the next line written starts with a newline
        self._ours = False  # this run created or emptied the file (removed again where it recorded nothing)

    def open(self, *, resume: bool, overwrite: bool) -> JournalContents:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._ours = not self.path.exists()
        self._file = self.path.open("ab")
        try:
            self._lock()
            return self._prepare(resume=resume, overwrite=overwrite)
        except BaseException:
            self._file.close()
            raise

    def _lock(self) -> None:
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JournalError(
                f"{self.path} is being written by another compilebench run; wait for it or choose another --out"
            ) from None

    def _prepare(self, *, resume: bool, overwrite: bool) -> JournalContents:
        size = os.fstat(self._file.fileno()).st_size
        if size == 0:
            return JournalContents()
        if overwrite:
            self._file.truncate(0)
            self._ours = True
            return JournalContents()
        contents = read_journal(self.path)
        if not resume:
            raise refusal(str(self.path), contents)
        with self.path.open("rb") as f:
            f.seek(size - 1)
            self._cut = f.read(1) != b"\n"  # a line cut short by a kill: new lines start on a line of their own
        return contents

    def append(self, result: Result) -> None:
        self.write(result)
        self.sync()

    def write(self, result: Result) -> None:
        """Append ``result``'s line and hand it to the OS (it outlives this process; not the host)."""
        text = result.model_dump_json().encode()
        lead = b"\n" if self._cut else b""
        start = os.fstat(self._file.fileno()).st_size + len(lead)  # every line is flushed as written: the file's end
        self._file.write(lead + text + b"\n")
        self._file.flush()
        self._cut = False
        self._written[(result.experiment_id, result.replicate)] = (result, start, len(text))

    def text_of(self, result: Result) -> bytes | None:
        """The JSON text this process wrote of ``result`` (this very object), read back from the file; None for
        any other result (one of an earlier run, a copy)."""
        entry = self._written.get((result.experiment_id, result.replicate))
        if entry is None or entry[0] is not result:
            return None
        if self._reader is None:
            self._reader = self.path.open("rb")
        text = os.pread(self._reader.fileno(), entry[2], entry[1])
        return text if len(text) == entry[2] else None  # the file was cut behind this run's back: dumped anew

    def sync(self) -> None:
        """Make every line written so far durable (``fsync``)."""
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._ours and not self._file.closed and os.fstat(self._file.fileno()).st_size == 0:
            self.path.unlink(missing_ok=True)  # nothing was recorded (the cluster was unreachable…): leave no trace
        self._file.close()  # closing releases the lock
        if self._reader is not None:
            self._reader.close()
        self._written.clear()
