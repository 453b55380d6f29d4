"""Files both sides write: one atomic write, one answer to "local path or store URL", one writability probe.

The lowest place the driver and the workers may both import (``tasks/`` imports nothing of
``orchestrator/``); nothing here imports torch or Ray.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
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
    file beside it, flushed and fsynced, then
    renamed over it (``os.replace`` is atomic within one filesystem), so a reader or a crash sees the old
    file or the new one, never a part. ``mode``: the file's permissions (default: 0o666 less the umask,
    as ``open`` gives; ``mkstemp`` alone would give 0o600). Creates the folder; raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            for piece in [data] if isinstance(data, bytes) else data:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def probe_directory(folder: Path, prefix: str = PROBE_PREFIX) -> None:
    """Create ``folder`` if missing, then write and remove a probe file in it; raises ``OSError`` saying
    why not (a folder that cannot be made, or one this process may not write in)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=prefix, suffix=".probe", dir=folder)
    os.close(fd)
    os.unlink(probe)
