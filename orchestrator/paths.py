"""Where a run writes, checked before anything starts.

A run writes its journal next to the report as results arrive and the report itself at the
end; a path that cannot take them must stop the run before Ray starts, not after the sweep.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class OutPathError(ValueError):
    """A report path the run could not write; the message is one line meant for the user."""


def out_problem(out: str | Path, option: str = "--out") -> str | None:
    """Why the report cannot be written at ``out``, or None when it can.

    ``out`` must not be a directory; its folder is created if missing (as the run would) and
    must take a new file: a probe file is created there and removed at once. ``option`` names
    the path in the message.
    """
    path = Path(out)
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
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
    except OSError as e:
        return f"{option} {out}: cannot write in {folder}: {e.strerror or e}"
    os.close(fd)
    os.unlink(probe)
    return None


def check_out(out: str | Path) -> Path:
    """``out`` as a Path, or ``OutPathError`` saying why the report cannot be written there."""
    problem = out_problem(out)
    if problem:
        raise OutPathError(problem)
    return Path(out)
