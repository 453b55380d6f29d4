"""The journal: one JSON line per finished result, appended and synced as each arrives.

The journal is the source of truth of a run. The report is derived from the spec and the
journal, so a driver killed at any point loses nothing that had finished, and a rerun with
``resume`` runs only what the journal does not hold yet. The file is only ever appended
to: a run that finds results of an earlier one refuses to start unless told to ``resume``
(keep them) or ``overwrite`` (start over, an explicit truncation). One driver at a time
writes a journal: an exclusive lock (``flock``, released by the kernel when the process
dies, even by SIGKILL) keeps a second run on the same ``--out`` from interleaving lines.

Reading keeps the **first** result of each run: an experiment id and its replicate
(``RunKey``; an experiment with ``replicates: k`` has k runs, 0..k-1). A resumed run never reruns
a run the journal holds, so a second line for the same run can only come from a journal
edited or concatenated by hand; the first is the one every earlier report was built from.
A line that does not parse (the tail of a driver killed mid-write) is skipped
with a warning naming its line number.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from tasks.models import Result

JOURNAL_SUFFIX = ".journal.jsonl"

RunKey = tuple[str, int]  # (experiment id, replicate): one run of an experiment


def run_key(result: Result) -> RunKey:
    return (result.experiment_id, result.replicate)


def journal_path(report: Path) -> Path:
    """``out/report.json`` → ``out/report.journal.jsonl``, next to the report."""
    return report.with_name(report.stem + JOURNAL_SUFFIX)


class JournalError(RuntimeError):
    """The journal cannot be used as asked; the message is one line meant for the user."""


@dataclass
class JournalContents:
    """What a journal holds: the first result of each run (experiment id, replicate), in journal order."""

    results: dict[RunKey, Result] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # one line per line skipped or repeated

    def __len__(self) -> int:
        return len(self.results)


def read_journal(path: Path) -> JournalContents:
    """Parse every line of ``path`` (missing file: empty); never raises for bad lines."""
    contents = JournalContents()
    duplicates = 0
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return contents
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            result = Result.model_validate_json(line)
        except ValidationError as e:
            cut = number == len(lines) and not data.endswith(b"\n")
            why = "cut short, as by a driver killed while writing it" if cut else _first_error(e)
            contents.warnings.append(f"{path.name}: skipped line {number}, which is not a result ({why})")
            continue
        key = run_key(result)
        if key in contents.results:
            duplicates += 1
            continue
        contents.results[key] = result
    if duplicates:
        contents.warnings.append(
            f"{path.name}: {duplicates} repeated result(s) of a run already in the journal; kept the first"
        )
    return contents


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


class Journal:
    """The journal of one run, open for appending and locked for as long as the run lasts.

    ``resume``: keep what the file holds (``previous``) and append after it. ``overwrite``:
    truncate it. Neither, on a file that already holds something: ``JournalError``, before
    anything else has started.
    """

    def __init__(self, path: Path, *, resume: bool = False, overwrite: bool = False) -> None:
        if resume and overwrite:
            raise JournalError("resume and overwrite exclude each other: keep the earlier results, or start over")
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("ab")
        try:
            self._lock()
            self.previous = self._prepare(resume=resume, overwrite=overwrite)
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
            return JournalContents()
        contents = read_journal(self.path)
        if not resume:
            held = f"holds {len(contents)} result(s)" if len(contents) else "is the journal"
            raise JournalError(
                f"{self.path} already {held} of an earlier run: "
                "pass --resume to keep them and run the rest, or --overwrite to start over"
            )
        with self.path.open("rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":  # a line cut short by a kill: new lines start on a line of their own
                self._file.write(b"\n")
        return contents

    def append(self, result: Result) -> None:
        self._file.write(result.model_dump_json().encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed and os.fstat(self._file.fileno()).st_size == 0:
            self.path.unlink(missing_ok=True)  # nothing was recorded (the cluster was unreachable…): leave no trace
        self._file.close()  # closing releases the lock

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
