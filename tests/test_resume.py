"""A run's journal survives its driver: resume after SIGKILL, refuse to clobber, Ctrl-C writes what finished.

The drivers here are the real CLI in a subprocess, joining the session's Ray instance with
``--address`` (which also ships the working directory, as on a real cluster), on sweeps of
slow trivial experiments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator import api
from orchestrator.api import RunInterrupted
from orchestrator.cli import app
from orchestrator.plan.spec import load_spec
from orchestrator.report import Report
from orchestrator.store.journal import journal_path, read_journal
from tasks.models import Result

ROOT = Path(__file__).resolve().parents[1]

SLOW_SWEEP = """
name: slow
defaults:
  device: cpu
  resources: {cpus: 2}
  compile: {backend: eager}
  timing: {warmup: 0, repeats: 1}
  check: {enabled: false}
experiments:
  - target: tests.user_targets:make_sleepy
    params: {ms: 50}
    sweep: {seed: [1, 2, 3, 4, 5, 6]}
"""


GATED_SWEEP = """
name: slow
defaults:
  device: cpu
  resources: {{cpus: 2}}
  compile: {{backend: eager}}
  timing: {{warmup: 0, repeats: 1}}
  check: {{enabled: false}}
experiments:
  - target: tests.fault_targets:make_gated
    sweep: {{seed: {free}}}
  - target: tests.fault_targets:make_gated
    params: {{gate: "{gate}"}}
    sweep: {{seed: {gated}}}
"""


def gated_sweep(gate: Path, free: int) -> str:
    """Six experiments: the first ``free`` finish at once, the rest only once ``gate`` exists."""
    return GATED_SWEEP.format(gate=gate, free=list(range(free)), gated=list(range(free, 6)))


def start(spec: Path, out: Path, address: str, *extra: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "orchestrator", "run", str(spec), "--out", str(out), "--address", address, *extra]
    return subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible
    )


def interruptible() -> None:
    """In the driver's child process, before Python starts: Ctrl-C's default action, whatever the tests'
    own process inherited. A job a shell started in the background (``cmd &``) has SIGINT ignored, its
    children too, and Python installs its KeyboardInterrupt handler only where SIGINT is not ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen[str], timeout_s: float = 600) -> str:
    """The driver's stderr once it exits; if it has not within ``timeout_s``, a failure that carries
    every thread's stack (the CLI dumps them on SIGUSR1) and what it printed."""
    try:
        return proc.communicate(timeout=timeout_s)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(5)
        proc.kill()
        _, stderr = proc.communicate()
        pytest.fail(f"the driver did not exit within {timeout_s:.0f} s; its stacks and stderr:\n{stderr}")


def wait_for_lines(journal: Path, n: int, proc: subprocess.Popen[str], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= n):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no results arrived"
        time.sleep(0.05)


@pytest.fixture
def address(ray_cluster) -> str:
    import ray

    return ray.get_runtime_context().gcs_address


def test_a_driver_killed_mid_sweep_resumes_with_every_experiment_once(write_spec, tmp_path, address):
    gate = tmp_path / "gate"
    spec, out = write_spec(gated_sweep(gate, free=2)), tmp_path / "r.json"
    journal = journal_path(out)
    ids = [e.id for e in load_spec(spec).experiments]

    first = start(spec, out, address)
    wait_for_lines(journal, 2, first)
    first.kill()  # SIGKILL: no handler runs, nothing is flushed or written
    first.communicate()
    before = read_journal(journal).results
    assert len(before) == 2 and not out.exists()
    gate.touch()  # the rest can finish now
    line = next(iter(before.values())).model_dump_json()
    with journal.open("a") as f:
        f.write(line[: len(line) // 2])  # as if the kill had landed mid-write

    resumed = start(spec, out, address, "--resume")
    _, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr
    assert f"({len(before)} kept from the journal, {len(ids) - len(before)} to run)" in stderr
    assert f"skipped line {len(before) + 1}, which is not a result (cut short" in stderr

    report = json.loads(out.read_text())
    assert [r["experiment_id"] for r in report["results"]] == ids  # each once, in spec order
    assert report["complete"] is True and report["summary"]["counts"]["ok"] == len(ids)
    for r in report["results"]:
        if (r["experiment_id"], 0) in before:  # kept as they were, not run again
            assert r["started_at"] == before[(r["experiment_id"], 0)].started_at
    after = read_journal(journal)
    assert sorted(after.results) == sorted((i, 0) for i in ids)
    valid_lines = journal.read_bytes().count(b"\n") - 1  # less the half line, which ends where resume began
    assert valid_lines == len(ids)  # only the rest ran: nothing journaled twice


def test_ctrl_c_writes_the_report_of_what_finished_and_exits_130(write_spec, tmp_path, address):
    spec, out = write_spec(gated_sweep(tmp_path / "gate", free=1)), tmp_path / "r.json"  # the gate never opens
    proc = start(spec, out, address)
    wait_for_lines(journal_path(out), 1, proc)
    proc.send_signal(signal.SIGINT)
    stderr = finish(proc)
    assert proc.returncode == 130, stderr
    report = json.loads(out.read_text())
    assert report["complete"] is False
    journaled = read_journal(journal_path(out)).results
    assert [r["experiment_id"] for r in report["results"]] == [key[0] for key in journaled]
    assert len(report["results"]) == 1
    assert f"interrupted: {len(journaled)} of 6 runs finished" in stderr
    assert "rerun with --resume to run the rest" in stderr


def test_sigterm_interrupts_a_run_as_ctrl_c_does(write_spec, tmp_path, ray_cluster):
    """What ``kill`` or ``ray job stop`` does to a driver: the same incomplete report, then the handler is put back."""
    out, handler = tmp_path / "r.json", signal.getsignal(signal.SIGTERM)

    def terminate(result: Result) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(RunInterrupted) as info:
        api.run(load_spec(write_spec(SLOW_SWEEP)), out, on_result=terminate)
    report = info.value.report
    assert report.complete is False and 1 <= len(report.results) < 6
    assert Report.model_validate_json(out.read_text()) == report
    journaled = [key[0] for key in read_journal(journal_path(out)).results]  # in the order they arrived
    assert sorted(r.experiment_id for r in report.results) == sorted(journaled)  # the report: in spec order
    assert signal.getsignal(signal.SIGTERM) is handler


def test_an_earlier_journal_is_refused_before_ray_starts(write_spec, tmp_path, monkeypatch):
    def no_ray(*args, **kwargs):
        raise AssertionError("connected to Ray before checking the journal")

    monkeypatch.setattr(api, "connect", no_ray)
    spec, out = write_spec("name: x\nexperiments: [{target: seed.foo}]\n"), tmp_path / "r.json"
    journal_path(out).write_text("{}\n")
    runner = CliRunner()
    refused = runner.invoke(app, ["run", str(spec), "--out", str(out)])
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines() == [
        f"error: {journal_path(out)} already is the journal of an earlier run: "
        "pass --resume to keep them and run the rest, or --overwrite to start over"
    ]
    both = runner.invoke(app, ["run", str(spec), "--out", str(out), "--resume", "--overwrite"])
    assert both.exit_code == 2 and "choose one" in both.output
    assert journal_path(out).read_text() == "{}\n"  # untouched


REPLICATED = """
name: replicated
defaults:
  device: cpu
  resources: {{cpus: 1}}
  compile: {{backend: eager}}
  timing: {{warmup: 0, repeats: 3}}
  check: {{enabled: false}}
experiments:
  - target: seed.foo
    replicates: {k}
  - target: seed.bar
"""


def test_replicates_run_in_other_processes_and_resume_keys_on_the_replicate(write_spec, tmp_path, ray_cluster):
    out = tmp_path / "r.json"
    report = api.run(write_spec(REPLICATED.format(k=2)), out)
    foo = load_spec(write_spec(REPLICATED.format(k=2))).experiments[0]
    assert [(r.target, r.replicate) for r in report.results] == [("seed.foo", 0), ("seed.foo", 1), ("seed.bar", 0)]
    assert report.complete and {r.status for r in report.results} == {"ok"}
    first, second = report.results[:2]
    assert first.experiment_id == second.experiment_id == foo.id
    assert first.worker.pid != second.worker.pid  # each replicate in a process of its own

    raised = write_spec(REPLICATED.format(k=3))  # the same experiments, one more replicate of the first
    assert [e.id for e in load_spec(raised).experiments] == [foo.id, report.results[2].experiment_id]
    plans = []
    again = api.run(raised, out, resume=True, on_start=plans.append)
    assert [(run.experiment.id, run.replicate) for run in plans[0].todo] == [(foo.id, 2)]  # only the new one
    assert [(r.target, r.replicate) for r in again.results] == [
        ("seed.foo", 0),
        ("seed.foo", 1),
        ("seed.foo", 2),
        ("seed.bar", 0),
    ]
    assert again.results[0].started_at == first.started_at  # kept, not run again
    assert len({r.worker.pid for r in again.results[:3]}) == 3
