"""Work done in a forked copy of this process while this one goes on (``Beside``): a big report's page draws its
charts and its table of every result there while the command works out and prints the rest; ``compare`` reads the
two summaries' decisions there while it reads the digests; a resumed run loads its spec there while it reads its
journal. Driver-side only, with the other helpers both sides may import (``heap``, ``files``).

The copy is forked only where that is safe (``can_fork``): on Linux, from a process running no other thread, since
a lock another thread held would be copied held. It shares this process's memory until either writes to it, so
nothing is sent to it; what it makes, or the error it raises, comes back pickled through a temporary file, read once
it has exited: the work is done once, its side effects (a user's target module imported by a spec's loading) happen
once. Anywhere else, or where the copy cannot say how the work ended (it was killed; what it made or raised does
not pickle, or its error's class is of a module this process has not imported, which reading it here would import),
the work is done in this process when its result is asked for: the same result either way, and the same error.

Imports nothing of the project but ``tasks.heap``.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import IO, Generic, NoReturn, TypeVar, cast

from tasks.heap import collector_paused

T = TypeVar("T")


def can_fork() -> bool:
    """Whether this process may fork a copy to work in: Linux, and no other thread running (macOS may not let a
    forked process use every system library; Windows has no fork)."""
    return sys.platform == "linux" and threading.active_count() == 1


def _rebuilt_from(data: bytes, modules: set[str]) -> bool:
    """Whether ``data`` unpickles (an error whose arguments rebuild it) from classes of ``modules`` alone."""
    needed: set[str] = set()

    class Noting(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            needed.add(module)
            return super().find_class(module, name)

    try:
        Noting(io.BytesIO(data)).load()
    except Exception:
        return False
    return needed <= modules


class Beside(Generic[T]):
    """``make()``, started in a forked copy of this process where ``can_fork``; ``result`` waits for what it made.
    Use it as a context manager, so that a copy whose result is never asked for (the caller failed meanwhile) is
    stopped and reaped."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._pid: int | None = None
        self._file: IO[bytes] | None = None
        if can_fork():
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by result or close)
            for stream in (sys.stdout, sys.stderr):  # what is pending is written once, by this process
                stream.flush()
            try:
                pid = os.fork()
            except OSError:  # no room for a copy: made here when asked
                self._file.close()
                self._file = None
                return
            if pid == 0:
                try:
                    self._child(self._file)
                finally:
                    os._exit(1)
            self._pid = pid

    @property
    def forked(self) -> bool:
        """Whether a copy is making it (until ``result``)."""
        return self._pid is not None

    def _child(self, file: IO[bytes]) -> NoReturn:
        """In the copy: make it, pickle what it made or the error it raised to the file, and leave without running
        this process's exit handlers or flushing its buffers (the parent's, copied). Exit 0: the file holds
        ``(True, made)`` or ``(False, error)``. Anything else (nothing pickles, an error whose class the parent would
        have to import to read it, an interruption) is exit 1: the parent then makes it itself."""
        code = 1
        try:
            had = set(sys.modules)  # the parent's modules, as forked
            with collector_paused():  # a collection would touch, so copy, every object of the parent's
                try:
                    made = self._make()
                except Exception as e:  # said by the parent, as raised here: the work is not done again there
                    data = pickle.dumps((False, e), protocol=pickle.HIGHEST_PROTOCOL)
                    if not _rebuilt_from(data, had):
                        raise
                else:
                    data = pickle.dumps((True, made), protocol=pickle.HIGHEST_PROTOCOL)
                file.write(data)
                file.flush()
            code = 0
        finally:
            os._exit(code)

    def result(self) -> T:
        """What ``make()`` returned, or the error it raised, raised here: the copy's, once it exited; made here where
        there was no copy or the copy could not say (``_child``)."""
        pid, file = self._pid, self._file
        if pid is None or file is None:
            return self._make()
        _, status = os.waitpid(pid, 0)  # interrupted (Ctrl-C), the copy is still ours to stop (``close``)
        self._pid = self._file = None
        with file:
            if os.waitstatus_to_exitcode(status) == 0:
                file.seek(0)
                made, value = pickle.load(file)  # written by this process's own copy, in a file only the two hold
                if not made:
                    raise cast(Exception, value)
                return cast(T, value)
        return self._make()

    def close(self) -> None:
        """Stop a copy still working (its result no longer wanted) and reap it."""
        pid, file = self._pid, self._file
        self._pid = self._file = None
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if file is not None:
            file.close()

    def __enter__(self) -> Beside[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
