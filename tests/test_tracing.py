"""Compile traces: torch's structured trace of the measured compile, recorded in a running process,
carried back with the result, stored beside the report, rendered by tlparse; and the phases that
explain a change of compile latency."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator import api
from orchestrator.execution.pool import Pool
from orchestrator.execution.runner import run_experiments
from orchestrator.report import read
from orchestrator.report.compile_phases import PHASES, explain, explanation, phase_seconds
from orchestrator.report.html import render_html
from orchestrator.store.journal import Journal, journal_path, read_journal
from orchestrator.store.storage import StorageError, read_bytes, write_bytes
from orchestrator.store.traces import clear_traces, store_trace, tlparse_program, traces_folder
from tasks.models import Experiment, TraceInfo
from tasks.procedure import run_experiment
from tasks.tracing import CompileTrace, pack, recording, unpack
from tests.conftest import run_on_cpu
from tests.fault_targets import StubWorker
from tests.report_data import make_report, make_result

# A record of torch's structured trace, as tlparse reads it: a glog prefix, then one JSON object
# (torch/_logging/_internal.py TorchLogsFormatter(trace=True)); its payload follows on lines that start with a tab.
RECORD = re.compile(r"^[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ \S+:\d+\] (\{.*\})$")


def records(log: Path) -> list[tuple[dict, str | None]]:
    """Every record of a trace log with its payload; fails on a line that is neither."""
    out: list[tuple[dict, list[str]]] = []
    for line in log.read_text().splitlines():
        if line.startswith("\t"):
            assert out, f"a payload line before any record: {line!r}"
            out[-1][1].append(line[1:])
            continue
        match = RECORD.match(line)
        assert match, f"not a structured-trace line: {line[:200]!r}"
        out.append((json.loads(match.group(1)), []))
    return [(meta, "\n".join(payload) if payload else None) for meta, payload in out]


def unpacked(info: TraceInfo, folder: Path) -> list[Path]:
    assert info.archive is not None, info.error
    return unpack(info, folder)


def test_a_traced_experiment_carries_torchs_structured_trace_of_its_compile(tmp_path):
    run_on_cpu("seed.foo")  # this process compiled before: file numbers the trace must define itself
    r = run_on_cpu("seed.foo", trace=True)
    assert r.status == "ok" and r.trace is not None and r.trace.error is None
    logs = unpacked(r.trace, tmp_path)
    assert [p.name for p in logs] == r.trace.log_files and r.trace.bytes == sum(p.stat().st_size for p in logs)
    assert len(logs) == 1 and logs[0].name.startswith("dedicated_log_torch_trace_")
    parsed = records(logs[0])
    kinds = {next(iter(meta)) for meta, _ in parsed}
    assert {"str", "dynamo_start", "dynamo_output_graph", "compilation_metrics"} <= kinds
    for meta, payload in parsed:  # a payload is announced by its md5, as tlparse checks
        assert ("has_payload" in meta) == (payload is not None)
        if payload is not None:
            assert hashlib.md5(payload.encode()).hexdigest() == meta["has_payload"]
    starts = [meta for meta, _ in parsed if "dynamo_start" in meta]
    assert [(m["frame_id"], m["frame_compile_id"]) for m in starts] == [(0, 0)]  # the measured compile alone
    defined = {meta["str"][1] for meta, _ in parsed if "str" in meta}
    used = {frame["filename"] for m in starts for frame in m["dynamo_start"]["stack"]}
    assert used <= defined  # every file number its records use is defined in this log


def test_the_trace_is_off_after_the_traced_compile():
    from torch._logging._internal import trace_log

    before = list(trace_log.handlers)
    traced = run_on_cpu("seed.foo", trace=True)
    assert traced.trace is not None and traced.trace.archive is not None
    assert trace_log.handlers == before
    after = run_on_cpu("seed.foo")
    assert after.status == "ok" and after.trace is None


def test_recording_writes_only_while_it_is_on(tmp_path):
    def compile_once(n: int) -> None:
        torch._dynamo.reset()
        torch.compile(lambda x: x.sin() + n, backend="eager")(torch.randn(4))

    with recording(tmp_path):
        compile_once(1)
    (log,) = tmp_path.glob("dedicated_log_torch_trace_*.log")
    size = log.stat().st_size
    assert size > 0
    compile_once(2)
    assert log.stat().st_size == size and list(tmp_path.iterdir()) == [log]


def test_a_failed_compile_keeps_the_trace_of_how_far_it_got(tmp_path):
    r = run_on_cpu("seed.bar", compile={"backend": "aot_eager", "fullgraph": True}, trace=True)
    assert r.status == "compile_error" and r.trace is not None
    kinds = {next(iter(meta)) for meta, _ in records(unpacked(r.trace, tmp_path)[0])}
    assert "dynamo_start" in kinds


def test_a_traced_replay_holds_every_compile_of_its_first_pass(tmp_path):
    r = run_experiment(
        Experiment(
            target="tests.user_targets:make_sized",
            device="cpu",
            compile={"backend": "eager", "dynamic": False, "cache": "cold"},
            timing={"warmup": 1, "repeats": 3},
            replay={"param": "rows", "values": [8, 16, 32], "calls": 12},
            trace=True,
        )
    )
    assert r.status == "ok" and r.replay.compiles == 3
    parsed = records(unpacked(r.trace, tmp_path)[0])
    starts = [(m["frame_id"], m["frame_compile_id"]) for m, _ in parsed if "dynamo_start" in m]
    assert starts == [(0, 0), (0, 1), (0, 2)]  # the first compile and its two recompiles, nothing else


def test_a_trace_too_large_to_carry_is_an_error_not_a_failure(monkeypatch):
    monkeypatch.setattr("tasks.tracing.MAX_ARCHIVE_BYTES", 100)
    r = run_on_cpu("seed.foo", trace=True)
    assert r.status == "ok" and r.trace is not None and r.trace.archive is None
    assert (r.trace.error or "").endswith("a result may carry: not kept")


def test_a_block_that_compiles_nothing_says_so():
    with CompileTrace(True) as trace:
        pass
    assert trace.info == TraceInfo(error="torch wrote no trace: nothing was compiled while it was on")
    with CompileTrace(False) as untraced:
        pass
    assert untraced.info is None


def test_tracing_is_not_part_of_the_experiments_id():
    assert Experiment(target="seed.foo", trace=True).id == Experiment(target="seed.foo").id


@pytest.fixture(scope="module")
def traced_result():
    return run_on_cpu("seed.foo", trace=True)


def test_the_driver_stores_a_trace_beside_the_report(tmp_path, traced_result):
    r = traced_result.model_copy(update={"replicate": 1})
    stored = store_trace(r, tmp_path / "run" / "r.json")
    name = f"{r.experiment_id}-r1"
    assert traces_folder(tmp_path / "run" / "r.json") == tmp_path / "run" / "r.traces"
    assert stored.trace.dir == f"r.traces/{name}" and stored.trace.archive is None
    assert stored.trace.log_files == [f"r.traces/{name}/{n}" for n in r.trace.log_files]
    assert stored.trace.bytes == r.trace.bytes
    assert all((tmp_path / "run" / f).stat().st_size > 0 for f in stored.trace.log_files)
    assert all((tmp_path / "run" / f).stat().st_mode & 0o444 == 0o444 for f in stored.trace.log_files)


@pytest.mark.skipif(tlparse_program() is None, reason="tlparse is not installed (pip install 'compilebench[trace]')")
def test_tlparse_renders_the_stored_trace(tmp_path, traced_result):
    stored = store_trace(traced_result, tmp_path / "r.json")
    assert stored.trace.error is None
    assert stored.trace.html == f"{stored.trace.dir}/tlparse/index.html"
    page = (tmp_path / stored.trace.html).read_text()
    assert "0/0" in page  # the compile's id, linking its graphs and output code
    strict = subprocess.run(
        [tlparse_program(), tmp_path / stored.trace.log_files[0], "-o", tmp_path / "strict", "--strict"],
        capture_output=True,
        text=True,
    )
    assert strict.returncode == 0, strict.stderr  # every line is one tlparse knows


def test_a_trace_goes_to_the_reports_object_store(traced_result):
    url = "memory://bucket/nightly/r.json"
    stored = store_trace(traced_result, url)
    assert stored.trace.error is None or "tlparse" not in stored.trace.error
    log = stored.trace.log_files[0]
    assert read_bytes(f"memory://bucket/nightly/{log}").startswith(b"V")
    if stored.trace.html:
        assert b"<html" in read_bytes(f"memory://bucket/nightly/{stored.trace.html}").lower()


def test_a_trace_that_cannot_be_stored_is_an_error_in_the_result(tmp_path, traced_result):
    (tmp_path / "r.traces").write_text("a file where the traces folder would be")
    stored = store_trace(traced_result, tmp_path / "r.json")
    assert stored.trace.dir is None and stored.trace.archive is None
    assert stored.trace.error.startswith("the trace was not stored in ")


SPEC = """
name: traced
defaults:
  device: cpu
  resources: {cpus: 1}
  timing: {warmup: 0, repeats: 3}
  check: {enabled: false}
experiments:
  - target: seed.foo
    compile: {backend: aot_eager}
    trace: true
    replicates: 2
  - target: seed.foo
    compile: {backend: eager}
"""


def test_a_run_stores_each_traced_runs_files_beside_the_report(write_spec, tmp_path, ray_cluster):
    out = tmp_path / "r.json"
    report = api.run(write_spec(SPEC), out)
    traced = [r for r in report.results if r.compile.backend == "aot_eager"]
    untraced = [r for r in report.results if r.compile.backend == "eager"]
    assert [r.replicate for r in traced] == [0, 1] and len(untraced) == 1
    for r in traced:
        assert r.status == "ok" and r.trace.dir == f"r.traces/{r.experiment_id}-r{r.replicate}"
        assert r.trace.archive is None
        (log,) = (tmp_path / f for f in r.trace.log_files)
        assert any("dynamo_start" in meta for meta, _ in records(log))
        assert (r.trace.html is not None) == (tlparse_program() is not None)
        if r.trace.html:
            assert (tmp_path / r.trace.html).is_file()
    assert untraced[0].trace is None
    assert sorted(p.name for p in (tmp_path / "r.traces").iterdir()) == sorted(
        f"{r.experiment_id}-r{r.replicate}" for r in traced
    )
    journaled = read_journal(journal_path(out)).results.values()
    assert all(r.trace is None or (r.trace.archive is None and r.trace.dir) for r in journaled)
    assert read(out).results == report.results


UNTRACED = """
name: untraced
defaults:
  device: cpu
  resources: {cpus: 1}
  compile: {backend: eager}
  timing: {warmup: 0, repeats: 3}
  check: {enabled: false}
experiments:
  - target: seed.foo
"""


def test_overwrite_removes_the_earlier_runs_traces_and_resume_keeps_them(write_spec, tmp_path, ray_cluster):
    spec, out = write_spec(UNTRACED), tmp_path / "r.json"
    api.run(spec, out)
    earlier = tmp_path / "r.traces" / "0123456789ab-r0" / "dedicated_log_torch_trace_old.log"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("an earlier run's trace")
    api.run(spec, out, resume=True)
    assert earlier.read_text() == "an earlier run's trace"
    api.run(spec, out, overwrite=True)
    assert not (tmp_path / "r.traces").exists()
    assert (tmp_path / "r.json").is_file() and len(read(out).results) == 1


def test_clearing_traces_in_a_store_removes_them_and_nothing_else():
    url = "memory://bucket/cleared/r.json"
    log = "memory://bucket/cleared/r.traces/0123456789ab-r0/dedicated_log_torch_trace_old.log"
    write_bytes(log, b"an earlier run's trace")
    write_bytes("memory://bucket/cleared/r.json", b"{}")
    assert clear_traces(url) is None
    assert read_bytes("memory://bucket/cleared/r.json") == b"{}"  # only the traces went
    with pytest.raises(StorageError, match="does not exist"):
        read_bytes(log)
    assert clear_traces(url) is None  # nothing there: nothing to say


def test_a_traces_folder_that_cannot_be_removed_is_a_note(tmp_path):
    (tmp_path / "r.traces").write_text("a file where the traces folder would be")
    note = clear_traces(tmp_path / "r.json")
    assert note is not None and note.startswith(
        f"the earlier run's traces in {tmp_path / 'r.traces'} were not removed: "
    )


STUB_LOG = 'V1201 00:00:00.000000 1 stub.py:1] {"dynamo_start": {"stack": []}}\n'  # one record: a compile


class TracedStub(StubWorker):
    """The scheduler's stub executor, its results of ``trace: true`` experiments carrying a packed trace."""

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        result = super().run(payload)
        if payload.get("trace"):
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / "dedicated_log_torch_trace_stub.log").write_text(STUB_LOG)
                result["trace"] = pack(Path(tmp)).model_dump(mode="json")
        return result


def test_a_slow_tlparse_holds_up_no_dispatch_and_the_report_links_every_page(ray_cluster, tmp_path, monkeypatch):
    experiments = [Experiment(target="stub", device="cpu", seed=s, trace=s != 1) for s in range(3)]
    last_sent = threading.Event()
    submit = Pool.submit

    def watch(self: Pool, worker_id: str, payload: dict[str, Any]) -> None:
        submit(self, worker_id, payload)
        if payload["seed"] == 2:
            last_sent.set()

    rendered: dict[str, bool] = {}  # each trace: whether the last experiment had been sent when its page was done

    def slow_tlparse(logs: list[Path], out: Path) -> tuple[bool, str | None]:
        # the CPU experiments run one at a time: the last is sent once the first two have come back
        rendered[out.parent.name] = last_sent.wait(timeout=120)
        out.mkdir(parents=True)
        (out / "index.html").write_text("<html>tlparse</html>")
        return True, None

    monkeypatch.setattr(Pool, "submit", watch)
    monkeypatch.setattr("orchestrator.store.traces.render", slow_tlparse)
    out, seen = tmp_path / "r.json", []
    with Journal(journal_path(out)) as journal:
        results = run_experiments(
            experiments, ray_cluster, journal, lambda r: seen.append(r.seed), report=out, executor=TracedStub
        )
    traced = [results[0], results[2]]
    assert rendered == {f"{r.experiment_id}-r0": True for r in traced}
    assert seen == [0, 1, 2]  # recorded in the order they came back, the untraced one behind the first page
    journaled = list(read_journal(journal_path(out)).results.values())
    assert [r.seed for r in journaled] == [0, 1, 2] and journaled == results
    assert results[1].trace is None
    page = render_html(read(journal_path(out)))
    for r in traced:
        assert r.status == "ok" and r.trace.archive is None and r.trace.error is None
        assert r.trace.html == f"r.traces/{r.experiment_id}-r0/tlparse/index.html"
        assert (tmp_path / r.trace.html).read_text() == "<html>tlparse</html>"
        assert f'<a href="{r.trace.html}">tlparse</a>' in page


def test_the_html_report_links_each_trace_and_its_tlparse_page():
    traced = make_result("seed.foo").model_copy(
        update={
            "trace": TraceInfo(
                dir="r.traces/abc-r0",
                log_files=["r.traces/abc-r0/dedicated_log_torch_trace_x.log"],
                html="r.traces/abc-r0/tlparse/index.html",
                bytes=2048,
            )
        }
    )
    page = render_html(make_report([traced, make_result("seed.foo3")]))
    assert "<h2>Compile traces</h2>" in page
    assert '<a href="r.traces/abc-r0">abc-r0/</a>' in page
    assert '<a href="r.traces/abc-r0/dedicated_log_torch_trace_x.log">' in page
    assert '<a href="r.traces/abc-r0/tlparse/index.html">tlparse</a>' in page
    assert "Compile traces" not in render_html(make_report([make_result("seed.foo3")]))


# ------------------------------------------------------------------------------- compile phases

COLD = {  # torch 2.13's calculate_time_spent() after a cold inductor compile of a training step (seconds)
    "_recursive_pre_grad_passes": 0.01,
    "_recursive_joint_graph_passes": 1.0,
    "_recursive_post_grad_passes": 0.05,
    "async_compile.wait": 5.0,
    "code_gen": 5.6,
    "inductor_compile": 6.2,
    "backend_compile": 5.5,
    "gc": 0.05,
    "entire_frame_compile": 5.7,
    "entire_backward_compile": 2.0,
    "total_wall_time": 7.7,
}


def test_the_phases_partition_the_compile_latency():
    phases = phase_seconds(COLD, 8.0)
    assert list(phases) == list(PHASES)
    assert sum(phases.values()) == pytest.approx(8.0)
    assert phases == pytest.approx(
        {
            "dynamo": 5.7 - 5.5 - 0.05,
            "aot_autograd": 5.5 + 2.0 - 6.2 - 0.01 - 1.0,
            "pre_grad_passes": 0.01,
            "joint_graph_passes": 1.0,
            "inductor": 6.2 - 5.6 - 0.05,
            "post_grad_passes": 0.05,
            "code_gen": 0.6,
            "async_compile_wait": 5.0,
            "gc": 0.05,
            "outside_compile": 0.3,
        }
    )


def test_a_phase_whose_parent_was_not_recorded_is_inside_the_nearest_one_that_was():
    hit = {"async_compile.wait": 0.003, "backend_compile": 0.07, "gc": 0.001, "entire_frame_compile": 0.18}
    phases = phase_seconds(hit, 0.2)
    assert phases["aot_autograd"] == pytest.approx(0.067) and phases["code_gen"] == 0.0
    assert phases["async_compile_wait"] == pytest.approx(0.003) and sum(phases.values()) == pytest.approx(0.2)
    alone = phase_seconds({"async_compile.wait": 0.01}, 0.05)
    assert alone["outside_compile"] == pytest.approx(0.04) and sum(alone.values()) == pytest.approx(0.05)


@pytest.mark.parametrize(("backend", "phase"), [("aot_eager", "training"), ("inductor", "inference")])
def test_no_phase_of_a_real_compile_is_negative(backend, phase):
    r = run_on_cpu("seed.my_module", backend=backend, phase=phase)
    phases = phase_seconds(r.compile_breakdown, r.compile_latency_s)
    assert min(phases.values()) >= 0, phases
    assert sum(phases.values()) == pytest.approx(r.compile_latency_s)


def compiled(seconds: float, breakdown: dict[str, float], **kw):
    return make_result("seed.foo", compile_s=seconds, **kw).model_copy(update={"compile_breakdown": breakdown})


def test_the_phases_named_account_for_80_percent_of_the_change_largest_first():
    base = compiled(1.2, {"entire_frame_compile": 1.0, "backend_compile": 0.8, "inductor_compile": 0.5})
    # +0.50 s: inductor +0.38 (76%), aot_autograd +0.08 (16%), dynamo +0.06 (12%), outside -0.02 (-4%)
    new = compiled(1.7, {"entire_frame_compile": 1.52, "backend_compile": 1.26, "inductor_compile": 0.88})
    named = explain([base], [new], 0.5)
    assert [c.phase for c in named] == ["inductor", "aot_autograd"]
    assert explanation(named) == "inductor +0.38 s (76%), aot_autograd +0.08 s (16%)"
    assert [c.phase for c in explain([base], [new], 0.5, share=0.95)] == ["inductor", "aot_autograd", "dynamo"]


def test_a_faster_compile_names_the_phases_that_got_faster():
    base = compiled(2.0, {"entire_frame_compile": 1.9, "backend_compile": 1.5, "inductor_compile": 1.2})
    new = compiled(1.0, {"entire_frame_compile": 0.95, "backend_compile": 0.55, "inductor_compile": 0.3})
    assert explanation(explain([base], [new], -1.0)) == "inductor -0.90 s (90%)"


def test_no_explanation_without_a_breakdown_on_both_sides():
    base = compiled(1.0, {})
    new = compiled(2.0, {"entire_frame_compile": 1.9, "backend_compile": 1.5})
    assert explain([base], [new], 1.0) == [] and explain([new], [new], 0.0) == []


def gated(base: list, new: list, **kw):
    from orchestrator.report.compare import Thresholds, compare

    return compare(make_report(base), make_report(new), Thresholds(gate_compile=True, **kw))


def test_compare_gate_compile_prints_the_phases_beside_the_verdict():
    from rich.console import Console

    from orchestrator.report.compare import markdown, print_comparison

    base = compiled(1.2, {"entire_frame_compile": 1.0, "backend_compile": 0.8, "inductor_compile": 0.5})
    new = compiled(1.7, {"entire_frame_compile": 1.52, "backend_compile": 1.26, "inductor_compile": 0.88})
    c = gated([base], [new])
    (change,) = [ch for ch in c.changes if ch.kind == "compile_slower"]
    assert change.regression and change.phases == "inductor +0.38 s (76%), aot_autograd +0.08 s (16%)"
    console = Console(record=True, width=200)
    print_comparison(console, c)
    text = console.export_text()
    verdict_line = next(i for i, line in enumerate(text.splitlines()) if line.startswith("REGRESSION"))
    assert text.splitlines()[verdict_line + 1] == (
        "  seed.foo [inductor]: compile +41.7% (1.20 s -> 1.70 s (warm)): "
        "inductor +0.38 s (76%), aot_autograd +0.08 s (16%)"
    )
    assert "- seed.foo [inductor]: compile +41.7%" in markdown(c)


def test_without_gate_compile_the_phases_are_in_the_change_not_beside_the_verdict():
    from orchestrator.report.compare import Thresholds, compare, compile_explanations

    base = compiled(1.2, {"entire_frame_compile": 1.0, "backend_compile": 0.8, "inductor_compile": 0.5})
    new = compiled(1.7, {"entire_frame_compile": 1.52, "backend_compile": 1.26, "inductor_compile": 0.88})
    c = compare(make_report([base]), make_report([new]), Thresholds())
    assert [ch.phases for ch in c.changes] == ["inductor +0.38 s (76%), aot_autograd +0.08 s (16%)"]
    assert compile_explanations(c) == [] and not c.fails


def test_compare_warns_when_only_one_side_was_traced():
    base = compiled(1.0, {})
    new = compiled(1.05, {}).model_copy(update={"trace": TraceInfo(dir="r.traces/x-r0")})
    (warning,) = [w for w in gated([base], [new]).warnings if "traced" in w]
    assert warning.startswith("1 experiment(s) traced (trace: true) on one side only")
    assert not [w for w in gated([new], [new]).warnings if "traced" in w]
