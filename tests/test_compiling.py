"""Compiling: what is timed is what the user configured, the check compiles apart with fallback_random,
the cache use of the measured compile is read from torch's counters, and graph breaks are those of the
callable that is compiled."""

from __future__ import annotations

import os
import time

import torch

import tasks.compiling
from tasks.compiling import cache_use
from tasks.models import CompileCache, CompileConfig, Experiment
from tasks.procedure import run_experiment
from tests.compile_targets import FALLBACK_RANDOM_SEEN


def run(target: str, **kw):
    kw.setdefault("timing", {"warmup": 1, "repeats": 3})
    kw.setdefault("compile", {"backend": "inductor"})
    return run_experiment(Experiment(target=target, device="cpu", **kw))


def spy_on_compiles(monkeypatch):
    """Record inductor's fallback_random at every call of every compiled callable the procedure makes."""
    real = tasks.compiling.compile_callable

    def spied(fn, cfg):
        compiled = real(fn, cfg)

        def call(*args):
            FALLBACK_RANDOM_SEEN.append(bool(torch._inductor.config.fallback_random))
            return compiled(*args)

        return call

    FALLBACK_RANDOM_SEEN.clear()
    monkeypatch.setattr(tasks.compiling, "compile_callable", spied)


def test_timed_code_is_compiled_without_fallback_random_and_the_check_compiles_apart_with_it(monkeypatch):
    spy_on_compiles(monkeypatch)
    r = run("tests.compile_targets:make_gelu_sin")
    assert r.status == "ok", r.error
    timed_calls = r.compiled.n * r.compiled.block_size + r.compiled.warmup
    # prime, measured compile and every timed call: as configured; then the check's own compile
    assert FALLBACK_RANDOM_SEEN.count(False) >= 2 + timed_calls
    assert FALLBACK_RANDOM_SEEN[-1] is True and FALLBACK_RANDOM_SEEN.count(True) >= 2
    assert FALLBACK_RANDOM_SEEN.index(True) > FALLBACK_RANDOM_SEEN.index(False) + timed_calls
    assert "fallback_random" not in r.inductor_options
    assert r.check.fallback_random is True and r.check.compile_latency_s > 0
    assert r.correct is True


def test_fallback_random_set_by_the_user_is_timed_and_checked_on_one_compile(monkeypatch):
    spy_on_compiles(monkeypatch)
    r = run(
        "tests.compile_targets:make_gelu_sin", compile={"backend": "inductor", "options": {"fallback_random": True}}
    )
    assert r.status == "ok", r.error
    assert True not in FALLBACK_RANDOM_SEEN  # no compile of its own under the patch: the options already say it
    assert r.inductor_options["fallback_random"] is True
    assert r.check.fallback_random is False and r.check.compile_latency_s is None


def test_warm_is_primed_the_measured_compile_hits_from_an_empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # nothing compiled here before
    r = run("tests.compile_targets:make_gelu_sin", params={"size": 24})
    assert r.status == "ok", r.error
    cache = r.compile_cache
    assert cache.state == "warm" and cache.primed
    assert (cache.fxgraph_hit, cache.fxgraph_miss, cache.autograd_hit, cache.autograd_miss) == (1, 0, 1, 0)
    assert cache.outcome == "hit" and cache.label == "warm: hit"


def test_cold_compiles_from_empty_directories_and_misses():
    r = run(
        "tests.compile_targets:make_gelu_sin", params={"size": 40}, compile={"backend": "inductor", "cache": "cold"}
    )
    assert r.status == "ok", r.error
    cache = r.compile_cache
    assert cache.state == "cold" and not cache.primed
    assert cache.fxgraph_miss == 1 and cache.fxgraph_hit == 0 and cache.autograd_hit == 0
    assert cache.label == "cold: miss"


def test_a_fresh_process_probes_the_cpu_before_the_measured_compile_and_records_it_apart(monkeypatch):
    import torch._inductor.cpu_vec_isa as vec_isa

    probed = []
    real = vec_isa.pick_vec_isa

    def slow_probe():  # inductor asks again on every CPU kernel: only the first call probes
        if not probed:
            time.sleep(0.3)
        probed.append(time.perf_counter())
        return real()

    monkeypatch.setattr(vec_isa, "pick_vec_isa", slow_probe)
    cold = run("tests.compile_targets:make_gelu_sin", params={"size": 44}, compile={"cache": "cold"})
    assert cold.status == "ok", cold.error
    assert cold.compile_cache.isa_probe_s >= 0.3  # the first ask came from the probe, before the compile
    warm = run("tests.compile_targets:make_gelu_sin", params={"size": 44})  # the priming compile paid it
    eager = run("tests.compile_targets:make_gelu_sin", compile={"backend": "eager", "cache": "cold"})
    assert warm.compile_cache.isa_probe_s is None and eager.compile_cache.isa_probe_s is None


def test_the_probe_builds_its_programs_where_inductor_does_by_default_not_in_the_cold_directory(monkeypatch, tmp_path):
    """The probe's test programs are the machine's: a cold compile's directory holds only what it compiled,
    and the next fresh process on the machine finds them built."""
    import torch._inductor.cpu_vec_isa as vec_isa
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from tasks.compiling import probe_cpu_isa

    monkeypatch.setenv("COMPILEBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cold"))
    seen = []
    monkeypatch.setattr(vec_isa, "pick_vec_isa", lambda: seen.append(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    assert probe_cpu_isa(torch.device("cpu"), CompileConfig(cache="cold")) is not None
    assert seen == [default_cache_dir()]  # the same for every node's state directory on the machine
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cold")  # back for the measured compile
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert probe_cpu_isa(torch.device("cpu"), CompileConfig(cache="shared")) is not None
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and len(seen) == 2
    assert probe_cpu_isa(torch.device("cpu"), CompileConfig(backend="eager", cache="cold")) is None


def test_a_backend_without_inductor_records_no_cache_use():
    r = run("tests.compile_targets:make_gelu_sin", compile={"backend": "eager"})
    assert r.status == "ok", r.error
    assert r.compile_cache.outcome == "none" and r.check.fallback_random is False


def test_cache_use_reads_each_layer_and_keeps_other_cache_counters():
    seen = {
        "inductor.fxgraph_cache_hit": 2,
        "inductor.fxgraph_cache_miss": 1,
        "aot_autograd.autograd_cache_hit": 2,
        "inductor.async_compile_cache_hit": 3,
    }
    cache = cache_use("warm", True, seen)
    assert (cache.fxgraph_hit, cache.fxgraph_miss, cache.autograd_hit) == (2, 1, 2)
    assert cache.other == {"inductor.async_compile_cache_hit": 3}
    assert cache.outcome == "mixed"
    assert CompileCache(state="warm", fxgraph_bypass=1).outcome == "bypass"


def test_scope_step_counts_graph_breaks_in_the_loss_not_only_the_forward():
    model = run("tests.compile_targets:make_breaking_loss", phase="training", compile={"backend": "eager"})
    step = run(
        "tests.compile_targets:make_breaking_loss", phase="training", compile={"backend": "eager", "scope": "step"}
    )
    assert model.status == step.status == "ok", (model.error, step.error)
    assert model.graph_breaks == 0  # the compiled forward alone
    assert step.graph_breaks >= 1 and step.graph_count >= 2
    assert any("compile_targets.py" in reason for reason in step.break_reasons), step.break_reasons
