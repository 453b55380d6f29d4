"""Compile traces beside the report: a traced result's files written where its report goes, with tlparse's HTML.

A worker sends the structured trace of a traced experiment (``trace: true``; ``tasks.tracing``)
packed in its result (``TraceInfo.archive``). As each result arrives, before it enters the
journal, the driver unpacks it into ``REPORT.traces/<experiment id>-r<replicate>/`` beside the
report, a local folder or the same prefix in the report's object store
(``orchestrator.storage``), and keeps in the result where the files are, relative to the
report's folder, instead of the bytes. Where the ``tlparse`` program is installed (the
``trace`` extra: ``pip install 'compilebench[trace]'``), the driver also renders the log with
``tlparse LOG -o DIR --no-browser`` into ``tlparse/`` in the same folder (``tlparse/index.html``
is the page to open): a page per compile with its graphs, output code, guards and timings.

Nothing here fails a run: a trace that cannot be stored or rendered is an ``error`` in its result.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from orchestrator.storage import Location, StorageError, join, name_of, open_location, parent, problem, write_bytes
from tasks.models import Result, TraceInfo
from tasks.tracing import unpack

TRACES_SUFFIX = ".traces"  # out/r.json -> out/r.traces/
TLPARSE_FOLDER = "tlparse"  # in each trace's folder: tlparse's pages, index.html first
TLPARSE_TIMEOUT_S = 300.0  # one log; tlparse reads a 150 KB log in about 0.1 s here


def traces_folder(report: Location) -> Location:
    """Beside the report: ``out/r.json`` → ``out/r.traces``; ``s3://b/run/r.json`` → ``s3://b/run/r.traces``."""
    if isinstance(report, Path):
        return report.with_name(report.stem + TRACES_SUFFIX)
    return join(parent(report), Path(name_of(report)).stem + TRACES_SUFFIX)


def trace_name(result: Result) -> str:
    """The folder of one run's trace: ``<experiment id>-r<replicate>``."""
    return f"{result.experiment_id}-r{result.replicate}"


def tlparse_program() -> str | None:
    """The ``tlparse`` program: beside this Python (its virtual environment's ``bin``), else on ``PATH``."""
    beside = Path(sys.executable).with_name("tlparse")
    return str(beside) if beside.is_file() else shutil.which("tlparse")


def store_trace(result: Result, report: Location) -> Result:
    """``result`` with its packed trace stored beside ``report`` (``traces_folder``) and rendered by
    tlparse where installed; its ``trace`` then names the files, relative to the report's folder.
    A result without a packed trace is returned as it is. Never raises."""
    info = result.trace
    if info is None or info.archive is None:
        return result
    folder = traces_folder(report)
    name = trace_name(result)
    relative = f"{_name(folder)}/{name}"
    with tempfile.TemporaryDirectory(prefix="compilebench-trace-") as tmp:
        local = Path(tmp) / name
        try:
            logs = unpack(info, local)
        except Exception as e:
            return _with(result, info.model_copy(update={"archive": None, "error": f"the trace did not unpack: {e}"}))
        html, render_error = render(logs, local / TLPARSE_FOLDER)
        where = folder / name if isinstance(folder, Path) else join(folder, name)
        try:
            copy_folder(local, where)
        except StorageError as e:
            return _with(result, TraceInfo(bytes=info.bytes, error=f"the trace was not stored: {e}"))
        except OSError as e:
            return _with(result, TraceInfo(bytes=info.bytes, error=f"the trace was not stored in {where}: {e}"))
    stored = TraceInfo(
        dir=relative,
        log_files=[f"{relative}/{log.name}" for log in logs],
        html=f"{relative}/{TLPARSE_FOLDER}/index.html" if html else None,
        bytes=info.bytes,
        error=info.error or render_error,
    )
    return _with(result, stored)


def render(logs: list[Path], out: Path) -> tuple[bool, str | None]:
    """tlparse's pages for the largest of ``logs`` in ``out``: whether ``out/index.html`` was written,
    and why not where that is worth saying (not when tlparse is not installed: the extra is optional)."""
    program = tlparse_program()
    if program is None or not logs:
        return False, None
    log = max(logs, key=lambda p: p.stat().st_size)
    try:
        proc = subprocess.run(
            [program, str(log), "-o", str(out), "--no-browser", "--overwrite"],
            capture_output=True,
            text=True,
            timeout=TLPARSE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"tlparse did not run: {e}"
    if proc.returncode != 0 or not (out / "index.html").is_file():
        said = (proc.stderr or proc.stdout).strip().splitlines()
        return False, f"tlparse exited with code {proc.returncode}" + (f": {said[-1]}" if said else "")
    return True, None


def copy_folder(local: Path, to: Location) -> None:
    """Every file under ``local`` to ``to`` (a folder, or a prefix in a store), replacing what was there."""
    if isinstance(to, Path):
        shutil.rmtree(to, ignore_errors=True)
        shutil.copytree(local, to)
        return
    fs, path = open_location(to)
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except Exception as e:
        raise StorageError(problem(e, to)) from None
    for file in sorted(p for p in local.rglob("*") if p.is_file()):
        write_bytes(join(to, file.relative_to(local).as_posix()), file.read_bytes())


def _name(folder: Location) -> str:
    return folder.name if isinstance(folder, Path) else name_of(folder)


def _with(result: Result, trace: TraceInfo) -> Result:
    return result.model_copy(update={"trace": trace})
