"""The report: summary statistics derived from results, atomic writes, the table."""

from __future__ import annotations

import math
import os
import stat

import pytest
from rich.console import Console

from orchestrator.cluster import environment
from orchestrator.report import (
    build_report,
    load_report,
    results_table,
    summarize,
    write_atomic,
    write_report,
)
from tasks.models import Result, SideTiming, WorkerInfo


def result(
    target: str,
    speedup: float | None,
    status: str = "ok",
    backend: str = "inductor",
    gpu: str | None = None,
    recompiled: bool = False,
):
    noise = [0.98, 1.0, 1.02, 0.99, 1.01]
    eager = SideTiming.from_samples(1.0, [n * (speedup or 1.0) for n in noise], warmup=1)
    compiled = SideTiming.from_samples(1.0, noise, warmup=1)
    return Result(
        experiment_id=f"{target}-{backend}-{gpu}",
        target=target,
        params={},
        device="cuda" if gpu else "cpu",
        compile={"backend": backend},
        timing={},
        seed=0,
        status=status,
        eager=eager,
        compiled=compiled if speedup else None,
        speedup=speedup,
        recompiled=recompiled,
        recompile_reasons=["1 compilation(s) inside the timed window"] if recompiled else [],
        started_at=0.0,
        finished_at=1.0,
        worker=WorkerInfo(hostname="h", pid=1, threads=1, gpu_name=gpu, cpu_model="Xeon"),
    )


def test_counts_cover_every_status():
    s = summarize([result("a", 2.0), result("b", None, "compile_error")])
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
    s = summarize(
        [result("a", 4.0), result("b", 0.25), result("c", 0.5, backend="eager"), result("d", 0.5, backend="eager")]
    )
    assert s.geomean_by_config["inductor"].speedup == pytest.approx(1.0)
    assert s.geomean_by_config["eager"].speedup == pytest.approx(0.5)  # clipping at 1.0 would say 1.0
    assert s.geomean_by_config["inductor"].targets == ["a", "b"]


def test_geomean_has_a_confidence_interval_from_the_raw_samples():
    s = summarize([result("a", 4.0), result("b", 0.25)])
    low, high = s.geomean_by_config["inductor"].ci
    assert low < 1.0 < high and high - low < 0.2


def test_recompiled_results_are_listed_apart_and_kept_out_of_the_means():
    s = summarize([result("a", 2.0), result("b", 50.0, recompiled=True)])
    assert [(r.target, r.reasons) for r in s.recompiled] == [("b", ["1 compilation(s) inside the timed window"])]
    assert s.geomean_by_config["inductor"].speedup == pytest.approx(2.0)
    assert "b" not in s.best_by_target


def test_failed_and_incorrect_results_do_not_enter_the_means():
    s = summarize([result("a", 2.0), result("a", 100.0, status="incorrect", backend="eager")])
    assert list(s.geomean_by_config) == ["inductor"]
    assert s.best_by_target["a"].speedup == 2.0


def test_best_configuration_per_target():
    s = summarize([result("a", 1.5), result("a", 3.0, backend="aot_eager"), result("b", 0.9)])
    assert s.best_by_target["a"].config == "aot_eager" and s.best_by_target["a"].speedup == 3.0
    assert s.best_by_target["b"].speedup == 0.9


def test_geomean_per_device_model():
    s = summarize([result("a", 2.0, gpu="NVIDIA H100"), result("a", 8.0, gpu="NVIDIA A100"), result("b", 2.0)])
    assert s.geomean_by_device_model["NVIDIA H100"]["inductor"].speedup == pytest.approx(2.0)
    assert s.geomean_by_device_model["NVIDIA A100"]["inductor"].speedup == pytest.approx(8.0)
    assert s.geomean_by_device_model["CPU (Xeon)"]["inductor"].speedup == pytest.approx(2.0)
    assert s.geomean_by_config["inductor"].speedup == pytest.approx(math.exp((math.log(2) * 2 + math.log(8)) / 3))


def test_report_round_trips_and_is_written_atomically(tmp_path):
    report = build_report("x", {"name": "x"}, [result("a", 2.0)], environment(None))
    path = tmp_path / "out" / "r.json"
    write_report(report, path)
    assert load_report(path) == report
    assert report.schema_version == 1
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary file left behind
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


def test_table_shows_one_row_per_result():
    console = Console(width=200, record=True)
    console.print(results_table([result("seed.foo3", 2.5), result("seed.bar", None, "compile_error")]))
    text = console.export_text()
    assert "seed.foo3" in text and "2.50x" in text and "compile_error" in text
