"""The run's shared compile cache (``run --compile-cache LOCATION``), checked before anything starts.

Experiments with ``compile.cache: shared`` load the compile artifacts stored for their key under
LOCATION and store what they produce there (``tasks.shared_cache``), from every node of the
cluster: LOCATION is a directory every node sees (a shared file system) or an object store's
URL (``s3://bucket/compile-cache``; ``orchestrator.store.storage``). A run that needs one and has
none, or one it cannot write, must stop before Ray starts, with one line saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.store.storage import StorageError, location, probe_writable
from tasks.experiment import Experiment
from tasks.files import probe_directory


class CompileCacheError(ValueError):
    """A shared compile cache the run cannot use; the message is one line meant for the user."""


def check_compile_cache(given: str | Path | None, experiments: Sequence[Experiment]) -> str | None:
    """The location the workers are given (an absolute directory, or the URL as given), or None.

    Raises ``CompileCacheError`` when an experiment asks for ``compile.cache: shared`` and no
    location is given, or when the location cannot take a new object: a local directory is
    created if missing and a probe file written and removed there; a URL's folder takes a probe
    object (an unknown scheme, a missing bucket or refused credentials fail here).
    """
    if given is None or str(given) == "":
        shared = next((e for e in experiments if e.compile.cache == "shared"), None)
        if shared is not None:
            raise CompileCacheError(
                f"experiment {shared.id} ({shared.target}) has compile.cache: shared, which needs a place to "
                "share compiled artifacts: give run --compile-cache DIR or URL (e.g. s3://bucket/compile-cache)"
            )
        return None
    where = location(given)
    if isinstance(where, str):
        try:
            probe_writable(where)
        except StorageError as e:
            raise CompileCacheError(f"--compile-cache {e}") from None
        return where
    return str(_writable_directory(where))


def _writable_directory(path: Path) -> Path:
    """``path``, absolute, created if missing, once a probe file was written and removed there."""
    path = path.resolve()
    if path.exists() and not path.is_dir():
        raise CompileCacheError(f"--compile-cache {path}: exists and is not a directory")
    try:
        probe_directory(path)
    except OSError as e:
        raise CompileCacheError(f"--compile-cache {path}: not writable: {e.strerror or e}") from None
    return path
