"""The command line, end to end: the seed sweep as a user runs it, and the smaller commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from tasks.models import Result

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
    assert report["schema_version"] == 1
    assert set(report) >= {"spec", "environment", "results", "summary"}
    assert report["environment"]["nodes"] and report["environment"]["torch"]
    results = {
        (r["target"], r["compile"]["method"], r["compile"]["mode"], r["compile"]["fullgraph"]): r
        for r in report["results"]
    }
    assert len(report["results"]) == len(results) == 9

    for key, r in results.items():
        if key != ("seed.bar", "torch_compile", None, True):
            assert r["status"] == "ok", (key, r["error"])
            assert r["correct"] is True and r["device"] == "cpu"
            assert r["compiled"]["median_ms"] > 0 and r["speedup"] > 0
    for mode in (None, "max-autotune-no-cudagraphs"):
        assert results[("seed.foo3", "torch_compile", mode, False)]["speedup"] > 1.0
    bar = results[("seed.bar", "torch_compile", None, False)]
    assert bar["graph_breaks"] >= 1 and bar["break_reasons"][0].startswith("Data-dependent branching")
    bar_fullgraph = results[("seed.bar", "torch_compile", None, True)]
    assert bar_fullgraph["status"] == "compile_error"
    assert bar_fullgraph["error"]["message"].startswith("Data-dependent branching")
    fixed = results[("seed.bar_fixed", "torch_compile", None, True)]
    assert (fixed["graph_breaks"], fixed["graph_count"], fixed["correct"]) == (0, 1, True)
    assert {r["compile"]["method"] for r in report["results"] if r["target"] == "seed.my_module"} == {
        "torch_compile",
        "module_compile",
    }
    counts = report["summary"]["counts"]
    assert (counts["ok"], counts["compile_error"]) == (8, 1)
    assert sum(counts.values()) == 9

    journal = (tmp_path / "seed.journal.jsonl").read_text().splitlines()
    assert sorted(Result.model_validate_json(line).experiment_id for line in journal) == sorted(
        r["experiment_id"] for r in report["results"]
    )
    for column in ("target", "config", "eager ms", "compiled ms", "speedup", "breaks", "status"):
        assert column in proc.stdout
    assert "8 ok, 1 compile_error" in proc.stdout


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
    assert report["environment"]["nodes"][0]["gpus"] == 4
    assert "3 ok" in result.output


def test_validate_counts_experiments():
    result = runner.invoke(app, ["validate", str(ROOT / "examples" / "seed.yaml")])
    assert result.exit_code == 0
    assert "valid, 9 experiments" in result.output
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
