"""Where a run writes, checked before anything starts.

A run writes its journal next to the report as results arrive and the report itself at the
end; a location that cannot take them must stop the run before Ray starts, not after the
sweep. A location is a local path or the URL of an object in a store (``orchestrator.store.storage``):
a local folder must take a new file, a store a probe object, written and deleted at once.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.store.storage import (
    Location,
    StorageError,
    join,
    location,
    open_location,
    parent,
    probe_writable,
    problem,
)
from tasks.files import probe_directory


class OutPathError(ValueError):
    """A report location the run could not write; the message is one line meant for the user."""


def out_problem(out: str | Path, option: str = "--out") -> str | None:
    """Why the report cannot be written at ``out``, or None when it can.

    ``out`` must not be a directory; its folder is created if missing (as the run would) and
    must take a new file: a probe file is created there and removed at once. A URL must name
    an object, not a bucket or a folder, and its folder must take a probe object (an unknown
    scheme, a missing bucket or refused credentials fail here). ``option`` names the location
    in the message.
    """
    path = location(out)
    if isinstance(path, str):
        return _url_problem(path, option)
    if path.is_dir():
        return f"{option} {out}: is a directory; give a file path for the report, e.g. {path / 'report.json'}"
    if path.exists() and not path.is_file():
        return f"{option} {out}: exists and is not a regular file"
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"{option} {out}: cannot create the folder {folder}: {e.strerror or e}"
    try:
        probe_directory(folder, prefix=f".{path.name}.")
    except OSError as e:
        return f"{option} {out}: cannot write in {folder}: {e.strerror or e}"
    return None


def _url_problem(url: str, option: str) -> str | None:
    """Why no report can be stored at ``url``, or None: it names an object whose folder takes a probe."""
    folder = parent(url)
    if url.endswith("/") or folder == url:
        return (
            f"{option} {url}: names a folder; give the URL of an object for the report, e.g. {join(url, 'report.json')}"
        )
    try:
        probe_writable(folder, shown=url)
        fs, key = open_location(url)
        is_dir = fs.isdir(key)
    except StorageError as e:
        return f"{option} {e}"
    except Exception as e:
        return f"{option} {problem(e, url)}"
    if is_dir:
        example = join(url, "report.json")
        return f"{option} {url}: is a folder of objects; give the URL of an object for the report, e.g. {example}"
    return None


def check_out(out: str | Path) -> Location:
    """``out`` as a location (``orchestrator.store.storage.location``), or ``OutPathError`` saying why the
    report cannot be written there."""
    why = out_problem(out)
    if why:
        raise OutPathError(why)
    return location(out)
