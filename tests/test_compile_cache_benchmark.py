"""benchmarks/compile_cache.py: its spec, what it reads from a pair of runs (``tests/data/compile-cache``: the
reports of ``--quick``'s two local runs, the second loading what the first stored, and its breakdown), the
figure it prints from them, and its breakdown's second fresh process loading the mega-cache and hitting."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from benchmarks import compile_cache
from benchmarks.compile_cache import breakdown, breakdown_table, not_ok, per_target, spec_of, table

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "compile-cache"
ROW = re.compile(
    r"^\| blocks\.softmax \| 1 \| (\d+\.\d) \| (\d+\.\d) \| (\d+)% \| (met|NOT met) \| \d+\.\d / \d+\.\d \| \d+% \| "
    r"1/1 \| (\d+)/0 \| (\d+)/0 \| \d+\.\d \| (\d+\.\d) / (\d+\.\d) \|$",
    re.M,
)
BREAKDOWN_ROW = re.compile(r"^\| (first|second): .* \| (\d+) \| \d+\.\d \| \d+\.\d \|", re.M)


def test_the_spec_is_models_yaml_shared_and_unchecked_for_the_targets_picked(tmp_path):
    from orchestrator.plan.spec import load_spec

    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec_of(["blocks.mlp", "models.gpt"], quick=False, gpu_model="NODE_A")))
    experiments = load_spec(path).experiments
    assert [e.target for e in experiments] == ["blocks.mlp"] * 4 + ["models.gpt"] * 4
    assert all(e.compile.cache == "shared" and not e.check.enabled and e.gpu_model == "NODE_A" for e in experiments)
    assert {e.compile.mode for e in experiments[:4]} == {None, "max-autotune-no-cudagraphs"}
    path.write_text(json.dumps(spec_of(None, quick=False)))
    assert len(load_spec(path).experiments) == 28  # the whole file


def test_the_second_run_loaded_and_hit_what_the_first_stored():
    first, second = (per_target(DATA / f"local-{n}.json")["blocks.softmax"] for n in (1, 2))
    assert (first.experiments, first.failed, second.experiments, second.failed) == (1, 0, 1, 0)
    assert first.loaded == 0 and first.fx_miss >= 1 and first.fx_hit == 0 and first.stored_bytes > 0
    assert second.loaded == 1 and second.fx_hit >= 1 and second.fx_miss == 0 and second.ag_hit >= 1
    assert second.compile_s < first.compile_s and second.load_s > 0
    assert first.probe_s > 0 and second.probe_s > 0  # the CPU probe ran apart in both fresh processes
    assert not_ok(DATA / "local-1.json", "local run 1") == not_ok(DATA / "local-2.json", "local run 2") == []


def test_a_result_that_is_not_ok_is_named_with_its_error(tmp_path):
    report = json.loads((DATA / "local-1.json").read_text())
    (result,) = report["results"]
    result.update(status="compile_error", error={"type": "torch._dynamo.exc.Unsupported", "message": "no\nmore"})
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert not_ok(tmp_path / "r.json", "run") == [
        f"run: blocks.softmax fp32 inference ({result['experiment_id']}): compile_error, "
        "torch._dynamo.exc.Unsupported: no"
    ]
    assert per_target(tmp_path / "r.json")["blocks.softmax"].failed == 1


def check_rows(out: str, expected: int) -> None:
    """Each target's row: its times, a fraction they round to, the goal's verdict, the second run's hits."""
    rows = ROW.findall(out)
    assert len(rows) == expected, out
    for first, second, percent, verdict, fx_hits, ag_hits, probe_first, probe_second in rows:
        assert float(first) > 0 and float(second) > 0
        low = 100 * (float(second) - 0.05) / (float(first) + 0.05)  # each time is shown to 0.1 s
        high = 100 * (float(second) + 0.05) / (float(first) - 0.05)
        assert low - 1 <= int(percent) <= high + 1  # and the fraction to 1%
        assert int(percent) <= 15 if verdict == "met" else int(percent) >= 15
        assert int(fx_hits) >= 1 and int(ag_hits) >= 1  # the second run loaded, and its compile hit
        assert float(probe_first) > 0 and float(probe_second) > 0  # the CPU probe ran apart in both fresh processes


def test_the_table_shows_the_fraction_the_goal_and_how_the_second_run_was_served():
    first, second = (per_target(DATA / f"local-{n}.json") for n in (1, 2))
    check_rows("\n".join(table(first, second)), 1)
    assert table(first, {})[2].startswith("| blocks.softmax | 1 | ") and table(first, {})[2].endswith(" - |" * 10)


def test_quick_prints_both_tables_with_a_loaded_second_run(monkeypatch, capsys):
    """``main --quick`` with each part served from the committed runs: the command, the local and the
    two-node tables, the goal, and the breakdown."""
    pair = (per_target(DATA / "local-1.json"), per_target(DATA / "local-2.json"), [])
    parts = json.loads((DATA / "breakdown.json").read_text())
    monkeypatch.setattr(compile_cache, "local_runs", lambda spec, tmp, env: pair)
    monkeypatch.setattr(compile_cache, "cluster_runs", lambda targets, quick, tmp, env: pair)
    monkeypatch.setattr(compile_cache, "breakdown", lambda target, threads, tmp, env: parts)
    monkeypatch.setattr(sys, "argv", ["benchmarks/compile_cache.py", "--quick"])
    monkeypatch.chdir(ROOT)
    compile_cache.main()
    out = capsys.readouterr().out
    assert "`python benchmarks/compile_cache.py --quick`" in out  # the command that printed it
    check_rows(out, 2)  # local, then across the two nodes
    assert "Two nodes of a ray.cluster_utils.Cluster" in out
    first, second = BREAKDOWN_ROW.findall(out)
    assert first == ("first", "0") and second[0] == "second" and int(second[1]) >= 1, out  # the breakdown's hit


def test_the_breakdowns_second_process_loads_the_mega_cache_and_hits(tmp_path):
    first, second = breakdown("blocks.softmax", 1, tmp_path, dict(os.environ))
    assert not first["loaded"] and first["hits"] == 0
    assert second["loaded"] and second["hits"] >= 1
    for run in (first, second):
        assert run["isa_s"] > 0 and run["compile_s"] > 0 and 0 <= run["cpp_build_s"] <= run["compile_s"]
    rows = BREAKDOWN_ROW.findall("\n".join(breakdown_table([first, second])))
    assert rows[0] == ("first", "0") and rows[1][0] == "second" and int(rows[1][1]) >= 1
