"""Writing reports atomically and reading them back."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from orchestrator.report.models import Report


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, sync it, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a report is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(report: Report, path: Path) -> None:
    write_atomic(path, report.model_dump_json(indent=2) + "\n")


def load_report(path: Path) -> Report:
    return Report.model_validate_json(path.read_text())
