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


def test_an_error_raised_in_the_copy_is_raised_here_and_the_work_is_done_once(tmp_path):
    """A spec's loading imports a user's target module; were a bad spec loaded again here, that module's import
    would run twice. The copy's error comes back: the work ran once, in the copy."""
    done = tmp_path / "done.txt"
    out = run_fresh(
        f"""
        import os
        from tasks.forked import Beside
        parent = os.getpid()

        def bad_spec():
            with open({str(done)!r}, "a") as f:
                f.write(f"{{os.getpid() != parent}}\\n")
            raise ValueError("bad spec")

        with Beside(bad_spec) as beside:
            assert beside.forked
            try:
                beside.result()
            except ValueError as e:
                print("raised:", e)
        """
    )
    assert out == "raised: bad spec"
    assert done.read_text().splitlines() == ["True"]  # once, in the copy


def test_a_copy_that_cannot_say_how_the_work_ended_leaves_it_to_be_made_here(tmp_path):
    """Killed, a result that does not pickle, an error whose arguments do not rebuild it, an error of a module
    this process has not imported (reading it would import the module here): made here, the same result or
    error as the copy's would have been."""
    (tmp_path / "elsewhere.py").write_text("class Refused(Exception):\n    pass\n")
    out = run_fresh(
        f"""
        import os, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from tasks.forked import Beside
        parent = os.getpid()
        here = lambda: os.getpid() == parent

        def killed():
            if not here():
                os._exit(3)
            return "made here"

        class TwoArgs(Exception):
            def __init__(self, field, problem):
                super().__init__(f"{{field}}: {{problem}}")

        def unrebuilt():
            raise TwoArgs("seed", "not an integer")

        def of_a_new_module():
            from elsewhere import Refused
            raise Refused(f"here: {{here()}}")

        print(Beside(killed).result(), Beside(lambda: (here(), lambda: None)).result()[0])
        for make in (unrebuilt, of_a_new_module):
            try:
                Beside(make).result()
            except Exception as e:
                print(type(e).__name__, e, here())
        """
    )
    assert out.splitlines() == [
        "made here True",
        "TwoArgs seed: not an integer True",
        "Refused here: True True",
    ]


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
