"""The command line, end to end: the seed sweep as a user runs it, and the smaller commands."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tasks.models import Result

from .conftest import RAY_GPUS

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_seed_sweep_through_the_cli_matches_the_tutorial(tmp_path):
    """The main job, as the README runs it: a fresh local Ray, inductor, this machine's CPU."""
    out = tmp_path / "seed.json"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", str(ROOT / "examples" / "seed.yaml"), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["schema_version"] == 3 and (tmp_path / "seed.history.json").is_file()
    assert set(report) >= {"spec", "environment", "results", "summary"}
    assert report["environment"]["nodes"] and report["environment"]["torch"]
    results = {
        (r["target"], r["compile"]["method"], r["compile"]["mode"], r["compile"]["fullgraph"], r["compile"]["cache"]): r
        for r in report["results"]
        if r["replicate"] == 0
    }
    assert len(report["results"]) == 12 and len(results) == 10  # seed.foo3 runs 3 replicates
    replicated = [r for r in report["results"] if r["target"] == "seed.foo3" and r["compile"]["mode"] is None]
    assert [r["replicate"] for r in replicated] == [0, 1, 2]
    assert len({r["worker"]["pid"] for r in replicated}) == 3  # each in a process of its own

    for key, r in results.items():
        if key[:4] != ("seed.bar", "torch_compile", None, True):
            assert r["status"] == "ok", (key, r["error"])
            assert r["correct"] is True and r["device"] == "cpu"
            assert r["compiled"]["median_ms"] > 0 and r["speedup"] > 0
    for mode in (None, "max-autotune-no-cudagraphs"):
        assert results[("seed.foo3", "torch_compile", mode, False, "warm")]["speedup"] > 1.0
    # the first call's cost: warm compiles load from primed caches, cold ones compile from nothing
    warm, cold = (results[("seed.foo", "torch_compile", None, False, c)] for c in ("warm", "cold"))
    assert warm["compile_cache"]["primed"] and warm["compile_cache"]["fxgraph_hit"] >= 1
    assert warm["compile_cache"]["fxgraph_miss"] == 0
    assert cold["compile_cache"]["fxgraph_miss"] >= 1 and cold["compile_cache"]["fxgraph_hit"] == 0
    assert cold["compile_latency_s"] > warm["compile_latency_s"]
    bar = results[("seed.bar", "torch_compile", None, False, "warm")]
    assert bar["graph_breaks"] >= 1 and bar["break_reasons"][0].startswith("Data-dependent branching")
    bar_fullgraph = results[("seed.bar", "torch_compile", None, True, "warm")]
    assert bar_fullgraph["status"] == "compile_error"
    assert bar_fullgraph["error"]["message"].startswith("Data-dependent branching")
    fixed = results[("seed.bar_fixed", "torch_compile", None, True, "warm")]
    assert (fixed["graph_breaks"], fixed["graph_count"], fixed["correct"]) == (0, 1, True)
    assert {r["compile"]["method"] for r in report["results"] if r["target"] == "seed.my_module"} == {
        "torch_compile",
        "module_compile",
    }
    counts = report["summary"]["counts"]
    assert (counts["ok"], counts["compile_error"]) == (11, 1)
    assert sum(counts.values()) == 12

    journal = (tmp_path / "seed.journal.jsonl").read_text().splitlines()
    assert sorted(Result.model_validate_json(line).experiment_id for line in journal) == sorted(
        r["experiment_id"] for r in report["results"]
    )
    for column in ("target", "config", "replicate", "eager ms", "compiled ms", "speedup", "cache", "breaks", "status"):
        assert all(word in proc.stdout for word in column.split())  # a narrow column's header wraps
    assert "warm: hit" in proc.stdout and "cold: miss" in proc.stdout
    assert "11 ok, 1 compile_error" in proc.stdout
    # seed.foo3's replicated inductor row: 3 runs. Its group's best configuration (where "3 runs" would also
    # show) is a tie within noise with max-autotune's one run, and either may lead.
    assert "between runs: configurations with replicates" in proc.stdout
    assert re.search(r"seed\.foo3 shape=\[4096, 4096\] +│ +inductor +│ +3 │", proc.stdout), proc.stdout
    assert "what to ship" in proc.stdout


def test_run_on_a_cluster_with_logical_gpus(ray_cluster, write_spec, tmp_path):
    spec = write_spec(
        """
        name: small
        defaults: {compile: {backend: eager}, timing: {warmup: 1, repeats: 2}}
        experiments:
          - target: seed.foo
            params: {shape: [8]}
            sweep: {seed: [1, 2]}
          - target: tests.user_targets:make_scaled
        """
    )
    result = runner.invoke(app, ["run", str(spec), "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["status"] for r in report["results"]] == ["ok"] * 3
    assert all(len(r["worker"]["gpu_ids"]) == 1 for r in report["results"])
    assert report["environment"]["nodes"][0]["gpus"] == RAY_GPUS
    assert "3 ok" in result.output


def test_validate_counts_experiments():
    result = runner.invoke(app, ["validate", str(ROOT / "examples" / "seed.yaml")])
    assert result.exit_code == 0
    assert "valid, 10 experiments" in result.output
    result = runner.invoke(app, ["validate", str(ROOT / "examples" / "measurements.yaml")])
    assert result.exit_code == 0
    assert "valid, 5 experiments" in result.output


def test_tasks_lists_every_seed_target_with_params():
    result = runner.invoke(app, ["tasks"])
    assert result.exit_code == 0
    for name in ("seed.foo", "seed.outer", "seed.my_module", "seed.foo3", "seed.bar", "seed.bar_fixed"):
        assert name in result.output
    assert "shape=(4096, 4096)" in result.output


def test_usage_errors_exit_2(tmp_path):
    assert runner.invoke(app, ["run", str(ROOT / "examples" / "seed.yaml")]).exit_code == 2  # no --out
    result = runner.invoke(
        app, ["run", str(ROOT / "examples" / "seed.yaml"), "--out", "r.json", "--address", "auto", "--num-gpus", "2"]
    )
    assert result.exit_code == 2
    assert "--num-gpus" in result.output


def test_unreachable_cluster_exits_1_quickly_with_one_line(tmp_path):
    args = [sys.executable, "-m", "orchestrator", "run", str(ROOT / "examples" / "seed.yaml"), "--out", "r.json"]
    proc = subprocess.run(
        [*args, "--address", "127.0.0.1:1"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: could not connect to Ray cluster at '127.0.0.1:1': [Errno 111] Connection refused"
    ]
    assert not (tmp_path / "r.json").exists()


# --- Bad input: exit 2 with one line, before anything starts. ---


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_validate_a_spec_that_is_not_utf8(tmp_path):
    spec = tmp_path / "junk.yaml"
    spec.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    line = one_error_line(runner.invoke(app, ["validate", str(spec)]))
    assert line == "error: junk.yaml: not UTF-8 text (byte 0x89 at line 1); a spec is a YAML or JSON text file"


def test_validate_a_spec_with_a_duplicate_key(write_spec):
    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    params: {shape: [8]}\n    params: {}\n")
    line = one_error_line(runner.invoke(app, ["validate", str(spec)]))
    assert line == "error: spec.yaml: duplicate key 'params' at line 5 (first given at line 4)"


def test_validate_a_user_target_with_a_syntax_error(write_spec, tmp_path, monkeypatch):
    (tmp_path / "my_broken_model.py").write_text("import torch\ndef make(device)\n    return None\n")
    monkeypatch.chdir(tmp_path)
    spec = write_spec("name: x\nexperiments:\n  - target: my_broken_model:make\n")
    line = one_error_line(runner.invoke(app, ["validate", str(spec)]))
    assert line == (
        "error: spec.yaml: experiments[0].target: cannot import module 'my_broken_model' of target "
        "'my_broken_model:make': SyntaxError: expected ':' (my_broken_model.py, line 2)"
    )


def out_cases(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return {
        "directory": (tmp_path, f"--out {tmp_path}: is a directory; give a file path for the report, e.g. "),
        "folder": (blocker / "sub" / "r.json", f"--out {blocker / 'sub' / 'r.json'}: cannot create the folder "),
        "unwritable": (Path("/proc/r.json"), "--out /proc/r.json: cannot write in /proc: "),
    }


@pytest.mark.parametrize("case", ["directory", "folder", "unwritable"])
def test_out_problems_are_caught_before_ray_starts(tmp_path, write_spec, monkeypatch, case):
    from orchestrator import api

    def no_run(*args, **kwargs):
        raise AssertionError("the run started despite a bad --out")

    monkeypatch.setattr(api, "run", no_run)
    out, expected = out_cases(tmp_path)[case]
    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {backend: eager}\n")
    line = one_error_line(runner.invoke(app, ["run", str(spec), "--out", str(out)]))
    assert line.startswith(f"error: {expected}"), line
    assert not list(tmp_path.rglob("*.journal.jsonl")) and not list(tmp_path.rglob("*.probe"))


def test_out_naming_a_directory_ends_at_once_not_after_the_sweep(tmp_path, write_spec):
    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {backend: eager}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", str(spec), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: --out {tmp_path}: is a directory; give a file path for the report, e.g. {tmp_path / 'report.json'}"
    ]


def test_the_library_checks_out_before_connecting(tmp_path, monkeypatch):
    from orchestrator import api
    from orchestrator.plan.paths import OutPathError

    def no_cluster(*args, **kwargs):
        raise AssertionError("connected to Ray despite a bad --out")

    monkeypatch.setattr(api, "connect", no_cluster)
    with pytest.raises(OutPathError, match="is a directory"):
        api.run(ROOT / "examples" / "seed.yaml", tmp_path)


def test_run_passes_the_worker_settings_to_the_library(write_spec, tmp_path, monkeypatch):
    from orchestrator import api
    from tasks.models import WorkerLimits

    seen: dict = {}

    def fake_run(spec, out, **kwargs):
        seen.update(kwargs)
        raise api.JournalError("stop here")

    monkeypatch.setattr(api, "run", fake_run)
    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {backend: eager}\n")
    args = ["run", str(spec), "--out", str(tmp_path / "r.json")]
    runner.invoke(app, args)
    assert seen["worker_start_timeout_s"] == 600 and seen["worker_limits"] == WorkerLimits()
    more = ["--worker-start-timeout", "30", "--worker-max-experiments", "5", "--worker-max-rss-growth-mb", "2048"]
    runner.invoke(app, [*args, *more])
    assert seen["worker_start_timeout_s"] == 30
    assert seen["worker_limits"] == WorkerLimits(max_experiments=5, max_rss_growth_mb=2048)


def test_run_help_gives_the_worker_limits_defaults():
    from tasks.models import DEFAULT_MAX_EXPERIMENTS, DEFAULT_MAX_RSS_GROWTH_MB

    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    assert f"default {DEFAULT_MAX_EXPERIMENTS};" in result.output
    assert f"default {DEFAULT_MAX_RSS_GROWTH_MB:g};" in result.output
    assert "--worker-start-timeout" in result.output
