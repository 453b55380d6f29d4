"""Exporting a report: PyTorch's OSS benchmark database records (v3) and the dynamo harness's performance CSV.

The records are validated against ``tests/data/pytorch-v3.schema.json``, a JSON Schema written from the
table's columns (``pytorch/test-infra``, ``clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import read, write_report
from orchestrator.report.export import COLUMNS, ExportError, csv_text, export_text, records
from tests.conftest import use_s3_endpoint
from tests.report_data import make_replicates, make_report, make_result, mixed_report

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "tests" / "data" / "pytorch-v3.schema.json").read_text())
SEED_REPORT = ROOT / "tests" / "data" / "seed-cpu.json"  # a real run of examples/seed.yaml on this machine's CPU
# benchmarks/dynamo/common.py, speedup_experiment: its header, with get_dynamo_stats' counters after it
HARNESS_HEADER = (
    "dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio,eager_peak_mem,dynamo_peak_mem,"
    "calls_captured,unique_graphs,graph_breaks,unique_graph_breaks,autograd_captures,autograd_compiles,cudagraph_skips"
)
runner = CliRunner()


def strict_json(text: str) -> Any:
    """JSON as the database reads it: NaN and Infinity are not JSON."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} in the output")

    return json.loads(text, parse_constant=refuse)


def validate(found: list[dict[str, Any]]) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(found)


def by_metric(found: list[dict[str, Any]], experiment_id: str, replicate: int = 0) -> dict[str, dict[str, Any]]:
    mine = [
        r
        for r in found
        if r["benchmark"]["extra_info"]["experiment_id"] == experiment_id
        and r["benchmark"]["extra_info"]["replicate"] == str(replicate)
    ]
    return {r["metric"]["name"]: r for r in mine}


# ------------------------------------------------------------------------------------- the schema


def test_the_schema_is_a_valid_json_schema_and_refuses_what_the_table_cannot_hold():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    good = records(mixed_report())[0]
    validate([good])
    bad = [
        {**good, "metric": {**good["metric"], "benchmark_values": ["1.0"]}},  # Array(Float32)
        {**good, "metric": {**good["metric"], "extra_info": {"n": 10}}},  # Map(String, String)
        {**good, "model": {k: v for k, v in good["model"].items() if k != "name"}},  # model.name is required
        {**good, "benchmark": {**good["benchmark"], "name": ""}},
        {**good, "schema_version": "v2"},
        {**good, "runners": [{"cpu_count": -1}]},  # UInt32
        {**good, "metric": {**good["metric"], "unit": "ms"}},  # no such column
    ]
    for record in bad:
        with pytest.raises(jsonschema.ValidationError):
            validate([record])


# ------------------------------------------------------------------------------------- v3 records


def test_every_record_of_a_real_report_validates_and_holds_no_nan():
    report = read(SEED_REPORT)
    found = strict_json(export_text(report, "pytorch-v3"))
    validate(found)
    assert {r["schema_version"] for r in found} == {"v3"}
    assert {r["name"] for r in found} == {"seed-tutorial"}
    assert {r["timestamp"] for r in found} == {1796161248}  # 2026-12-01T21:40:48+00:00
    for r in found:
        assert all(isinstance(v, float) and math.isfinite(v) for v in r["metric"]["benchmark_values"])
        assert "repo" not in r and "head_sha" not in r  # a report does not know the change it measured
    assert len({(r["benchmark"]["extra_info"]["experiment_id"], r["benchmark"]["extra_info"]["replicate"])
                for r in found}) == len(report.results)  # fmt: skip


def test_one_result_gives_its_timings_raw_speedup_compile_and_graph_breaks():
    report = read(SEED_REPORT)
    result = report.results[0]
    metrics = by_metric(records(report), result.experiment_id)
    assert set(metrics) == {
        "speedup",
        "eager_latency_ms",
        "compiled_latency_ms",
        "compilation_latency",
        "graph_breaks",
        "accuracy",
    }  # fmt: skip  (a CPU run measures no peak memory: no memory records)
    assert metrics["eager_latency_ms"]["metric"]["benchmark_values"] == result.eager.samples_ms
    assert metrics["compiled_latency_ms"]["metric"]["benchmark_values"] == result.compiled.samples_ms
    assert metrics["speedup"]["metric"]["benchmark_values"] == [result.speedup]
    assert metrics["speedup"]["metric"]["extra_info"]["ci_low"] == str(result.speedup_ci[0])
    compile_info = metrics["compilation_latency"]["metric"]["extra_info"]
    assert metrics["compilation_latency"]["metric"]["benchmark_values"] == [result.compile_latency_s]
    assert compile_info["cache"] == "warm" and compile_info["cache_outcome"] == "hit"
    assert compile_info["fxgraph_hit"] == "1" and compile_info["unit"] == "s"
    assert metrics["accuracy"]["metric"]["benchmark_values"] == []
    assert metrics["accuracy"]["metric"]["extra_info"]["benchmark_values"] == '["pass"]'
    record = metrics["speedup"]
    assert record["benchmark"]["name"] == "compilebench"
    assert (record["benchmark"]["mode"], record["benchmark"]["dtype"]) == ("inference", "float32")
    assert record["model"] | {"extra_info": None} == {
        "name": "seed.foo", "type": "compilebench target", "backend": "inductor", "origins": ["compilebench.seed"],
        "extra_info": None,
    }  # fmt: skip
    assert record["dependencies"]["torch"] == {"version": "2.13.0+cpu", "repo": "pytorch/pytorch"}
    assert record["dependencies"]["ray"]["version"] == "2.60.0"
    assert record["dependencies"]["compilebench"]["sha"] == "6589b19bfec2d6241bd83bce784ecae80b50b0f4"
    (machine,) = record["runners"]
    assert (machine["name"], machine["type"], machine["cpu_info"], machine["cpu_count"], machine["gpu_count"]) == (
        "vm", "CPU (AMD EPYC)", "AMD EPYC", 2, 0
    )  # fmt: skip


def test_a_cold_compile_is_its_own_model_backend_with_its_misses():
    report = read(SEED_REPORT)
    cold = next(r for r in report.results if r.compile.cache == "cold")
    metrics = by_metric(records(report), cold.experiment_id)
    assert metrics["compilation_latency"]["model"]["backend"] == "inductor+cold"
    assert metrics["compilation_latency"]["metric"]["extra_info"]["cache"] == "cold"


def test_non_numeric_outcomes_are_strings_in_extra_info():
    found = records(mixed_report())
    validate(found)
    failed = next(r for r in mixed_report().results if r.status == "compile_error")
    metrics = by_metric(found, failed.experiment_id)
    assert "speedup" not in metrics and "compiled_latency_ms" not in metrics  # nothing compiled to time
    info = metrics["accuracy"]["metric"]["extra_info"]
    assert info["benchmark_values"] == '["fail_to_run"]'
    assert info["status"] == "compile_error"
    assert info["error_type"] == "torch._dynamo.exc.Unsupported"
    assert info["error"] == "Data-dependent branching"  # one line
    oom = next(r for r in mixed_report().results if r.status == "oom")
    assert by_metric(found, oom.experiment_id)["accuracy"]["metric"]["extra_info"]["benchmark_values"] == '["OOM"]'


def test_an_incorrect_result_says_so_on_every_figure_it_has():
    result = make_result("seed.foo", 2.0, status="incorrect")
    found = records(make_report([result]))
    validate(found)
    metrics = by_metric(found, result.experiment_id)
    assert metrics["speedup"]["metric"]["benchmark_values"] == [pytest.approx(result.speedup)]
    assert {m["metric"]["extra_info"]["status"] for m in metrics.values()} == {"incorrect"}
    assert {m["metric"]["extra_info"]["correct"] for m in metrics.values()} == {"false"}
    assert metrics["accuracy"]["metric"]["extra_info"]["benchmark_values"] == '["fail_accuracy"]'


def test_a_recompiled_result_is_marked_untrusted():
    result = make_result("seed.outer", 3.0, recompiled=True)
    info = by_metric(records(make_report([result])), result.experiment_id)["speedup"]["metric"]["extra_info"]
    assert info["recompiled"] == "true"
    assert json.loads(info["recompile_reasons"]) == ["1 compilation(s) inside the timed window"]


def test_peak_memory_in_gb_where_measured_with_its_ratio():
    result = make_result("seed.foo", 2.0, gpu="H100", memory_ratio=1.5)
    result.eager.peak_memory_bytes = 3 * 10**9
    result.compiled.peak_memory_bytes = 2 * 10**9
    found = records(make_report([result]))
    validate(found)
    metrics = by_metric(found, result.experiment_id)
    assert metrics["eager_peak_mem"]["metric"]["benchmark_values"] == [3.0]
    assert metrics["dynamo_peak_mem"]["metric"]["benchmark_values"] == [2.0]
    assert metrics["dynamo_peak_mem"]["metric"]["extra_info"]["bytes"] == str(2 * 10**9)
    assert metrics["compression_ratio"]["metric"]["benchmark_values"] == [1.5]
    (machine,) = metrics["speedup"]["runners"]
    assert machine["type"] == "H100" and machine["gpu_info"] == "NVIDIA H100"


def test_a_sample_that_is_not_finite_is_left_out_and_counted():
    result = make_result("seed.foo", 2.0)
    result.eager.samples_ms[3] = float("nan")
    result.eager.median_ms, result.eager.iqr_ms = float("nan"), float("-inf")  # a map's strings: json's spelling
    text = export_text(make_report([result]), "pytorch-v3")
    found = strict_json(text)  # still JSON: no NaN written
    eager = by_metric(found, result.experiment_id)["eager_latency_ms"]["metric"]
    assert len(eager["benchmark_values"]) == len(result.eager.samples_ms) - 1
    assert eager["extra_info"]["non_finite_values_dropped"] == "1"
    assert (eager["extra_info"]["median_ms"], eager["extra_info"]["iqr_ms"]) == ("NaN", "-Infinity")
    assert eager["extra_info"]["first_call_ms"] == repr(result.eager.first_call_ms)


def test_replicates_are_one_record_each_with_their_index():
    results = make_replicates([2.0, 2.2, 2.1], target="seed.foo3", gpu="H100")
    found = records(make_report(results))
    validate(found)
    speedups = [r for r in found if r["metric"]["name"] == "speedup"]
    assert [r["benchmark"]["extra_info"]["replicate"] for r in speedups] == ["0", "1", "2"]
    assert {r["benchmark"]["extra_info"]["replicates"] for r in speedups} == {"3"}
    assert [r["metric"]["benchmark_values"][0] for r in speedups] == [pytest.approx(r.speedup) for r in results]


def test_params_phase_precision_and_versions_are_mapped():
    result = make_result("blocks.mlp", 1.5, params={"batch": 32, "dim": 512}, gpu="H100")
    result.precision = "amp_bf16"
    result.phase = "training"
    result.worker.versions = {"torch": "2.13.0", "triton": "3.5.0", "git": "abc123-dirty"}
    found = records(make_report([result]), repo="pytorch/pytorch", head_branch="main", head_sha="f00d")
    validate(found)
    record = found[0]
    assert (record["repo"], record["head_branch"], record["head_sha"]) == ("pytorch/pytorch", "main", "f00d")
    assert (record["benchmark"]["mode"], record["benchmark"]["dtype"]) == ("training", "amp_bf16")
    assert record["model"]["name"] == "blocks.mlp batch=32 dim=512"
    assert record["inputs"] == {"batch": {"dtype": "int", "extra_info": {"value": "32"}},
                                "dim": {"dtype": "int", "extra_info": {"value": "512"}}}  # fmt: skip
    assert record["benchmark"]["extra_info"]["batch_size"] == "32"
    assert record["dependencies"]["triton"] == {"version": "3.5.0", "repo": "triton-lang/triton"}
    assert "git" not in record["dependencies"]


def test_a_user_target_names_its_module_as_origin():
    result = make_result("mypkg.models:make_net", 1.2)
    record = records(make_report([result]))[0]
    assert record["model"]["type"] == "user target" and record["model"]["origins"] == ["mypkg.models"]


# ------------------------------------------------------------------------------------- the harness CSV


def test_the_csv_header_is_the_harness_s_then_compilebench_s():
    header = csv_text(read(SEED_REPORT)).splitlines()[0]
    assert header.startswith(HARNESS_HEADER + ",")
    assert header.split(",") == list(COLUMNS)
    assert header.removeprefix(HARNESS_HEADER + ",") == "config,phase,precision,replicate,status,experiment_id"


def test_a_csv_row_reads_as_check_perf_csv_reads_it():
    report = read(SEED_REPORT)
    rows = list(csv.DictReader(io.StringIO(csv_text(report))))
    assert len(rows) == len(report.results)
    first, result = rows[0], report.results[0]
    assert (first["dev"], first["name"], first["batch_size"]) == ("cpu", "seed.foo", "0")
    assert float(first["speedup"]) == pytest.approx(result.speedup, abs=1e-6)
    assert float(first["abs_latency"]) == pytest.approx(result.compiled.median_ms, abs=1e-6)  # ms per call
    assert float(first["compilation_latency"]) == pytest.approx(result.compile_latency_s, abs=1e-6)  # s
    assert first["eager_peak_mem"] == first["dynamo_peak_mem"] == first["compression_ratio"] == ""  # not measured
    assert (first["unique_graphs"], first["graph_breaks"], first["unique_graph_breaks"]) == ("1", "0", "0")
    assert first["calls_captured"] == ""  # not recorded: empty, never a made-up 0
    assert (first["config"], first["status"], first["experiment_id"]) == ("inductor", "ok", result.experiment_id)
    shaped = next(r for r in rows if r["name"].startswith("seed.foo3"))
    assert shaped["name"] == "seed.foo3 shape=[4096, 4096]"


def test_a_failed_result_is_a_zero_speedup_row_as_the_harness_writes_it():
    rows = list(csv.DictReader(io.StringIO(csv_text(read(SEED_REPORT)))))
    failed = next(r for r in rows if r["status"] == "compile_error")
    assert (failed["speedup"], failed["abs_latency"]) == ("0.000000", "0.000000")
    assert failed["compilation_latency"] == ""


def test_peak_memory_columns_are_gb():
    result = make_result("seed.foo", 2.0, gpu="H100", memory_ratio=1.5)
    result.eager.peak_memory_bytes = 3 * 10**9
    result.compiled.peak_memory_bytes = 2 * 10**9
    (row,) = csv.DictReader(io.StringIO(csv_text(make_report([result]))))
    assert (row["dev"], row["eager_peak_mem"], row["dynamo_peak_mem"], row["compression_ratio"]) == (
        "cuda", "3.000000", "2.000000", "1.500000"
    )  # fmt: skip


def test_an_unknown_format_is_refused():
    with pytest.raises(ExportError, match=r"^--format: unknown format 'xml' \(choose pytorch-v3 or csv\)$"):
        export_text(mixed_report(), "xml")


# ------------------------------------------------------------------------------------- the command


def test_export_to_stdout_and_to_a_file(tmp_path):
    done = runner.invoke(app, ["export", str(SEED_REPORT)])
    assert done.exit_code == 0, done.output
    validate(strict_json(done.stdout))
    out = tmp_path / "records.json"
    done = runner.invoke(app, ["export", str(SEED_REPORT), "--out", str(out), "--head-sha", "f00d"])
    assert done.exit_code == 0, done.output
    found = strict_json(out.read_text())
    validate(found)
    assert {r["head_sha"] for r in found} == {"f00d"}
    assert done.stdout == ""
    csv_out = tmp_path / "perf.csv"
    done = runner.invoke(app, ["export", str(SEED_REPORT), "-f", "csv", "-o", str(csv_out)])
    assert done.exit_code == 0, done.output
    assert csv_out.read_text() == csv_text(read(SEED_REPORT))


def test_export_reads_a_journal(tmp_path):
    journal = tmp_path / "run.journal.jsonl"
    journal.write_text(make_result("seed.foo", 2.0).model_dump_json() + "\n")
    done = runner.invoke(app, ["export", str(journal)])
    assert done.exit_code == 0, done.output
    validate(strict_json(done.stdout))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-f", "xml"], "error: --format: unknown format 'xml' (choose pytorch-v3 or csv)"),
        (["-o", "{tmp}/a-file/records.json"], "error: cannot write {tmp}/a-file/records.json: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "a-file").write_text("")
    report = tmp_path / "r.json"
    write_report(mixed_report(), report)
    done = runner.invoke(app, ["export", str(report), *[a.format(tmp=tmp_path) for a in args]])
    assert done.exit_code == 2
    assert done.stderr.startswith(message.format(tmp=tmp_path)) and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == "" and not (tmp_path / "records.json").exists()


def test_an_unreadable_report_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    for path in (tmp_path / "missing.json", tmp_path / "bad.json"):
        done = runner.invoke(app, ["export", str(path)])
        assert done.exit_code == 2
        assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_export_reads_and_writes_an_object_store(s3_endpoint, monkeypatch):
    import s3fs

    use_s3_endpoint(monkeypatch, s3_endpoint)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir("export-bucket")
    fs.put(str(SEED_REPORT), "export-bucket/nightly/seed.json")
    done = runner.invoke(
        app, ["export", "s3://export-bucket/nightly/seed.json", "-o", "s3://export-bucket/nightly/seed.v3.json"]
    )
    assert done.exit_code == 0, done.output
    found = strict_json(fs.cat("export-bucket/nightly/seed.v3.json").decode())
    validate(found)
    assert found == records(read(SEED_REPORT))


def test_a_time_stamp_without_a_zone_is_utc_and_a_bad_one_is_one_line(tmp_path):
    report = make_report([make_result("seed.foo", 2.0)])
    report.created_at = "2026-12-01T21:40:48"
    assert {r["timestamp"] for r in records(report)} == {1796161248}
    report.created_at = "yesterday"
    write_report(report, tmp_path / "r.json")
    done = runner.invoke(app, ["export", str(tmp_path / "r.json")])
    assert done.exit_code == 2
    assert done.stderr.strip() == "error: created_at: 'yesterday' is not an ISO 8601 time stamp"


def test_each_result_keeps_its_own_outcome_and_timing_entries_when_many_share_them():
    """Results that share an outcome share its strings; one whose failure or attempts differ carries its own,
    and no record's map changes another's."""
    same = [make_result("seed.foo", 2.0, seed=i) for i in range(3)]
    failed = [
        make_result("seed.bar", status="compile_error", message=m, seed=i) for i, m in enumerate(("a\nx", "b\ny"))
    ]
    retried = make_result("seed.foo", 2.0, seed=9).model_copy(update={"attempts": 2})
    assert same[0].eager is not None
    same[0].eager.host_bound = True
    found = records(make_report([*same, *failed, retried]))
    by_id = {r.experiment_id: by_metric(found, r.experiment_id) for r in [*same, *failed, retried]}
    accuracy = {i: m["accuracy"]["metric"]["extra_info"] for i, m in by_id.items()}
    assert [accuracy[r.experiment_id].get("error") for r in failed] == ["a", "b"]
    assert accuracy[retried.experiment_id]["attempts"] == "2" and "attempts" not in accuracy[same[1].experiment_id]
    eager = by_id[same[0].experiment_id]["eager_latency_ms"]["metric"]["extra_info"]
    assert eager["host_bound"] == "true" and eager["status"] == "ok"
    assert "host_bound" not in by_id[same[1].experiment_id]["eager_latency_ms"]["metric"]["extra_info"]
    speedup = by_id[same[1].experiment_id]["speedup"]["metric"]["extra_info"]
    assert "ci_low" not in eager and "median_ms" not in speedup  # each metric's own entries, on one outcome
