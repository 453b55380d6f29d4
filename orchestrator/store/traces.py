"""Compile traces beside the report: a traced result's files written where its report goes, with tlparse's HTML.

A worker sends the structured trace of a traced experiment (``trace: true``; ``tasks.tracing``)
packed in its result (``TraceInfo.archive``). As each result arrives, before it enters the
journal, the driver unpacks it into ``REPORT.traces/<experiment id>-r<replicate>/`` beside the
report, a local folder or the same prefix in the report's object store
(``orchestrator.store.storage``), and keeps in the result where the files are, relative to the
report's folder, instead of the bytes. Where the ``tlparse`` program is installed (the
``trace`` extra: ``pip install 'compilebench[trace]'``), the driver also renders the log with
``tlparse LOG -o DIR --no-browser`` into ``tlparse/`` in the same folder (``tlparse/index.html``
is the page to open): a page per compile with its graphs, output code, guards and timings.

Storing and rendering run beside the scheduling loop (``TraceStore``: a few threads owned by the
run), so that a slow tlparse never holds up the next experiment's dispatch. A result enters the
journal once, whole: after its trace is stored and rendered, and in the order the results arrived
(a result behind a trace still being rendered waits for it, in memory). A run that starts over
(``overwrite``) removes the earlier run's ``REPORT.traces/`` with its journal (``clear_traces``).

Nothing here fails a run: a trace that cannot be stored or rendered is an ``error`` in its result.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from orchestrator.store.storage import (
    Location,
    StorageError,
    join,
    name_of,
    open_location,
    parent,
    problem,
    write_bytes,
)
from tasks.models import Result, TraceInfo
from tasks.tracing import unpack

TRACES_SUFFIX = ".traces"  # out/r.json -> out/r.traces/
TLPARSE_FOLDER = "tlparse"  # in each trace's folder: tlparse's pages, index.html first
TLPARSE_TIMEOUT_S = 300.0  # one log; tlparse reads a 150 KB log in about 0.1 s here
TRACE_THREADS = 2  # traces stored and rendered at once on the driver: tlparse uses a core each


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


class TraceStore:
    """The traces of a run's results stored beside ``report`` on ``threads`` threads, the results
    handed back in the order they arrived.

    ``add`` takes each final result as it arrives: one with a packed trace is stored
    (``store_trace``, tlparse included) on a thread, any other is ready at once; ``report=None``
    stores nothing. ``ready`` hands back, without waiting, the results whose turn has come (each
    stored, and every one that arrived before it); ``finish`` waits for the rest. Each result is
    handed back once. ``close`` (or leaving the ``with`` block) cancels what has not started and
    waits for what has.
    """

    def __init__(self, report: Location | None, threads: int = TRACE_THREADS) -> None:
        self.report = report
        self._queue: deque[Future[Result] | Result] = deque()  # a result without a trace to store: itself
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="compilebench-trace")

    def add(self, result: Result) -> None:
        if self.report is None or result.trace is None or result.trace.archive is None:
            self._queue.append(result)
            return
        self._queue.append(self._threads.submit(store_trace, result, self.report))

    def ready(self) -> Iterator[Result]:
        """The results at the head of the queue that are stored, oldest first; never waits."""
        while self._queue and (not isinstance(head := self._queue[0], Future) or head.done()):
            yield _result(self._queue.popleft())

    def finish(self) -> Iterator[Result]:
        """Every result left, oldest first, each waited for in turn."""
        while self._queue:
            yield _result(self._queue.popleft())

    def close(self) -> None:
        self._queue.clear()
        self._threads.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _result(queued: Future[Result] | Result) -> Result:
    return queued.result() if isinstance(queued, Future) else queued


def clear_traces(report: Location) -> str | None:
    """Remove ``traces_folder(report)`` and everything in it, as a run that starts over does; why
    it could not be removed (one line), else None (removed, or there was none)."""
    folder = traces_folder(report)
    if isinstance(folder, Path):
        try:
            shutil.rmtree(folder)
        except FileNotFoundError:
            pass
        except OSError as e:
            return f"the earlier run's traces in {folder} were not removed: {e}"
        return None
    try:
        fs, path = open_location(folder)
        fs.invalidate_cache(path)
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except Exception as e:
        return f"the earlier run's traces were not removed: {problem(e, folder)}"
    return None


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
