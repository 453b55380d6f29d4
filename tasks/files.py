"""Files both sides write: one atomic write, one answer to "local path or store URL", one writability probe.

The lowest place the driver and the workers may both import (``tasks/`` imports nothing of
``orchestrator/``); nothing here imports torch or Ray.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Final
from urllib.parse import unquote, urlsplit

URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")  # RFC 3986's scheme, then "://"
PROBE_PREFIX = ".compilebench-probe-"  # how a probe file or object is named, on a disk or in a store


def local_path(where: str | Path) -> Path | None:
    """``where`` as a local ``Path`` (a path, ``~`` expanded, or a ``file://`` URL); None for a store's URL
    (``s3://``, ``gs://``, ``memory://``...), which fsspec reaches. A ``Path`` is always local."""
    if isinstance(where, Path):
        return where.expanduser()
    match = URL_SCHEME.match(where)
    if match is None:
        return Path(where).expanduser()
    return Path(unquote(urlsplit(where).path)) if match.group(1).lower() == "file" else None


def write_atomic(path: Path, data: bytes | Iterable[bytes], mode: int | None = None) -> None:
    """Write ``data`` (bytes, or pieces of bytes written in turn) to ``path`` whole or not at all: a temporary
    file beside it, flushed and fsynced, then renamed over it (``os.replace`` is atomic within one filesystem),
    so a reader or a crash sees the old file or the new one, never a part. Pieces are flushed to the disk
    while the next are made, each ``SYNC_EVERY`` bytes handed to a thread of its own (``_Flusher``): 1 GB
    written as it was made waited 1.5 s for one fsync at the end, 0.1 s so (``benchmarks/atomic_write.py``).
    ``mode``: the file's permissions (default: 0o666 less the umask, as ``open`` gives; ``mkstemp`` alone would
    give 0o600). Creates the folder; raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            flusher = _Flusher(f)
            try:
                for piece in [data] if isinstance(data, bytes) else data:
                    f.write(piece)
                    flusher.wrote(len(piece))
                f.flush()
            finally:
                flusher.join()  # before the file is closed, whatever stopped the writing
            flusher.check()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


SYNC_EVERY: Final = 64 * 2**20  # bytes written between two flushes to the disk that a thread waits for
WRITE_THROUGH_PAST: Final = 256 * 2**20  # a file bigger is not kept in the page cache once on the disk (``_Flusher``)


class _Flusher:
    """A file's written bytes flushed to the disk by a thread of its own (``os.fdatasync``), each
    ``SYNC_EVERY`` bytes while the writer goes on, so that the final fsync finds little left to write: the
    page cache starts writing a file back on its own only past a tenth of memory, or 30 s. Past
    ``WRITE_THROUGH_PAST`` bytes, the pages on the disk are given back too (``POSIX_FADV_DONTNEED``), and the
    next ones written reuse them: a gigabyte of export (``export -f pytorch-v3`` of 100,000 results) kept whole
    in the page cache took 1.7-2.1 s of system time to write, each page new to the process's machine, and
    0.8-1.0 s so. The thread's error (an I/O error, which the kernel reports once) is raised by ``check``."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.unsynced, self.written = f, 0, 0
        self.thread: threading.Thread | None = None
        self.error: OSError | None = None

    def wrote(self, count: int) -> None:
        self.unsynced += count
        self.written += count
        if self.unsynced < SYNC_EVERY or (self.thread is not None and self.thread.is_alive()):
            return
        self.f.flush()
        self.unsynced = 0
        self.thread = threading.Thread(target=self._sync, name="compilebench-fdatasync", daemon=True)
        self.thread.start()

    def _sync(self) -> None:
        sync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
        try:
            sync(self.f.fileno())
        except OSError as e:
            self.error = e
            return
        if self.written > WRITE_THROUGH_PAST and hasattr(os, "posix_fadvise"):
            with contextlib.suppress(OSError):  # advice: a filesystem that refuses it keeps the pages, nothing else
                os.posix_fadvise(self.f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # its clean pages: the synced ones

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def check(self) -> None:
        if self.error is not None:
            raise self.error


def probe_directory(folder: Path, prefix: str = PROBE_PREFIX) -> None:
    """Create ``folder`` if missing, then write and remove a probe file in it; raises ``OSError`` saying
    why not (a folder that cannot be made, or one this process may not write in)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=prefix, suffix=".probe", dir=folder)
    os.close(fd)
    os.unlink(probe)
