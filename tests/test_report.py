"""The summary on crafted results; reading and writing reports of every version, and journals."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from orchestrator.report import (
    SCHEMA_VERSION,
    ReportError,
    load_report,
    read,
    summarize,
    write_atomic,
    write_report,
)
from orchestrator.report.summary import Z95
from tests.report_data import make_replicates, make_report, make_result, mixed_report

DATA = Path(__file__).parent / "data"


def test_counts_cover_every_status():
    s = summarize([make_result("a", 2.0), make_result("b", None, status="compile_error")])
    assert s.counts == {
        "ok": 1,
        "compile_error": 1,
        "runtime_error": 0,
        "incorrect": 0,
        "timeout": 0,
        "crashed": 0,
        "oom": 0,
        "unschedulable": 0,
    }


def test_geomean_keeps_slowdowns_unclipped():
    s = summarize([make_result(t, x) for t, x in (("a", 4.0), ("b", 0.25))])
    (cpu,) = s.devices
    (inductor,) = cpu.configs
    assert inductor.common is not None
    assert inductor.common.speedup == pytest.approx(1.0, rel=0.02)  # clipping at 1.0 would say 2.0
    assert inductor.common.targets == ["a", "b"]


def test_means_are_over_the_same_groups_for_every_configuration():
    results = [
        make_result("a", 2.0),
        make_result("b", 2.0),
        make_result("c", 8.0),
        make_result("a", 4.0, backend="aot_eager"),
        make_result("b", 4.0, backend="aot_eager"),
        make_result("c", None, backend="aot_eager", status="compile_error"),
    ]
    (cpu,) = summarize(results).devices
    configs = {c.config: c for c in cpu.configs}
    assert cpu.common == ["a", "b"]
    assert [(x.group, x.reason) for x in cpu.left_out] == [("c", "aot_eager: compile_error")]
    assert configs["inductor"].common.speedup == pytest.approx(2.0, rel=0.02)  # c (8x) left out
    assert configs["aot_eager"].common.speedup == pytest.approx(4.0, rel=0.02)
    assert configs["inductor"].own.speedup == pytest.approx(4.0 ** (2 / 3) * 2 ** (1 / 3), rel=0.02)
    assert configs["inductor"].own.n == 3
    assert (configs["aot_eager"].ok, configs["aot_eager"].results) == (2, 3)
    assert configs["aot_eager"].pass_rate == pytest.approx(2 / 3)
    assert configs["aot_eager"].counts == {"compile_error": 1}
    assert configs["inductor"].pass_rate == 1.0


def test_no_common_group_says_so_and_keeps_each_configurations_own_mean():
    (cpu,) = summarize([make_result("a", 2.0), make_result("b", 3.0, backend="aot_eager")]).devices
    assert cpu.common == []
    assert all(c.common is None and c.own is not None for c in cpu.configs)
    assert {x.reason for x in cpu.left_out} == {
        "not run under 1 of 2 configurations (aot_eager)",
        "not run under 1 of 2 configurations (inductor)",
    }


def test_compile_latency_and_memory_ratio_means_sit_next_to_the_speedup():
    results = [
        make_result("a", 2.0, compile_s=1.0, memory_ratio=1.5, gpu="A100"),
        make_result("b", 2.0, compile_s=4.0, memory_ratio=0.6, gpu="A100"),
    ]
    (a100,) = summarize(results).devices
    mean = a100.configs[0].common
    assert mean.compile_latency_s == pytest.approx(2.0)
    assert mean.memory_ratio == pytest.approx(math.sqrt(1.5 * 0.6))
    (cpu,) = summarize([make_result("a", 2.0, compile_s=None)]).devices
    assert cpu.configs[0].common.compile_latency_s is None and cpu.configs[0].common.memory_ratio is None


def test_geomean_interval_is_seeded_and_covers_the_point():
    results = [make_result(t, x, noise=0.05) for t, x in (("a", 4.0), ("b", 0.25), ("c", 1.5))]
    first, second = summarize(results), summarize(results)
    mean = first.devices[0].configs[0].common
    assert mean.ci == second.devices[0].configs[0].common.ci
    assert mean.ci[0] < mean.speedup < mean.ci[1]
    quiet = summarize([make_result(t, x, noise=0.001) for t, x in (("a", 4.0), ("b", 0.25), ("c", 1.5))])
    quiet_ci = quiet.devices[0].configs[0].common.ci
    assert quiet_ci[1] - quiet_ci[0] < mean.ci[1] - mean.ci[0]


def test_best_per_group_separates_shapes_and_says_when_it_is_a_tie():
    small, large = {"shape": [64]}, {"shape": [4096]}
    s = summarize(
        [
            make_result("foo3", 1.0, params=small),
            make_result("foo3", 1.5, params=small, backend="aot_eager"),
            make_result("foo3", 3.0, params=large),
            make_result("foo3", 3.02, params=large, backend="aot_eager", noise=0.05),
        ]
    )
    groups = {g.label: g for g in s.groups}
    assert set(groups) == {"foo3 shape=[64]", "foo3 shape=[4096]"}
    clear, tie = groups["foo3 shape=[64]"], groups["foo3 shape=[4096]"]
    assert (clear.best.config, clear.runner_up.config, clear.tie) == ("aot_eager", "inductor", False)
    assert tie.tie and {tie.best.config, tie.runner_up.config} == {"aot_eager", "inductor"}


def test_two_device_models_are_grouped_and_averaged_apart():
    s = summarize(
        [
            make_result("a", 2.0, gpu="H100"),
            make_result("a", 8.0, gpu="A100"),
            make_result("b", 2.0),
        ]
    )
    assert [(g.label, g.device_model, round(g.best.speedup)) for g in s.groups] == [
        ("a", "H100", 2),
        ("a", "A100", 8),
        ("b", "CPU (Xeon)", 2),
    ]
    means = {d.device_model: d.configs[0].common.speedup for d in s.devices}
    assert means == pytest.approx({"A100": 8.0, "H100": 2.0, "CPU (Xeon)": 2.0}, rel=0.02)


def test_device_model_prefers_the_nodes_accelerator_type_then_the_cuda_name():
    r = make_result("a", 2.0, gpu="H100")
    assert summarize([r]).groups[0].device_model == "H100"
    r.worker.gpu_model = None
    assert summarize([r]).groups[0].device_model == "NVIDIA H100"


def test_a_result_without_a_worker_belongs_to_the_only_device_model():
    lost = make_result("b", None, status="unschedulable", gpu=None)
    lost.worker = None
    lost.device = None
    s = summarize([make_result("a", 2.0, gpu="A100"), lost])
    assert {g.device_model for g in s.groups} == {"A100"}
    (a100,) = s.devices
    assert a100.configs[0].pass_rate == 0.5


def test_recompiled_results_are_listed_apart_and_kept_out_of_bests_and_means():
    s = summarize([make_result("a", 2.0), make_result("b", 50.0, recompiled=True)])
    assert [(r.target, r.reasons) for r in s.recompiled] == [("b", ["1 compilation(s) inside the timed window"])]
    (cpu,) = s.devices
    assert cpu.configs[0].common.speedup == pytest.approx(2.0, rel=0.02)
    assert cpu.configs[0].pass_rate == 1.0  # it ran and was correct; only its timing is not trusted
    assert [x.reason for x in cpu.left_out] == ["inductor: recompiled"]
    assert {g.label: g.best for g in s.groups}["b"] is None


def test_failed_and_incorrect_results_do_not_enter_bests_or_means():
    s = summarize([make_result("a", 2.0), make_result("a", 100.0, status="incorrect", backend="eager")])
    (group,) = s.groups
    assert group.best.config == "inductor" and group.runner_up is None
    assert group.failed == {"eager": "incorrect"}


def test_mixed_report_summary():
    s = mixed_report().summary
    assert s.counts["ok"] == 15 and s.counts["compile_error"] == 4 and s.counts["oom"] == 1
    a100, h100 = s.devices
    assert (a100.device_model, h100.device_model) == ("A100", "H100")
    assert a100.common == ["seed.foo3 shape=[256, 256]", "seed.foo3 shape=[4096, 4096]"]
    assert {x.group for x in a100.left_out} == {"seed.bar", "seed.outer"}
    cold = {c.config: c for c in h100.configs}["inductor+cold"]
    assert cold.common.speedup == pytest.approx(2.4 * 1.6, rel=0.03)
    assert (cold.ok, cold.results) == (2, 3)


def test_summarising_ten_thousand_results_finishes(benchmark_results=10_000):
    """The summary is linear in the results (timed by benchmarks/summary_scale.py, not here)."""
    base = [make_result(f"t{i}", 1.0 + i / 10, backend=b) for i in range(20) for b in ("inductor", "aot_eager")]
    many = [base[i % len(base)].model_copy(update={"params": {"i": i // 2}}) for i in range(benchmark_results)]
    s = summarize(many)
    assert len(s.groups) == benchmark_results // 2
    assert sum(c.results for c in s.devices[0].configs) == benchmark_results


def test_report_round_trips_and_is_written_atomically(tmp_path):
    report = make_report([make_result("a", 2.0)])
    path = tmp_path / "out" / "r.json"
    write_report(report, path)
    assert load_report(path) == report
    assert report.schema_version == SCHEMA_VERSION == 3
    # no temporary file left behind; the history file beside the report (history reads it, not the report)
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.history.json", "r.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")

    class Boom:
        def __str__(self):
            raise RuntimeError("disk full")

    with pytest.raises(TypeError):
        write_atomic(path, Boom())  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_big_atomic_write_is_flushed_to_the_disk_by_a_thread_as_it_goes_and_its_error_is_raised(
    tmp_path, monkeypatch
):
    """Pieces past ``SYNC_EVERY`` bytes are flushed to the disk by a thread while the next are written (the final
    fsync then finds little left); the file is whole. An error of that flush fails the write, leaving the old
    file; so does a piece that fails, after the thread is done with the file."""
    import threading

    import tasks.files as files

    monkeypatch.setattr(files, "SYNC_EVERY", 1000)
    synced: list[str] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(threading.current_thread().name) or real(fd))
    path = tmp_path / "records.json"
    pieces = [bytes([65 + i % 26]) * 700 for i in range(40)]
    files.write_atomic(path, iter(pieces))
    assert path.read_bytes() == b"".join(pieces)
    assert synced and set(synced) == {"compilebench-fdatasync"}

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError, match="Input/output error"):
        files.write_atomic(path, iter([b"x" * 700] * 4))
    assert path.read_bytes() == b"".join(pieces) and [p.name for p in tmp_path.iterdir()] == ["records.json"]

    def broken():
        yield b"y" * 1500  # past SYNC_EVERY: a flush starts
        raise RuntimeError("the records stopped")

    monkeypatch.setattr(os, "fdatasync", real)
    with pytest.raises(RuntimeError, match="the records stopped"):
        files.write_atomic(path, broken())
    assert path.read_bytes() == b"".join(pieces) and [p.name for p in tmp_path.iterdir()] == ["records.json"]

    monkeypatch.delattr(os, "fdatasync")  # as on macOS: the thread syncs with fsync
    real_fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: synced.append("fsync " + threading.current_thread().name) or real_fsync(fd)
    )
    files.write_atomic(path, iter(pieces))
    assert path.read_bytes() == b"".join(pieces) and "fsync compilebench-fdatasync" in synced


def test_past_a_size_a_written_files_pages_on_the_disk_are_given_back_and_it_is_whole(tmp_path, monkeypatch):
    """A file past ``WRITE_THROUGH_PAST`` bytes is not kept in the page cache once its pages are on the disk (the
    flushing thread advises them out after each sync), and reads back whole; a smaller file is left cached."""
    import tasks.files as files

    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise here (macOS)")
    monkeypatch.setattr(files, "SYNC_EVERY", 1000)
    monkeypatch.setattr(files, "WRITE_THROUGH_PAST", 5000)
    advised: list[tuple[int, int, int]] = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, *a: advised.append(a) or real(fd, *a))
    pieces = [bytes([65 + i % 26]) * 700 for i in range(40)]  # 28,000 bytes: syncs past 5,000 advise
    files.write_atomic(tmp_path / "big.json", iter(pieces))
    assert (tmp_path / "big.json").read_bytes() == b"".join(pieces)
    assert advised and set(advised) == {(0, 0, os.POSIX_FADV_DONTNEED)}
    advised.clear()
    files.write_atomic(tmp_path / "small.json", iter(pieces[:6]))  # 4,200 bytes: synced, kept
    assert (tmp_path / "small.json").read_bytes() == b"".join(pieces[:6]) and not advised

    def refused(fd: int, *args: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refused)  # advice a filesystem refuses: the write is as good
    files.write_atomic(tmp_path / "big.json", iter(reversed(pieces)))
    assert (tmp_path / "big.json").read_bytes() == b"".join(reversed(pieces))


def test_a_version_1_report_is_upgraded_with_its_summary_rebuilt():
    """``data/seed-v1.json``: three results of a seed run written by schema version 1."""
    report = load_report(DATA / "seed-v1.json")
    assert report.schema_version == SCHEMA_VERSION and report.complete
    assert report.summary.counts["ok"] == 2 and report.summary.counts["compile_error"] == 1
    assert [g.label for g in report.summary.groups] == ["seed.foo3 shape=[4096, 4096]", "seed.bar"]
    assert report.summary.devices[0].device_model == "CPU (AMD EPYC)"


def test_unreadable_reports_raise_one_line(tmp_path):
    cases = {
        "missing.json": None,
        "bad.json": "{not json",
        "list.json": "[1, 2]",
        "future.json": json.dumps({"schema_version": 99, "results": []}),
        "wrong.json": json.dumps({"schema_version": 2, "results": [{"target": 1}]}),
    }
    messages = {}
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(ReportError) as e:
            read(tmp_path / name)
        messages[name] = str(e.value)
        assert "\n" not in messages[name]
    assert messages["missing.json"].startswith("cannot read ") and "No such file" in messages["missing.json"]
    assert "malformed JSON at line 1, column 2" in messages["bad.json"]
    assert "not a compilebench report" in messages["list.json"]
    assert "unknown report schema_version 99 (written by a newer compilebench)" in messages["future.json"]
    assert "results.0" in messages["wrong.json"]


def test_a_journal_of_a_run_that_died_becomes_an_incomplete_report(tmp_path):
    first = make_result("a", 2.0)
    again = make_result("a", 2.5)  # the same experiment twice: the journal keeps the first
    other = make_result("b", None, status="crashed")
    journal = tmp_path / "seed.journal.jsonl"
    lines = [first.model_dump_json(), other.model_dump_json(), again.model_dump_json()]
    journal.write_text("\n".join(lines) + '\n{"experiment_id": "half-writ')  # killed mid-line
    report = read(journal)
    assert report.complete is False
    assert report.name == "seed"
    assert [r.target for r in report.results] == ["a", "b"]
    assert report.results[0].speedup == pytest.approx(first.speedup)
    assert report.summary.counts["crashed"] == 1
    assert report.environment.torch == "2.13.0"
    warnings = report.environment.warnings
    assert warnings[0] == "rebuilt from the journal seed.journal.jsonl: the run may not have finished"
    assert any("skipped line 4" in w for w in warnings) and any("repeated result" in w for w in warnings)


def test_a_file_that_is_no_journal_is_an_error(tmp_path):
    journal = tmp_path / "x.journal.jsonl"
    journal.write_text("hello\nworld\n")
    with pytest.raises(ReportError, match="no results in this journal"):
        read(journal)


def test_compile_latency_means_never_mix_cold_and_warm_nor_hits_and_misses():
    from orchestrator.report.summary import compile_latencies

    warm_hits = [make_result(compile_s=0.05, cache_outcome="hit", seed=i) for i in range(3)]
    stray_miss = make_result(compile_s=9.0, cache_outcome="miss", seed=9)
    latencies, label = compile_latencies([*warm_hits, stray_miss])
    assert latencies == [0.05] * 3 and label == "warm: hit (1 other left out)"
    cold = [make_result(compile_s=8.0, cache="cold", cache_outcome="miss", seed=i) for i in range(2)]
    assert compile_latencies(cold) == ([8.0, 8.0], "cold: miss")
    report = make_report([*warm_hits, *cold])
    configs = {c.config: c for c in report.summary.devices[0].configs}
    warm = configs["inductor"].own
    assert warm.compile_cache == "warm: hit" and warm.compile_latency_s == pytest.approx(0.05)
    assert configs["inductor+cold"].own.compile_cache == "cold: miss"


# ------------------------------------------------------------------------------------ replicates


def _t_interval(speedups: list[float]) -> tuple[float, float]:
    """Student's t 95% interval on the mean log speedup, computed here the long way."""
    from scipy.stats import t

    logs = np.log(speedups)
    half = t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    return math.exp(logs.mean() - half), math.exp(logs.mean() + half)


def test_replicates_give_a_between_run_interval_beside_the_within_run_one():
    runs = make_replicates([1.10, 1.12, 1.14], noise=0.002)
    (group,) = summarize(runs).groups
    best = group.best
    speedups = [r.speedup for r in runs]
    assert best.replicates == 3 and group.results == 3
    assert best.speedup == pytest.approx(sorted(speedups)[1])  # the median replicate, ~1.12
    assert best.ci == best.ci_between == pytest.approx(_t_interval(speedups))
    assert best.ci[0] == pytest.approx(1.074, abs=0.005) and best.ci[1] == pytest.approx(1.169, abs=0.005)
    low, high = best.ci_within  # each run's own samples say +-0.1%: far narrower than the runs disagree
    assert best.ci[0] < low < best.speedup < high < best.ci[1]
    assert (high / low) < 1.01 < 1.05 < best.ci[1] / best.ci[0]


def test_two_replicates_give_an_honest_wide_interval():
    (two,) = summarize(make_replicates([1.10, 1.14], noise=0.002)).groups
    (three,) = summarize(make_replicates([1.10, 1.12, 1.14], noise=0.002)).groups
    low, high = two.best.ci_between  # t(0.975, 1) = 12.71: two runs 4% apart bound the speedup to 0.90-1.39
    assert low < 0.95 and high > 1.35
    width_three = three.best.ci[1] / three.best.ci[0] - 1
    assert high / low - 1 > 4 * width_three  # a third run (same spread) narrows it more than four times


def test_best_and_tie_are_decided_by_the_between_run_interval():
    fast = make_replicates([1.20, 1.32, 1.26], noise=0.002, target="t")
    slow = make_replicates([1.16, 1.24, 1.20], noise=0.002, target="t", backend="aot_eager")
    (group,) = summarize([*fast, *slow]).groups
    best, second = group.best, group.runner_up
    assert (best.config, second.config) == ("inductor", "aot_eager")
    assert best.ci_within[0] > second.ci_within[1]  # within one run each, the lead looks beyond noise
    assert best.ci_between[0] <= second.ci_between[1] and group.tie  # the runs disagree by more than the lead
    far = make_replicates([1.20, 1.22, 1.21], noise=0.002, target="t", backend="aot_eager")
    (clear,) = summarize([*make_replicates([2.0, 2.04, 1.98], noise=0.002, target="t"), *far]).groups
    assert clear.best.config == "inductor" and not clear.tie


def test_geometric_means_combine_the_between_run_intervals():
    a = make_replicates([1.10, 1.16, 1.12], noise=0.002, target="a")
    b = make_replicates([2.0, 2.2, 2.1], noise=0.002, target="b")
    s = summarize([*a, *b])
    ranked = {g.label: g.best for g in s.groups}
    mean = s.devices[0].configs[0].common
    assert (mean.n, mean.between) == (2, 2)
    assert mean.speedup == pytest.approx(math.sqrt(ranked["a"].speedup * ranked["b"].speedup))
    centres = [math.log(r.ci[0] * r.ci[1]) / 2 for r in ranked.values()]
    ses = [math.log(r.ci[1] / r.ci[0]) / (2 * Z95) for r in ranked.values()]
    se = math.sqrt(sum(x * x for x in ses)) / 2
    expected = math.exp(sum(centres) / 2 - Z95 * se), math.exp(sum(centres) / 2 + Z95 * se)
    assert mean.ci == pytest.approx(expected)
    assert mean.ci_within[1] / mean.ci_within[0] < 1.01 < mean.ci[1] / mean.ci[0]


def test_seeds_with_replicates_combine_each_seeds_between_run_figure():
    seed0 = make_replicates([1.10, 1.20, 1.15], noise=0.002, seed=0)
    seed1 = make_replicates([1.40, 1.50, 1.45], noise=0.002, seed=1)
    (group,) = summarize([*seed0, *seed1]).groups
    medians = [sorted(r.speedup for r in runs)[1] for runs in (seed0, seed1)]
    assert group.best.speedup == pytest.approx(math.sqrt(medians[0] * medians[1]))
    assert group.best.replicates == 3 and group.best.ci == group.best.ci_between and group.results == 6


def test_the_spread_across_gpus_is_the_fastest_gpus_speedup_over_the_slowests():
    runs = make_replicates([1.00, 1.10, 1.02], noise=0.002, gpu="H100", gpu_ids=["0", "1", "0"])
    s = summarize(runs)
    best = s.groups[0].best
    gpu0 = (runs[0].speedup + runs[2].speedup) / 2  # the median of the two replicates on GPU 0
    assert best.gpus == 2 and best.spread == pytest.approx(runs[1].speedup / gpu0)
    assert s.devices[0].configs[0].common.spread == pytest.approx(best.spread)
    one_gpu = summarize(make_replicates([1.00, 1.10], noise=0.002, gpu="H100", gpu_ids=["0", "0"])).groups[0].best
    assert (one_gpu.gpus, one_gpu.spread) == (1, None)
    on_cpu = summarize(make_replicates([1.00, 1.10], noise=0.002)).groups[0].best
    assert (on_cpu.gpus, on_cpu.spread) == (0, None)


def test_a_replicate_without_a_valid_timing_leaves_the_others_to_the_figure():
    runs = make_replicates([1.10, 1.12, 1.14], noise=0.002)
    runs[2] = runs[2].model_copy(update={"status": "timeout", "speedup": None, "speedup_ci": None})
    (group,) = summarize(runs).groups
    assert group.results == 3 and group.best.replicates == 2
    assert group.best.ci == pytest.approx(_t_interval([runs[0].speedup, runs[1].speedup]))


def test_pass_rate_counts_checked_passes_and_unchecked_results_apart():
    never_checked = make_result("b", 2.0)
    never_checked.correct = None
    results = [make_result("a", 2.0), never_checked, make_result("c", None, status="compile_error")]
    (config,) = summarize(results).devices[0].configs
    assert (config.results, config.ok, config.passed, config.unchecked) == (3, 2, 1, 1)
    assert config.pass_rate == pytest.approx(1 / 3)  # counting ok would say 2/3


def test_every_replicate_counts_in_a_configurations_results():
    runs = make_replicates([1.10, 1.12, 1.14], noise=0.002)
    runs[1] = runs[1].model_copy(update={"status": "crashed", "speedup": None, "correct": None})
    (config,) = summarize(runs).devices[0].configs
    assert (config.results, config.ok, config.passed, config.unchecked) == (3, 2, 2, 0)
    assert config.counts == {"crashed": 1}


def test_a_report_written_before_replicates_summarises_as_it_did():
    """``data/summary-before-replicates.json``: a report and its summary written before replicates and
    before unchecked results were counted apart (per-call samples emptied: the summary never reads
    them). Only one figure may differ: the pass rate of the configuration with an unchecked result."""
    report = load_report(DATA / "summary-before-replicates.json")
    new = summarize(report.results)
    added = {"replicates", "ci_within", "ci_between", "spread", "gpus", "between", "passed", "unchecked", "ranked"}
    added |= {"decision"}
    assert all(g.decision is None for g in report.summary.groups)  # the summary loads as it was stored
    assert all(g.decision is not None for g in new.groups)  # its results are decided anew
    assert _without(new.model_dump(mode="json"), added | {"pass_rate"}) == _without(
        report.summary.model_dump(mode="json"), added | {"pass_rate"}
    )
    rates = {(d.device_model, c.config): c.pass_rate for d in new.devices for c in d.configs}
    before = {(d.device_model, c.config): c.pass_rate for d in report.summary.devices for c in d.configs}
    changed = {key: (before[key], rates[key]) for key in rates if rates[key] != before[key]}
    assert changed == {("A100", "inductor"): (1.0, 0.9)}  # seed.foo5: ok, never checked
    assert all(g.ranked[:2] == [x for x in (g.best, g.runner_up) if x] for g in new.groups)
    ranked = [x for g in new.groups for x in g.ranked]
    assert all(x.ci == x.ci_within and x.ci_between is None and x.replicates == 1 for x in ranked)
    means = [m for d in new.devices for c in d.configs for m in (c.common, c.own) if m]
    assert all(m.ci == m.ci_within and m.between == 0 and m.spread is None for m in means)


def _without(data: object, keys: set[str]) -> object:
    if isinstance(data, dict):
        return {k: _without(v, keys) for k, v in data.items() if k not in keys}
    if isinstance(data, list):
        return [_without(v, keys) for v in data]
    return data


def test_the_runner_up_is_no_cache_twin_of_the_best():
    warm = make_result(speedup=4.2, seed=0)
    cold = make_result(speedup=3.6, cache="cold", cache_outcome="miss", seed=0)
    tuned = make_result(speedup=3.0, mode="max-autotune-no-cudagraphs", seed=0)
    group = summarize([warm, cold, tuned]).groups[0]
    assert [r.config for r in group.ranked] == ["inductor", "inductor+cold", "inductor:max-autotune-no-cudagraphs"]
    assert group.best.config == "inductor" and group.runner_up.config == "inductor:max-autotune-no-cudagraphs"
    alone = summarize([warm, cold]).groups[0]
    assert alone.runner_up is None and not alone.tie  # the same compiled code in another process is no rival
