"""The v3 export of a big compressed report, its results shared out to a process a core.

Validating the 500 MB of JSON of 100,000 results and encoding their half a million records (1 GB) is about
25 s of one core, and pydantic and orjson hold the GIL while they work: threads would take turns. So the
results' lines, as they are inflated, go in batches (``BATCH``) to other processes, each validating its
batch as ``Result`` and encoding its records (``pytorch_v3.record_lines``); the batches come back and are
written in the report's order, a few in flight a process (``AHEAD``), never the whole text held. Forked, a
batch goes out and comes back through memory the processes share (``_Blocks``), not the pool's pipes. Of the rest
of the report only its first line (name, time stamp, environment) and its digests' experiment ids (how many
runs of each experiment it holds) are read: its summary, 100 MB of JSON at 100,000 groups, is passed over.

The processes are forked where that is safe (Linux, and no other thread running: ``_start_method``), before
the inflating thread starts: each then has this process's modules already imported. Spawned, each imports
them again: at 100,000 results, in two alternated pairs, the two processes took 14.5-16.0 s of CPU forked and
16.4-17.9 s spawned, and the export 1.7-1.8 s longer spawned.

Imports ``pytorch_v3`` and the report's reading (``io``); nothing here touches Ray or torch.
"""

from __future__ import annotations

import gc
import io
import mmap
import multiprocessing
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from orchestrator.report.export.mapping import ExportError
from orchestrator.report.export.pytorch_v3 import Run, record_lines, run
from orchestrator.report.io import (
    DIGESTS_OPEN,
    RESULTS_OPEN,
    UNREADABLE,
    ReportError,
    compressed_bytes,
    read,
    read_head,
    report_lines,
)
from orchestrator.report.models import Environment
from orchestrator.store.storage import location
from tasks.forked import can_fork
from tasks.isolation import steady_allocator
from tasks.result import Result
from tasks.text import validation_line

BATCH: Final = 500  # results a batch: about 2 MB of lines out, 5 MB of records back
AHEAD: Final = 3  # batches in flight a process: one working, the next ones queued
BLOCK_BYTES: Final = 32 * 2**20  # a batch's shared block (``_Blocks``): its lines in, then its records out
_LEAST_STORED: Final = 200  # compressed bytes a result takes at least (about 870 at 100,000 results)
_SEPARATOR: Final = b",\n"  # between two records of the list, each on a line of its own


class _First(BaseModel):
    """What the records read of a compressed report's first line; every other field is skipped unread."""

    schema_version: Literal[2, 3]  # another version is read whole (``read``), which names it
    name: str
    created_at: str
    environment: Environment


class _Ids(BaseModel):
    """The one digest column the records read: each result's experiment id, in the report's order."""

    experiment_id: list[str]


_FIRST_COLUMN: Final = b'{"experiment_id":['  # how the digests' columns begin, as ``report.digest`` writes them
_STRINGS: Final = TypeAdapter(list[str])


def _ids(columns: bytes) -> _Ids:
    """The digests' experiment ids: of their first column alone where the columns begin with it (a list of
    strings ends at its first ``]`` outside a string, and one inside a string leaves the cut text unparsable):
    8 ms at 100,000 results, where parsing every column took 0.28 s while the processes waited. Else, or where
    the cut text does not validate, all the columns parsed (``_Ids``), which names what is wrong."""
    if columns.startswith(_FIRST_COLUMN):
        end = columns.find(b"]", len(_FIRST_COLUMN))
        try:
            return _Ids(experiment_id=_STRINGS.validate_json(columns[len(_FIRST_COLUMN) - 1 : end + 1]))
        except ValidationError:
            pass
    return _Ids.model_validate_json(columns)


def v3_chunks(
    path: str | Path,
    *,
    repo: str | None = None,
    head_branch: str | None = None,
    head_sha: str | None = None,
    processes: int = 1,
) -> Iterator[bytes] | None:
    """The text ``export.export_chunks`` makes of the report at ``path`` in ``pytorch-v3``, byte for byte, in
    pieces, its results validated and encoded by up to ``processes`` other processes (forked where that is safe,
    else spawned: ``_start_method``), or by this one where it is 1 or the report holds one batch (a script that
    asks for more runs its top level under ``if __name__ == "__main__"``, as any that may spawn processes).
    None where the report is not compressed with digests (an indented report, one written before them, a
    journal), or its first lines do not read so: the caller then reads it whole (``read``), which names what is
    wrong. Raises ``ExportError`` for a time stamp that is not ISO 8601, before any piece, or for a process that
    died making a batch, as the pieces are made; ``ReportError`` for a file that cannot be read at all, or, as a
    piece is made, for a result that does not validate (named as ``read`` names it) or a report cut short."""
    stored = compressed_bytes(location(path))
    if not stored:
        return None
    most = max(1, len(stored) // (BATCH * _LEAST_STORED))  # batches it may hold, at most
    encoders = _encoders(min(processes, most), _start_method())  # forked now, if at all: before the inflating thread
    lines = report_lines(stored)
    try:
        head = read_head(lines)
        fields, digests = head if head is not None else (b"", None)
        if digests is None:
            _close(lines, encoders)
            return None
        first = _First.model_validate_json(fields[: fields.index(b"\n") - 1] + b"}")  # its "," closed
        ids = _ids(digests.removeprefix(DIGESTS_OPEN).removesuffix(b"," + RESULTS_OPEN))
    except UNREADABLE:
        _close(lines, encoders)
        return None
    except BaseException:
        _close(lines, encoders)
        raise
    del stored, head, fields, digests
    try:
        kept = run(
            first.created_at, first.name, first.environment, repo=repo, head_branch=head_branch, head_sha=head_sha
        )
    except BaseException:
        _close(lines, encoders)
        raise
    if len(ids.experiment_id) <= BATCH:  # one batch: made here, no process to hand it to
        encoders.close()
        encoders = _Encoders()
    return _list(path, lines, kept, ids.experiment_id, encoders)


def _close(lines: io.BufferedReader, encoders: _Encoders) -> None:
    """The reader and the processes of pieces ``v3_chunks`` will not make."""
    lines.close()
    encoders.close()


def _list(
    path: str | Path, lines: io.BufferedReader, kept: Run, ids: list[str], encoders: _Encoders
) -> Iterator[bytes]:
    """The JSON list of every result's records: ``[``, a record a line, ``]``, each batch's records as they
    come back, in order."""
    runs = Counter(ids)
    opening = b"[\n"  # what comes before the next batch's records: the list's opening, then a separator
    with lines, encoders:
        pending: deque[_Batch] = deque()
        for start, batch in _batches(path, lines, len(ids)):
            pending.append(encoders.submit(kept, start, batch, [runs[i] for i in ids[start : start + len(batch)]]))
            while len(pending) >= AHEAD * encoders.processes or (pending and pending[0].done()):
                yield opening
                yield _done(path, pending.popleft())  # as it came back: megabytes, not copied again
                opening = _SEPARATOR
        while pending:
            yield opening
            yield _done(path, pending.popleft())
            opening = _SEPARATOR
    yield b"[]\n" if opening == b"[\n" else b"\n]\n"


def _batches(path: str | Path, lines: io.BufferedReader, count: int) -> Iterator[tuple[int, list[bytes]]]:
    """The results' lines in batches of ``BATCH``, each with its first result's index, the ``,`` and newline
    that end each taken off. Raises ``ReportError`` where the results end before or after their digests' count
    or the stream is damaged (``_unreadable``)."""
    batch: list[bytes] = []
    start = 0
    try:
        for i, line in enumerate(lines):
            if line.startswith(b"]"):
                if i != count or (line + lines.read()).strip() != b"]}":
                    break
                if batch:
                    yield start, batch
                return
            batch.append(line.rstrip(b",\n"))
            if len(batch) == BATCH:
                yield start, batch
                start, batch = i + 1, []
    except UNREADABLE:
        pass
    raise _unreadable(path)


def _done(path: str | Path, batch: _Batch) -> bytes:
    """A batch's records. Raises ``ReportError`` for a line that did not validate, ``ExportError`` where a process
    making them died (killed, out of memory, or unable to start: a script that spawns without the
    ``if __name__ == "__main__"`` guard)."""
    try:
        return batch.result()
    except _Invalid as e:
        raise ReportError(f"{path}: {e}") from None
    except BrokenProcessPool:
        raise ExportError(
            f"{path}: a process making the records ended before its batch did (killed, or out of memory?)"
        ) from None


def _unreadable(path: str | Path) -> ReportError:
    """What a whole read says of a report whose results do not read as its head says they do."""
    try:
        read(path)
    except ReportError as e:
        return e
    return ReportError(f"{path}: its results are not those its digests list")


def _start_method() -> Literal["fork", "spawn"]:
    """How ``v3_chunks`` starts its processes: forked on Linux from a process running no other thread, so that
    no lock another thread holds is copied held; else spawned (macOS, where a forked process may not use
    every system library, and Windows): ``tasks.forked.can_fork``."""
    return "fork" if can_fork() else "spawn"


class _Blocks:
    """Memory shared with the forked processes, a block (``BLOCK_BYTES``) for each batch in flight: this process
    puts a batch's lines in its block, the process that takes the batch puts its records there in their place,
    and this one copies them out and frees the block for the next batch. Through the pool's pipes, the records
    of 100,000 results (1 GB) were 2.0-2.4 s of this process's CPU and 0.6 s of theirs, a 64 KB pipe's worth at a
    time, each piece copied twice more; so, 0.3-0.4 s and 0.2 s. Mapped before the fork (anonymous, shared):
    each process holds every block at the same index. A batch too big for a block goes through the pipes."""

    def __init__(self, count: int) -> None:
        self.blocks = [mmap.mmap(-1, BLOCK_BYTES) for _ in range(count)]
        self.free = deque(range(count))

    def take(self, lines: list[bytes]) -> tuple[int, int] | None:
        """A free block and the length of ``lines`` put in it, a newline between two (a line holds none), or None
        where none is free or they do not fit."""
        size = sum(map(len, lines)) + len(lines) - 1
        if not lines or not self.free or size > BLOCK_BYTES:
            return None
        index = self.free.popleft()
        self.blocks[index][:size] = b"\n".join(lines)
        return index, size

    def close(self) -> None:
        for block in self.blocks:
            block.close()


_BLOCKS: list[mmap.mmap] = []  # in a forked encoding process: this one's ``_Blocks``, as they were at the fork


@dataclass
class _Batch:
    """A batch given out (``_Encoders.submit``): its future, which gives its records' bytes or, where they went
    into the batch's block, their length."""

    future: Future[bytes | int]
    blocks: _Blocks | None = None
    block: int = 0

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> bytes:
        """The batch's records, copied out of its block where they are there; the block is then free."""
        try:
            made = self.future.result()
            if isinstance(made, int):
                assert self.blocks is not None
                return self.blocks.blocks[self.block][:made]
            return made
        finally:
            if self.blocks is not None:
                self.blocks.free.append(self.block)


class _Encoders:
    """Where a batch's records are made (``submit``): a pool of processes, or this process where there is none.
    This one never makes a batch beside a pool: a batch it made would hold the GIL from the pool's threads, which
    carry the batches out and back (on two cores, this one making a batch itself whenever the other process had
    three queued left that process idle half the time: 15-17 s against 12-13 s). ``blocks``: the forked pool's
    shared blocks, if any."""

    def __init__(self, pool: ProcessPoolExecutor | None = None, processes: int = 1, blocks: _Blocks | None = None):
        self.pool = pool
        self.processes = processes
        self.blocks = blocks

    def submit(self, kept: Run, start: int, lines: list[bytes], replicates: list[int]) -> _Batch:
        """A batch given out to be made (``_encode``)."""
        if self.pool is not None:
            taken = self.blocks.take(lines) if self.blocks is not None else None
            if taken is not None:
                block, size = taken
                return _Batch(self.pool.submit(_encode_block, kept, start, block, size, replicates), self.blocks, block)
            return _Batch(self.pool.submit(_encode, kept, start, lines, replicates))
        made: Future[bytes | int] = Future()
        try:
            made.set_result(_encode(kept, start, lines, replicates))
        except _Invalid as e:
            made.set_exception(e)
        return _Batch(made)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if self.blocks is not None:
            self.blocks.close()

    def __enter__(self) -> _Encoders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _encoders(processes: int, method: Literal["fork", "spawn"]) -> _Encoders:
    """``processes`` processes started by ``method`` (a fork's at once: ``ProcessPoolExecutor`` forks every one
    on its first task, before it starts its own threads), with the blocks they share where forked (``_Blocks``:
    one for each batch that may be in flight), or none where ``processes`` is 1."""
    if processes <= 1:
        return _Encoders()
    context = multiprocessing.get_context(method)
    blocks = _shared_blocks(AHEAD * processes) if method == "fork" else None
    pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_begin, initargs=(blocks,))
    if method == "fork":
        pool.submit(int)
    return _Encoders(pool, processes, blocks)


def _shared_blocks(count: int) -> _Blocks | None:
    """``count`` shared blocks, or None where they cannot be mapped (memory the system will not commit): every
    batch then goes through the pipes."""
    try:
        return _Blocks(count)
    except OSError:
        return None


class _Invalid(ValueError):
    """A result's line that does not validate: ``results.I.field: problem``, as a whole read says it."""


def _begin(blocks: _Blocks | None = None) -> None:
    """An encoding process's start: the cycle collector off (a batch's objects are freed by their counts as it
    ends; the collector's scans of them would be spent for nothing), and glibc's heap kept rather than each
    batch's megabytes mapped and given back (``steady_allocator``): the two processes' system time for 100,000
    results was 1.8-2.3 s that way, 0.5-0.6 s this one. ``blocks``: the shared blocks, where forked (given as
    they are: a forked process's arguments are not pickled)."""
    gc.disable()
    steady_allocator()
    if blocks is not None:
        _BLOCKS[:] = blocks.blocks


def _encode_block(kept: Run, start: int, block: int, size: int, replicates: list[int]) -> bytes | int:
    """``_encode`` of the ``size`` bytes of lines in a shared block (``_Blocks.take``), its records put there in
    their place: their length, or the records themselves where they do not fit."""
    shared = _BLOCKS[block]
    made = _encode(kept, start, shared[:size].split(b"\n"), replicates)
    if len(made) > len(shared):
        return made
    shared[: len(made)] = made
    return len(made)


def _encode(kept: Run, start: int, lines: list[bytes], replicates: list[int]) -> bytes:
    """A batch's records as the lines of the list, joined by ``,`` and a newline; ``kept``: the report's ``Run``
    (given with each batch: a process forked before the report's first line was read has none of its own).
    Raises ``_Invalid`` for a line that does not validate as ``Result``."""
    made: list[bytes] = []
    for i, (line, runs) in enumerate(zip(lines, replicates, strict=True)):
        try:
            result = Result.model_validate_json(line)
        except ValidationError as e:
            raise _Invalid(validation_line(e, ("results", start + i))) from None
        made += record_lines(kept, result, runs)
    return _SEPARATOR.join(made)
