"""benchmarks/compile_cache.py runs and prints its figure: per target, the first and second run's compile
time and their fraction, locally through the CLI and across two nodes; the second run loaded and hit; the
CPU probe ran apart."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from benchmarks.compile_cache import spec_of

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(
    r"^\| blocks\.softmax \| 1 \| (\d+\.\d) \| (\d+\.\d) \| (\d+)% \| (met|NOT met) \| \d+\.\d / \d+\.\d \| \d+% \| "
    r"1/1 \| (\d+)/0 \| (\d+)/0 \| \d+\.\d \| (\d+\.\d) / (\d+\.\d) \|$",
    re.M,
)


def test_the_spec_is_models_yaml_shared_and_unchecked_for_the_targets_picked(tmp_path):
    import json

    from orchestrator.plan.spec import load_spec

    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec_of(["blocks.mlp", "models.gpt"], quick=False, gpu_model="NODE_A")))
    experiments = load_spec(path).experiments
    assert [e.target for e in experiments] == ["blocks.mlp"] * 4 + ["models.gpt"] * 4
    assert all(e.compile.cache == "shared" and not e.check.enabled and e.gpu_model == "NODE_A" for e in experiments)
    assert {e.compile.mode for e in experiments[:4]} == {None, "max-autotune-no-cudagraphs"}
    path.write_text(json.dumps(spec_of(None, quick=False)))
    assert len(load_spec(path).experiments) == 28  # the whole file


def test_quick_run_prints_both_tables_with_a_loaded_second_run():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compile_cache.py"), "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert "`python benchmarks/compile_cache.py --quick`" in out  # the command that printed it
    rows = ROW.findall(out)
    assert len(rows) == 2, out  # local, then across the two nodes
    for first, second, percent, verdict, fx_hits, ag_hits, probe_first, probe_second in rows:
        assert float(first) > 0 and float(second) > 0
        low = 100 * (float(second) - 0.05) / (float(first) + 0.05)  # each time is shown to 0.1 s
        high = 100 * (float(second) + 0.05) / (float(first) - 0.05)
        assert low - 1 <= int(percent) <= high + 1  # and the fraction to 1%
        assert int(percent) <= 15 if verdict == "met" else int(percent) >= 15
        assert int(fx_hits) >= 1 and int(ag_hits) >= 1  # the second run loaded, and its compile hit
        assert float(probe_first) > 0 and float(probe_second) > 0  # the CPU probe ran apart in both fresh processes
    assert "Two nodes of a ray.cluster_utils.Cluster" in out
    first, second = re.findall(r"^\| (first|second): .* \| (\d+) \| \d+\.\d \| \d+\.\d \|", out, re.M)
    assert first == ("first", "0") and second[0] == "second" and int(second[1]) >= 1, out  # the breakdown's hit
