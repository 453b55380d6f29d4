"""Torch's structured compile trace of the measured compile (``trace: true``), recorded in a running
worker and packed to travel with the result.

``TORCH_TRACE=DIR`` makes torch write a structured log of every compile into ``DIR``: one JSON
record a line (Dynamo's start and guards, the graphs of every stage, inductor's output code,
the compile's timed events, its cache hits and misses), each with the compile id it belongs
to, in the glog-prefixed format ``tlparse`` reads. Torch reads the variable once, when it is
imported (``torch._logging._internal._init_logs``): what it sets up is one handler on the logger
``torch.__trace`` (``LazyTraceHandler(DIR)``, which opens ``DIR/dedicated_log_torch_trace_*.log``
at its first record, formatted by ``TorchLogsFormatter(trace=True)``), and ``trace_structured``
writes a record whenever that logger has a handler. A worker imported torch long before its
experiment, without the variable, so ``recording`` sets the same handler up for one block of
code and takes it off (and closes its file) when the block ends, in every case: the next
experiment of the worker is not traced. Torch's own handler, when the worker was started with
``TORCH_TRACE``, stays as it was.

Torch's log names source files by number: each number is given once per process, in a ``str``
record, when the file is first interned (``torch._logging.structured.intern_string``). A trace
that starts in a process that compiled before would name files it never defined; ``recording``
opens its log with every string interned so far, as a process traced from its start would have.

Compile workers that inductor starts as subprocesses (``compile_threads`` > 1) are not traced:
what they compile in parallel shows in the main process's records as the wait for them.
"""

from __future__ import annotations

import base64
import io
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tasks.models import TraceInfo
from tasks.text import error_line

LOG_GLOB = "dedicated_log_torch_trace_*.log"  # torch's names for its trace files (torch._logging._internal.LOG_PREFIX)
PREAMBLE = ('{"str": ', '{"artifact": {"name": "torch_version"')  # the records every trace starts with
MAX_ARCHIVE_BYTES = 64 * 2**20  # compressed: a bound on what one result carries back through Ray; the
# traces of benchmarks/trace_overhead.py (logs of 145-642 KiB) pack to 30-115 KiB, about a fifth


@contextmanager
def recording(folder: Path) -> Iterator[None]:
    """Torch's structured trace on for the block, written into ``folder`` as ``TORCH_TRACE=folder``
    would write it; off again after the block, its file closed, whatever the block raised."""
    import torch._logging._internal as torch_logging
    import torch._logging.structured as structured

    handler = torch_logging.LazyTraceHandler(str(folder))
    handler.setFormatter(torch_logging.TorchLogsFormatter(trace=True))
    torch_logging.trace_log.addHandler(handler)
    try:
        for text, number in list(structured.INTERN_TABLE.items()):  # the numbers this process gave before
            torch_logging.trace_structured("str", _interned(text, number), suppress_context=True)
        yield
    finally:
        torch_logging.trace_log.removeHandler(handler)
        handler.close()


def _interned(text: str, number: int) -> Callable[[], tuple[str, int]]:
    """The metadata of a ``str`` record: ``text`` is the file torch numbered ``number``."""
    return lambda: (text, number)


class CompileTrace:
    """The trace of one block (``with trace:``) when ``enabled``, else nothing; ``info`` after the block.

    The block's log goes to a temporary folder of the worker; when the block ends the logs are
    packed into ``TraceInfo.archive`` (a gzip tar, base64) and the folder is removed. The
    driver unpacks them beside the report (``orchestrator.store.traces``). A trace that cannot be
    recorded or packed is an ``error`` in its ``TraceInfo``, never a failure of the experiment.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.info: TraceInfo | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._recording = ExitStack()

    def __enter__(self) -> CompileTrace:
        if not self.enabled:
            return self
        self._folder = tempfile.TemporaryDirectory(prefix="compilebench-trace-")
        try:
            self._recording.enter_context(recording(Path(self._folder.name)))
        except Exception as e:
            self.info = TraceInfo(
                error=f"the trace could not be started: {error_line(e, fallback='no message', with_type=True)}"
            )
            self._folder.cleanup()
            self._folder = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._folder is None:
            return
        try:
            self._recording.close()  # the handler off and its file closed, before the logs are packed
            self.info = pack(Path(self._folder.name))
        except Exception as e:
            self.info = TraceInfo(
                error=f"the trace could not be packed: {error_line(e, fallback='no message', with_type=True)}"
            )
        finally:
            self._folder.cleanup()
            self._folder = None


def pack(folder: Path) -> TraceInfo:
    """The trace logs in ``folder`` as a ``TraceInfo`` whose ``archive`` holds them (a gzip tar,
    base64); an ``error`` instead when there are none or they pack to over ``MAX_ARCHIVE_BYTES``."""
    logs = sorted(folder.glob(LOG_GLOB))
    size = sum(log.stat().st_size for log in logs)
    names = [log.name for log in logs]
    if not any(_compile_records(log) for log in logs):
        return TraceInfo(error="torch wrote no trace: nothing was compiled while it was on")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for log in logs:
            tar.add(log, arcname=log.name, filter=_readable)
    packed = buffer.getvalue()
    if len(packed) > MAX_ARCHIVE_BYTES:
        return TraceInfo(
            log_files=names,
            bytes=size,
            error=f"the trace packs to {len(packed) / 2**20:.0f} MiB, over the {MAX_ARCHIVE_BYTES // 2**20} MiB "
            "a result may carry: not kept",
        )
    return TraceInfo(log_files=names, bytes=size, archive=base64.b64encode(packed).decode("ascii"))


def _readable(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """A log as an ordinary file (torch creates it 0600, with ``mkstemp``): readable beside the report."""
    member.mode = 0o644
    return member


def _compile_records(log: Path) -> bool:
    """Whether ``log`` holds a record beyond what every trace starts with (the interned strings, torch's
    version): whether anything was compiled while it was written."""
    with log.open(encoding="utf-8", errors="replace") as lines:
        return any(not line.startswith("\t") and not line.partition("] ")[2].startswith(PREAMBLE) for line in lines)


def unpack(info: TraceInfo, folder: Path) -> list[Path]:
    """Write the logs packed in ``info.archive`` into ``folder``; their paths, in the archive's order.
    Only regular files with plain names are taken (``tarfile``'s ``data`` filter refuses the rest)."""
    if info.archive is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(info.archive)), mode="r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and "/" not in m.name]
        tar.extractall(folder, members=members, filter="data")
    return [folder / m.name for m in members]
