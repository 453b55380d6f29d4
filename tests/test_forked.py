"""Work beside this process (``tasks.forked.Beside``): made in a forked copy where that is safe, made
here otherwise or where the copy fails, the same result either way. Each case runs in a fresh interpreter, as a
command does: a pytest worker may run threads of its own, and then nothing is forked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tasks import forked
from tasks.forked import Beside


def run_fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_work_is_made_in_a_copy_and_comes_back_whole():
    out = run_fresh(
        """
        import os
        from tasks.forked import Beside
        parent = os.getpid()
        with Beside(lambda: (os.getpid(), ["x" * 1000] * 50_000, {"n": 1.5})) as beside:
            assert beside.forked
            pid, texts, extra = beside.result()
            assert not beside.forked
        assert pid != parent and texts == ["x" * 1000] * 50_000 and extra == {"n": 1.5}
        print("ok")
        """
    )
    assert out == "ok"


def test_a_copy_that_fails_is_made_here_and_an_error_is_raised_here():
    out = run_fresh(
        """
        import os
        from tasks.forked import Beside
        parent = os.getpid()

        def only_here():
            if os.getpid() != parent:
                raise RuntimeError("the copy fails")
            return "made here"

        beside = Beside(only_here)
        assert beside.forked and beside.result() == "made here"

        def never():
            raise ValueError("bad report")

        try:
            Beside(never).result()
        except ValueError as e:
            print("raised:", e)
        """
    )
    assert out == "raised: bad report"


def test_closing_stops_a_copy_still_working_and_reaps_it():
    out = run_fresh(
        """
        import os, time
        from tasks.forked import Beside
        start = time.monotonic()
        with Beside(lambda: time.sleep(60)) as beside:
            pid = beside._pid
            assert beside.forked
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            print("reaped", time.monotonic() - start < 30)
        """
    )
    assert out == "reaped True"


def test_with_another_thread_running_nothing_is_forked():
    out = run_fresh(
        """
        import os, threading
        from tasks.forked import Beside
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        beside = Beside(os.getpid)
        print(beside.forked, beside.result() == os.getpid())
        stop.set()
        thread.join()
        """
    )
    assert out == "False True"


def test_where_fork_is_not_safe_the_work_is_made_when_asked(monkeypatch: pytest.MonkeyPatch):
    made: list[int] = []
    monkeypatch.setattr(forked, "can_fork", lambda: False)
    beside = Beside(lambda: made.append(1) or len(made))
    assert not beside.forked and made == []
    assert beside.result() == 1 and made == [1]


def test_a_wait_interrupted_by_ctrl_c_leaves_the_copy_to_be_stopped_and_reaped():
    out = run_fresh(
        """
        import os, signal, time
        from tasks.forked import Beside

        def interrupt(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        pid = None
        try:
            with Beside(lambda: time.sleep(60)) as beside:
                pid = beside._pid
                signal.alarm(1)
                beside.result()
        except KeyboardInterrupt:
            pass
        try:
            os.waitpid(pid, os.WNOHANG)
            print("left running")
        except ChildProcessError:
            print("reaped")
        """
    )
    assert out == "reaped"
