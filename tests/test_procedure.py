"""The worker-side procedure, in-process: every seed target's outcome, statuses, counts."""

from __future__ import annotations

import pytest
import torch

from tasks.models import Experiment
from tasks.procedure import Placement, compile_callable, run_experiment
from tasks.targets import build
from tasks.timers import CpuTimer


def run(target: str, compile: dict | None = None, params: dict | None = None, **kw):
    timing = kw.pop("timing", {"warmup": 1, "repeats": 3})
    exp = Experiment(
        target=target, params=params or {}, compile=compile or {"backend": "eager"}, timing=timing, device="cpu", **kw
    )
    return run_experiment(exp)


@pytest.mark.parametrize("target", ["seed.foo", "seed.outer"])
def test_functions_compile_into_one_graph(target):
    r = run(target, params={"shape": [64, 64]})
    assert r.status == "ok", r.error
    assert (r.graph_count, r.graph_breaks, r.break_reasons) == (1, 0, [])
    assert r.correct is True
    assert r.eager is not None and r.compiled is not None
    assert len(r.eager.samples_ms) == len(r.compiled.samples_ms) == 3
    assert r.speedup == pytest.approx(r.eager.median_ms / r.compiled.median_ms)


@pytest.mark.parametrize("method", ["torch_compile", "module_compile"])
def test_my_module_compiles_both_ways(method):
    r = run("seed.my_module", compile={"backend": "eager", "method": method})
    assert r.status == "ok", r.error
    assert r.compile.method == method
    assert r.graph_breaks == 0 and r.correct is True


def test_module_compile_compiles_the_module_in_place():
    work = build("seed.my_module", torch.device("cpu"), {})
    from tasks.models import CompileConfig

    compiled = compile_callable(work.fn, CompileConfig(backend="eager", method="module_compile"))
    assert compiled is work.fn
    assert work.fn._compiled_call_impl is not None


def test_module_compile_of_a_function_is_a_compile_error():
    r = run("seed.foo", compile={"backend": "eager", "method": "module_compile"}, params={"shape": [4]})
    assert r.status == "compile_error"
    assert r.error.type == "builtins.TypeError"
    assert "needs an nn.Module target" in r.error.message
    assert r.eager is not None  # what was measured before the failure is kept


def test_foo3_is_faster_compiled_with_inductor_on_cpu():
    r = run(
        "seed.foo3", compile={"backend": "inductor"}, params={"shape": [2048, 2048]}, timing={"warmup": 2, "repeats": 7}
    )
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.speedup > 1.0, (r.eager.median_ms, r.compiled.median_ms)
    assert r.compile_latency_s > 0 and r.compiled.first_call_ms == pytest.approx(r.compile_latency_s * 1e3)


def test_bar_breaks_the_graph_on_data_dependent_branching():
    r = run("seed.bar")
    assert r.status == "ok", r.error
    assert r.graph_breaks >= 1 and r.graph_count >= 2
    assert r.break_reasons[0].startswith("Data-dependent branching (seed.py:")
    assert r.correct is True


def test_bar_with_fullgraph_fails_with_dynamos_message():
    r = run("seed.bar", compile={"backend": "eager", "fullgraph": True})
    assert r.status == "compile_error"
    assert r.error.type == "torch._dynamo.exc.Unsupported"
    assert r.error.message.startswith("Data-dependent branching")
    assert r.compiled is None and r.speedup is None
    assert r.graph_breaks >= 1  # the breaks that fullgraph refused are still reported


def test_bar_fixed_passes_fullgraph_with_no_breaks_and_is_correct_on_both_branches():
    work = build("seed.bar_fixed", torch.device("cpu"), {})
    branches = {bool(inputs[1].sum() < 0) for inputs in [work.inputs, *work.check_inputs]}
    assert branches == {True, False}  # the timed inputs and the check inputs cover both branches
    r = run("seed.bar_fixed", compile={"backend": "eager", "fullgraph": True})
    assert r.status == "ok", r.error
    assert (r.graph_count, r.graph_breaks) == (1, 0)
    assert r.correct is True


def test_wrong_compiled_output_is_incorrect():
    r = run("tests.user_targets:make_relu", compile={"backend": "relu_accuracy_error_TESTING_ONLY"})
    assert r.status == "incorrect"
    assert r.correct is False
    assert r.error.type == "builtins.AssertionError"
    assert "mismatch" in r.error.message.lower()
    assert r.compiled is not None  # an incorrect result is still timed


def test_backend_failure_is_a_compile_error():
    r = run("tests.user_targets:make_relu", compile={"backend": "relu_compile_error_TESTING_ONLY"})
    assert r.status == "compile_error"
    assert r.error.type == "torch._dynamo.exc.BackendCompilerFailed"
    assert "ReluCompileError" in r.error.message


def test_factory_failure_is_a_runtime_error():
    r = run("tests.user_targets:make_broken")
    assert r.status == "runtime_error"
    assert (r.error.type, r.error.message) == ("builtins.ValueError", "this factory cannot build its target")
    assert r.eager is None


def test_exception_in_the_target_is_a_runtime_error():
    r = run("tests.user_targets:make_failing_call")
    assert r.status == "runtime_error"
    assert r.error.message == "boom inside the target"


def test_cuda_requested_without_cuda_is_a_runtime_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = run_experiment(Experiment(target="seed.foo", device="cuda"))
    assert r.status == "runtime_error"
    assert r.device is None
    assert r.error.message == "device 'cuda' requested but this worker sees no CUDA device"


def test_auto_runs_on_the_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    exp = Experiment(target="seed.foo", params={"shape": [4]}, compile={"backend": "eager"}, timing={"repeats": 1})
    r = run_experiment(exp, Placement(node_id="n1", gpu_ids=["3"], cpus=1))
    assert r.device == "cpu"
    assert r.worker.gpu_ids == ["3"] and r.worker.node_id == "n1"
    assert r.worker.threads == 1


def test_seed_makes_inputs_deterministic():
    def inputs(seed):
        torch.manual_seed(seed)
        return build("seed.foo", torch.device("cpu"), {"shape": [3]}).inputs

    assert all(torch.equal(a, b) for a, b in zip(inputs(1), inputs(1), strict=True))
    assert not torch.equal(inputs(1)[0], inputs(2)[0])


class FakeTimer:
    """Known samples and a log of what the procedure asked for; no clock involved."""

    def __init__(self):
        self.log = []
        self.sides = iter([[4.0, 5.0, 3.0], [2.0, 1.0, 3.0]])  # eager, then compiled

    def first_call(self, fn):
        self.log.append("first")
        return fn(), 100.0

    def samples(self, fn, warmup, repeats):
        self.log.append(("samples", warmup, repeats))
        return next(self.sides)


def test_procedure_times_each_side_with_the_configured_counts():
    timer = FakeTimer()
    exp = Experiment(
        target="seed.foo", params={"shape": [4]}, compile={"backend": "eager"}, timing={"warmup": 2, "repeats": 3}
    )
    r = run_experiment(exp, timer=timer)
    assert timer.log == ["first", ("samples", 2, 3), "first", ("samples", 2, 3)]
    assert (r.eager.median_ms, r.eager.min_ms, r.eager.samples_ms) == (4.0, 3.0, [4.0, 5.0, 3.0])
    assert (r.compiled.median_ms, r.compiled.min_ms) == (2.0, 1.0)
    assert r.speedup == 2.0
    assert r.compile_latency_s == 0.1


def test_cpu_timer_calls_warmup_plus_repeats_and_reads_its_clock():
    ticks = iter(range(0, 1000, 2))  # every clock read advances 2 s
    calls = []
    timer = CpuTimer(clock=lambda: next(ticks) * 1.0)
    samples = timer.samples(lambda: calls.append(1), warmup=3, repeats=4)
    assert len(calls) == 7
    assert samples == [2000.0] * 4
