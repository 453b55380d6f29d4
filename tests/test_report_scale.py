"""The read side at 2,500 results: what keeps each command within its bounds at 100,000 (``benchmarks/read_scale.py``
times them), asserted as behaviour: the compressed report keeps every sample bit for bit and old versions
still read; past a screenful, validate summarises, the terminal clips its tables and the page pages its
tables; history reads the history files beside the reports, not the reports; compare and export say the
same whichever way a report is kept."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import struct
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml
from typer.testing import CliRunner

import orchestrator.report.history as history_module
from orchestrator.cli import app
from orchestrator.plan.listing import SCREENFUL
from orchestrator.report import SCHEMA_VERSION, Report, ReportError, read, write_report
from orchestrator.report.compare import Thresholds, as_json, compare
from orchestrator.report.digest import DigestColumns, digest, glance
from orchestrator.report.export import ExportError, export_text, records
from orchestrator.report.html import render_html
from orchestrator.report.io import history_path
from orchestrator.report.page import PAGE_ROWS
from tasks.models import ErrorInfo, Result
from tests.report_data import make_report, make_result

N = 2_500
DATA = Path(__file__).parent / "data"


def _results(n: int, seed: int) -> list[Result]:
    """``n`` results of 25 targets x 25 shapes x 2 configurations (and replicates), 3% failed, each with 20
    samples a side drawn at full double precision."""
    rng = np.random.default_rng(seed)
    templates = {
        (backend, failed): make_result(
            "seed.foo3", status="compile_error" if failed else "ok", backend=backend, speedup=None if failed else 2.0
        )
        for backend in ("inductor", "aot_eager")
        for failed in (False, True)
    }
    out = []
    for i in range(n):
        t = templates[("inductor", "aot_eager")[i % 2], i % 33 == 0]
        eager = t.eager.model_copy(update={"samples_ms": (1.0 + rng.random(20)).tolist()}) if t.eager else None
        out.append(
            t.model_copy(
                update={
                    "experiment_id": f"{seed:02d}{i:010x}",
                    "target": f"t{(i // 2) % 25}",
                    "params": {"shape": (i // 50) % 25},
                    "replicate": i // 1250,
                    "eager": eager,
                }
            )
        )
    return out


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One report of 2,500 results written compressed and as plain JSON, and a second compressed one."""
    folder = tmp_path_factory.mktemp("scale")
    base = make_report(_results(N, 1), name="base")
    paths = {"gz": folder / "base.json.gz", "plain": folder / "plain" / "base.json", "new": folder / "new.json.gz"}
    write_report(base, paths["gz"])
    write_report(base, paths["plain"])
    write_report(make_report(_results(N, 2), name="new"), paths["new"])
    return paths


def _bits(report: Report) -> list[bytes]:
    return [struct.pack("<d", v) for r in report.results if r.eager for v in r.eager.samples_ms]


def test_the_compressed_report_keeps_every_sample_bit_for_bit_and_is_much_smaller(kept):
    plain, packed = read(kept["plain"]), read(kept["gz"])
    assert kept["gz"].read_bytes()[:2] == b"\x1f\x8b"
    assert len(_bits(packed)) == N * 20 - sum(1 for r in packed.results if not r.eager) * 20
    assert _bits(packed) == _bits(plain)
    assert packed == plain and packed.schema_version == SCHEMA_VERSION == 3
    assert kept["gz"].stat().st_size * 4 < kept["plain"].stat().st_size
    # the text inside is the report's own compact JSON, field for field, and the results' digests; the summary on
    # a line of its own, the digests on the next, then each result on a line of its own
    text = gzip.decompress(kept["gz"].read_bytes()).decode()
    inside = json.loads(text)
    assert DigestColumns.model_validate(inside.pop("digests")).digests() == [digest(r) for r in plain.results]
    assert inside == json.loads(plain.model_dump_json())
    head, summary, digests, *lines, tail = text.splitlines()
    assert head.endswith(",") and summary.startswith('"summary":') and digests.startswith('"digests":')
    assert digests.endswith('"results":[') and tail == "]}"
    assert [Result.model_validate_json(line.removesuffix(",")) for line in lines] == plain.results


def test_a_compressed_report_is_read_a_result_at_a_time_and_whole_when_a_line_is_wrong(kept, tmp_path, monkeypatch):
    """The line-per-result layout is read a line at a time, never as one document; any other text is read
    whole, and a result that does not validate is named as whole reading names it."""
    import orchestrator.report.io as io_module

    whole = []
    real = io_module._decompressed
    monkeypatch.setattr(io_module, "_decompressed", lambda *a: whole.append(1) or real(*a))
    assert read(kept["gz"]) == read(kept["plain"]) and whole == [1]  # the plain one only
    lines = gzip.decompress(kept["gz"].read_bytes()).decode().splitlines(keepends=True)
    lines[5] = lines[5].replace('"status":"', '"status":"bogus', 1)  # the third result: first, summary, digests
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress("".join(lines).encode()))
    with pytest.raises(ValueError, match=r"results\.2\.status"):
        read(broken)


def test_a_compressed_report_in_several_members_reads_and_one_cut_short_or_corrupt_is_one_line(kept, tmp_path):
    """Every gzip member is read; a stream cut short or corrupt is the one-line error of any unreadable report."""
    from orchestrator.report import ReportError

    data = kept["gz"].read_bytes()
    text = gzip.decompress(data)
    members = tmp_path / "members.json.gz"
    members.write_bytes(gzip.compress(text[:5000]) + gzip.compress(text[5000:]))
    assert read(members) == read(kept["gz"])
    cut, corrupt = tmp_path / "cut.json.gz", tmp_path / "corrupt.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    corrupt.write_bytes(data[:100] + b"garbage" * 50 + data[450:])
    # a corrupt stream: deflate's error (its code, -3 or -1, depends on what the garbage lands on), in the words of
    # the library that decompressed it
    for path, why in ((cut, "ended before the end-of-stream marker"), (corrupt, r"Error -\d ")):
        with pytest.raises(ReportError, match=f"cannot read {path}: .*{why}"):
            read(path)


def test_a_compressed_report_reads_whatever_its_name_and_from_a_store(kept, tmp_path):
    renamed = tmp_path / "renamed.json"
    renamed.write_bytes(kept["gz"].read_bytes())
    assert read(renamed) == read(kept["gz"])
    small = make_report(_results(50, 4))
    write_report(small, "memory://scale/r.json.gz")
    assert read("memory://scale/r.json.gz") == small


def test_versions_1_and_2_still_read_as_the_current_version(tmp_path):
    for name in ("seed-v1.json", "seed-cpu.json"):  # written by schema versions 1 and 2
        assert read(DATA / name).schema_version == SCHEMA_VERSION
    data = json.loads((DATA / "seed-cpu.json").read_text())
    assert data["schema_version"] == 2
    packed = tmp_path / "v2.json.gz"
    packed.write_bytes(gzip.compress(json.dumps(data).encode()))  # a version 2 report compressed by hand
    assert read(packed) == read(DATA / "seed-cpu.json")


def test_validate_summarises_past_a_screenful_and_lists_every_row_when_asked(tmp_path):
    spec = tmp_path / "big.yaml"
    sweep = {"params.shape": [[8 * k, 8] for k in range(1, 51)], "compile.mode": ["default", "max-autotune"]}
    sweep["seed"] = list(range(5))
    spec.write_text(yaml.safe_dump({"name": "big", "experiments": [{"target": "seed.foo3", "sweep": sweep}]}))
    runner = CliRunner()
    summary = runner.invoke(app, ["validate", str(spec)])
    assert summary.exit_code == 0, summary.output
    assert "500 experiments, by target and configuration" in summary.output
    assert "250" in summary.output and "shape: 50 values" in summary.output and "--all" in summary.output
    assert len(summary.output.splitlines()) < SCREENFUL
    every = runner.invoke(app, ["validate", str(spec), "--all"])
    ids = json.loads(runner.invoke(app, ["validate", str(spec), "--format", "json"]).output)
    assert len(ids) == 500 and {row["config"] for row in ids} == {"inductor", "inductor:max-autotune"}
    assert all(row["id"] in every.output for row in ids)


def test_the_terminal_clips_every_table_and_says_where_every_row_is(kept, monkeypatch):
    import orchestrator.report.views as views_module

    made = []  # the ship table's rows, as each is made: the terminal makes the 40 it shows, of every group
    real = views_module.break_even_text
    monkeypatch.setattr(views_module, "break_even_text", lambda c: made.append(c) or real(c))
    result = CliRunner().invoke(app, ["report", str(kept["gz"])])
    assert result.exit_code == 0, result.output
    groups = len(read(kept["gz"]).summary.groups)
    assert len(made) == 40 and f"first 40 of {groups:,} rows; every row with --format markdown" in result.output
    assert f"{N:,} results, one row each with --format csv" in result.output
    assert re.search(r"first 40 of [\d,]+ rows; every row with --format markdown", result.output)
    assert len(result.output.splitlines()) < 2_000  # not a row a result
    csv_rows = CliRunner().invoke(app, ["report", str(kept["gz"]), "--format", "csv"]).output.splitlines()
    assert len(csv_rows) == N + 1


def test_the_terminal_reads_of_a_big_report_the_results_it_lists_and_prints_what_a_whole_read_prints(
    kept, tmp_path, monkeypatch
):
    """``report`` on a terminal validates only the results its views list one by one (those not ok, replays,
    distributed runs), found by the digests, and prints exactly what it prints from the report read whole.
    A report whose digests do not say what is listed (written before they were kept), or of a screenful of
    results or fewer, is read whole."""
    import io as text_io

    from rich.console import Console

    import orchestrator.report.io as io_module
    from orchestrator.report import print_report
    from orchestrator.report.models import Outline
    from orchestrator.report.skim import load_outline

    whole = read(kept["gz"])
    validated = []
    real = Result.model_validate_json
    monkeypatch.setattr(io_module.Result, "model_validate_json", lambda text: validated.append(1) or real(text))
    outline = load_outline(kept["gz"])
    monkeypatch.undo()
    listed = [r for r in whole.results if r.status != "ok" or r.replay or r.distributed]
    assert isinstance(outline, Outline) and outline.results == listed and len(validated) == len(listed) < N / 10
    assert outline.result_count == N and outline.unchecked == sum(
        r.status == "ok" and r.correct is None for r in whole.results
    )
    assert outline.summary == whole.summary and outline.environment == whole.environment

    def drawn(report: Report) -> str:
        console = Console(file=text_io.StringIO(), width=160)
        print_report(console, report)
        return console.file.getvalue()

    assert drawn(outline) == drawn(whole)
    by_cli = CliRunner().invoke(app, ["report", str(kept["gz"])])
    assert by_cli.exit_code == 0 and f"{N:,} results, one row each with --format csv" in by_cli.output

    # digests written before the listed columns were kept: read whole, the same tables
    text = gzip.decompress(kept["gz"].read_bytes())
    first, summary, digests, rest = text.split(b"\n", 3)
    columns = json.loads(digests.removeprefix(b'"digests":').removesuffix(b',"results":['))
    older = {k: v for k, v in columns.items() if k not in ("correct", "replayed", "distributed")}
    old = tmp_path / "old.json.gz"
    old.write_bytes(
        gzip.compress(b"\n".join([first, summary, b'"digests":' + json.dumps(older).encode() + b',"results":[', rest]))
    )
    assert load_outline(old) is None and read(old) == whole
    small = tmp_path / "small.json.gz"
    write_report(make_report(_results(40, 3)), small)
    assert load_outline(small) is None and load_outline(kept["plain"]) is None

    # replays and distributed runs are listed one by one too (their own tables), ok or not
    from tests.report_data import replay_report
    from tests.test_ranks import ranked_result

    special = [*replay_report().results, ranked_result(1, 1.5), ranked_result(2, 1.8)]
    mixed = make_report([*whole.results[:200], *special], name="mixed")
    path = tmp_path / "mixed.json.gz"
    write_report(mixed, path)
    mixed_outline = load_outline(path)
    assert mixed_outline is not None and all(r in mixed_outline.results for r in special)
    assert drawn(mixed_outline) == drawn(read(path))


def test_the_page_of_a_big_report_is_drawn_from_its_digests_and_is_the_page_of_the_whole_read(
    kept, tmp_path, monkeypatch
):
    """``report --html`` of a compressed report validates its digests and only the results the page shows one by
    one (not ok, replays, distributed runs, traces) or whose samples it embeds (the first ``MAX_SAMPLE_RESULTS``
    timed), and writes the page the whole read draws, byte for byte. Digests written before the page's columns
    were kept: read whole."""
    import orchestrator.report.io as io_module
    from orchestrator.report.digest import PAGE_FIELDS
    from orchestrator.report.html import MAX_SAMPLE_RESULTS
    from orchestrator.report.skim import load_page
    from tasks.models import TraceInfo
    from tests.report_data import replay_report
    from tests.test_ranks import ranked_result

    whole = read(kept["gz"])
    traced = whole.results[7].model_copy(update={"trace": TraceInfo(dir="traces/t7", bytes=2048)})
    special = [*replay_report().results, ranked_result(1, 1.5), ranked_result(2, 1.8), traced]
    mixed = make_report([*whole.results[:1500], *special, *whole.results[1500:]], name="mixed")
    path = tmp_path / "mixed.json.gz"
    write_report(mixed, path)

    validated = []
    real = Result.model_validate_json
    monkeypatch.setattr(io_module.Result, "model_validate_json", lambda text: validated.append(1) or real(text))
    page = load_page(path, MAX_SAMPLE_RESULTS)
    monkeypatch.undo()
    assert page is not None and len(page.digests) == len(mixed.results) == page.outline.result_count
    listed = [r for r in mixed.results if r.status != "ok" or r.replay or r.distributed or r.trace]
    timed = [r for r in mixed.results if r.eager or r.compiled][:MAX_SAMPLE_RESULTS]
    assert page.outline.results == listed and page.sampled == timed and all(r in listed for r in special)
    assert len(validated) == len({id(r) for r in [*listed, *timed]}) < len(mixed.results) / 2
    assert page.digests == [digest(r) for r in mixed.results]

    out = tmp_path / "page.html"
    done = CliRunner().invoke(app, ["report", str(path), "--html", str(out)])
    assert done.exit_code == 0, done.output
    assert out.read_text() == render_html(read(path))
    assert done.output.removesuffix(f"HTML: {out}\n") == CliRunner().invoke(app, ["report", str(path)]).output

    # digests written before the page's columns were kept: None, and the CLI reads the report whole
    text = gzip.decompress(path.read_bytes())
    first, summary, digests, rest = text.split(b"\n", 3)
    columns = json.loads(digests.removeprefix(b'"digests":').removesuffix(b',"results":['))
    older = {k: v for k, v in columns.items() if k not in PAGE_FIELDS}
    old = tmp_path / "old.json.gz"
    old.write_bytes(
        gzip.compress(b"\n".join([first, summary, b'"digests":' + json.dumps(older).encode() + b',"results":[', rest]))
    )
    assert load_page(old, MAX_SAMPLE_RESULTS) is None
    assert CliRunner().invoke(app, ["report", str(old), "--html", str(out)]).exit_code == 0
    assert out.read_text() == render_html(read(path))


def test_the_page_drawn_beside_the_command_is_the_page_drawn_in_one_process(kept, tmp_path, monkeypatch):
    """``report --html`` draws the charts and the table of every result in a forked copy of itself (Linux, no
    other thread), started as soon as the report is read; the page is the one a single process draws, byte for
    byte. The command runs as a user runs it, in a process of its own (this one may run other threads)."""
    import tasks.forked as forked_module

    monkeypatch.setattr(forked_module, "can_fork", lambda: False)
    here = render_html(read(kept["gz"]))
    monkeypatch.undo()
    out = tmp_path / "page.html"
    command = [sys.executable, "-c", _DRAWN_BESIDE, "report", str(kept["gz"]), "--html", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == here


# the command's own main, with a check that what it starts beside itself is forked (Linux)
_DRAWN_BESIDE = """
import sys
import tasks.forked
from orchestrator.cli import main
from orchestrator.report import html
if sys.platform == "linux":
    class Checked(tasks.forked.Beside):
        def __init__(self, make):
            super().__init__(make)
            assert self.forked
    html.Beside = Checked
main()
"""


def test_the_page_holds_a_bounded_number_of_rows_and_every_result_in_its_data(kept):
    page = render_html(read(kept["gz"]))
    assert page.count("<tr>") <= 10 * (PAGE_ROWS + 1)
    tables = re.findall(r'<script type="application/json">(\{"page".*?)</script>', page)
    rows = [json.loads(t)["rows"] for t in tables]
    assert max(len(r) for r in rows) == N  # every result, drawn a page at a time in the browser
    assert "<input type='search'" in page


def test_past_a_few_hundred_results_the_speedup_chart_is_a_box_per_configuration(kept):
    """2,500 results: a box per configuration holding every speedup, not a bar per result; a small report
    keeps its bars."""
    from orchestrator.report.charts import MAX_SPEEDUP_BARS, speedup_figures
    from orchestrator.report.summary import valid_timing

    report = read(kept["gz"])
    (fig,) = speedup_figures(report.results)
    timed = [r for r in report.results if valid_timing(r)]
    assert {t.type for t in fig.data} == {"box"} and {t.name for t in fig.data} == {r.config_label for r in timed}
    assert sum(len(t.y) for t in fig.data) == len(timed) > MAX_SPEEDUP_BARS  # every speedup, in a box
    assert f"a box per configuration over {len(timed):,} results" in fig.layout.title.text
    small = make_report(_results(MAX_SPEEDUP_BARS // 4, 2))
    assert {t.type for t in speedup_figures(small.results)[0].data} == {"bar"}


def test_history_reads_the_history_files_not_the_reports(tmp_path, monkeypatch):
    paths = [tmp_path / f"nightly-{k}.json.gz" for k in range(3)]
    for k, path in enumerate(paths):
        write_report(make_report(_results(60, k), name=path.name), path)
    reads: list[str] = []
    real = history_module.read

    def counted(path):
        reads.append(str(path))
        return real(path)

    monkeypatch.setattr(history_module, "read", counted)
    found, count = history_module.history_of([str(tmp_path)])
    assert count == 3 and reads == []
    assert history_path(paths[0]).name == "nightly-0.history.json"
    # the same series as from the reports read whole
    assert found == history_module.build_history([(str(p), real(p)) for p in paths])
    # a report replaced without its history file (another size) is read whole
    write_report(make_report(_results(30, 9)), paths[1])
    history_path(paths[1]).write_bytes(history_path(paths[0]).read_bytes())
    history_module.history_of([str(tmp_path)])
    assert reads == [str(paths[1])]


def test_compare_says_the_same_of_a_compressed_report(kept):
    """The compressed report reads as the same model as the plain one (the first test), so every command says the
    same of it; compare, once, on the two reports of 2,500 results."""
    plain, packed, new = read(kept["plain"]), read(kept["gz"]), read(kept["new"])
    assert as_json(compare(plain, new, Thresholds())) == as_json(compare(packed, new, Thresholds()))


def test_compare_reads_a_compressed_reports_digests_alone_and_judges_as_it_does_the_whole_reports(kept, monkeypatch):
    """``compilebench compare`` of two compressed reports reads their heads (summary and digests) and stops: no
    result is decompressed or validated. Its verdict, every change with its cells (phases, messages, cache
    labels) and every warning, is the one of the two reports read whole; a report without digests (indented,
    or written before them) is read whole and digested, and says the same."""
    import orchestrator.report.io as io_module
    from orchestrator.report.skim import load_glance

    rng = np.random.default_rng(7)
    phases = {"entire_frame_compile": 0.8, "backend_compile": 0.5, "inductor_compile": 0.4}
    base = make_report([r.model_copy(update={"compile_breakdown": phases}) for r in read(kept["gz"]).results])
    write_report(base, kept["gz"].with_name("phased.json.gz"))

    def moved(i: int, r: Result) -> Result:
        update: dict = {}
        if r.speedup:
            update["speedup"] = r.speedup * (1 + 0.01 * rng.normal()) * (0.7 if i % 97 == 0 else 1.0)
        if i % 89 == 0 and r.compile_latency_s:
            breakdown = {"entire_frame_compile": 2.0, "backend_compile": 1.5, "inductor_compile": 1.2}
            update |= {"compile_latency_s": r.compile_latency_s * 2.5, "compile_breakdown": breakdown}
        if i % 101 == 0 and r.status == "ok":
            update |= {"status": "runtime_error", "error": ErrorInfo(type="RuntimeError", message="boom\nat x.py:3")}
        if i % 103 == 0 and r.graph_breaks is not None:
            update["graph_breaks"] = r.graph_breaks + 2
        return r.model_copy(update=update)

    changed = make_report([moved(i, r) for i, r in enumerate(base.results)], name="changed")
    write_report(changed, kept["gz"].with_name("changed.json.gz"))
    write_report(changed, kept["plain"].with_name("changed.json"))
    whole = as_json(compare(base, changed, Thresholds(gate_compile=True), names=("a", "b")))
    assert {c["kind"] for c in json.loads(whole)["changes"]} >= {"slower", "compile_slower", "new_failure"}
    assert any(c["phases"] for c in json.loads(whole)["changes"]) and "breaks_grew" in whole

    validated = []
    real = Result.model_validate_json
    monkeypatch.setattr(Result, "model_validate_json", lambda *a, **k: validated.append(1) or real(*a, **k))
    monkeypatch.setattr(io_module, "_decompressed", lambda *a: pytest.fail("a report read whole"))
    glances = tuple(load_glance(kept["gz"].with_name(name)) for name in ("phased.json.gz", "changed.json.gz"))
    assert validated == [] and [len(g.digests) for g in glances] == [N, N]
    assert as_json(compare(*glances, Thresholds(gate_compile=True), names=("a", "b"))) == whole
    monkeypatch.undo()

    assert load_glance(kept["plain"].with_name("changed.json")) == glance(changed)  # indented: read whole
    pair = [str(kept["gz"].with_name(name)) for name in ("phased.json.gz", "changed.json.gz")]
    cli = CliRunner().invoke(app, ["compare", *pair, "--gate-compile", "--format", "json"])
    assert cli.exit_code == 1 and json.loads(cli.output)["changes"] == json.loads(whole)["changes"]
    # in a process of its own, as a user runs it: the summaries' decisions read in a forked copy (Linux)
    command = [sys.executable, "-c", _GLANCES_BESIDE, *pair]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["changes"] == json.loads(whole)["changes"]


_GLANCES_BESIDE = """
import sys
from orchestrator.cli import main
from orchestrator.report import skim
if sys.platform == "linux":
    class Checked(skim.Beside):
        def __init__(self, make):
            super().__init__(make)
            assert self.forked
    skim.Beside = Checked
sys.argv[1:] = ["compare", *sys.argv[1:], "--gate-compile", "--format", "json"]
main()
"""


def test_compare_names_the_first_report_it_cannot_read(kept, tmp_path):
    """Where both reports are wrong, the first (``base``) is named, whether or not the decisions are read in a forked
    copy: a base that must be read whole is read before the next report's head is."""
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "cut')
    missing = tmp_path / "missing.json.gz"
    for base, new, named in ((broken, missing, broken), (missing, broken, missing), (kept["gz"], broken, broken)):
        other = new if named == base else base
        done = CliRunner().invoke(app, ["compare", str(base), str(new)])
        assert done.exit_code == 2 and str(named) in done.output and str(other) not in done.output, done.output
        command = [sys.executable, "-c", _GLANCES_BESIDE, str(base), str(new)]  # forked on Linux
        alone = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert alone.returncode == 2 and str(named) in alone.stderr and str(other) not in alone.stderr, alone.stderr


def test_a_compressed_report_whose_digests_do_not_validate_is_read_whole(kept, tmp_path):
    """Digests of the wrong type or length are not trusted: the report is read whole, as if it had none."""
    from orchestrator.report.skim import load_glance

    first, summary, digests, *rest = gzip.decompress(kept["gz"].read_bytes()).splitlines(keepends=True)
    short = digests.replace(b'"replicate":[0,', b'"replicate":[', 1)  # a column one value short
    assert short != digests
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(b"".join([first, summary, short, *rest])))
    assert load_glance(broken) == glance(read(kept["gz"]))


def test_digests_written_before_the_runs_standard_errors_read_with_none_and_are_judged_unstandardized():
    """A report whose digest columns lack ``eager_se``/``compiled_se`` (written before they were kept) reads
    with those None, every other field as written; the gate then judges its one-run moves as before, scaled
    to one run against one (no ``se_spread``); with them, standardized by each run's own standard error."""
    results = [make_result("seed.foo", 2.0, params={"i": i}, noise=0.02, n=11, sample_seed=i) for i in range(30)]
    later = [make_result("seed.foo", 2.0, params={"i": i}, noise=0.02, n=11, sample_seed=99 + i) for i in range(30)]
    digests = [digest(r) for r in results]
    assert all(d.eager_se and d.compiled_se for d in digests)
    cols = {name: [getattr(d, name) for d in digests] for name in digests[0].__slots__}
    old = DigestColumns.model_validate({k: v for k, v in cols.items() if not k.endswith("_se")}).digests()
    assert [d.eager_se for d in old] == [None] * 30
    assert [replace(d, eager_se=None, compiled_se=None) for d in digests] == old
    base, new = make_report(results, name="base"), make_report(later, name="new")
    (now,) = compare(base, new).noise
    assert now.se_spread is not None and now.between is not None
    before = glance(new)
    before.digests = [replace(d, eager_se=None, compiled_se=None) for d in before.digests]
    (then,) = compare(base, before).noise
    assert then.se_spread is None and then.between is None and then.spread == now.spread


def test_compare_on_a_terminal_clips_its_changes_and_markdown_and_json_list_every_one(kept):
    """Past a screenful of changes the terminal shows the first (regressions first) and says how many there are;
    markdown and JSON list every one, each with its cells."""
    base = read(kept["gz"])
    rng = np.random.default_rng(4)
    moved = [  # 1% noise on every speedup, and 50 experiments 30% slower
        r.model_copy(update={"speedup": r.speedup * (1 + 0.01 * rng.normal()) * (0.7 if i % 25 == 0 else 1.0)})
        if r.speedup
        else r
        for i, r in enumerate(base.results)
    ]
    write_report(make_report(moved, name="moved"), kept["gz"].with_name("moved.json.gz"))
    args = ["compare", str(kept["gz"]), str(kept["gz"].with_name("moved.json.gz"))]
    every = json.loads(CliRunner().invoke(app, [*args, "--format", "json"]).output)
    count = len(every["changes"])
    assert count > SCREENFUL and all(ch["base"] and ch["new"] and ch["change"] for ch in every["changes"])
    shown = CliRunner().invoke(app, args).output
    assert f"first {SCREENFUL} of {count:,} rows; every change with --format markdown or json" in shown
    assert len(shown.splitlines()) < 10 * SCREENFUL
    table = [line for line in CliRunner().invoke(app, [*args, "--format", "markdown"]).output.splitlines()]
    assert sum(line.startswith("| ") for line in table) == count + 2  # the header, its rule and a row a change


def test_export_streams_the_same_text_as_the_whole_list():
    report = make_report(_results(120, 3))
    text = export_text(report, "pytorch-v3")
    assert json.loads(text) == records(report)
    head, *lines, tail = text.splitlines()  # a record a line, between the list's brackets
    assert (head, tail) == ("[", "]") and [json.loads(line.removesuffix(",")) for line in lines] == records(report)
    # each line is the very text orjson makes of its record (a result's shared part encoded once for all)
    assert [line.removesuffix(",") for line in lines] == [orjson.dumps(r).decode() for r in records(report)]
    assert export_text(make_report([]), "pytorch-v3") == "[]\n"


def test_export_csv_of_a_big_report_reads_what_the_csv_holds_of_each_result_and_writes_what_a_whole_read_writes(
    kept, tmp_path, monkeypatch
):
    """``export -f csv`` of a compressed report validates each result as ``CsvResult`` (the fields the CSV reads)
    and neither its summary nor whole results, and writes the text the report read whole makes, byte for byte:
    with CUDA graphs skipped, peak memory, replays and distributed runs mixed in. A report kept any other way,
    or one with a line that does not validate, is read whole (which names what is wrong)."""
    import orchestrator.report.io as io_module
    from orchestrator.report.export import CsvResult, csv_text
    from orchestrator.report.skim import load_results_as
    from tasks.models import Measurement
    from tests.report_data import replay_report
    from tests.test_ranks import ranked_result

    whole = read(kept["gz"])
    graphs = Measurement(timer="cuda_events", cudagraphs=True, cudagraph_skips=["mutated inputs", "cpu device"])
    first = whole.results[0]
    assert first.eager is not None
    peak = first.eager.model_copy(update={"peak_memory_bytes": 3 * 10**9})
    gpu = {"measurement": graphs, "memory_ratio": 1.25, "device": "cuda", "eager": peak}
    special = [first.model_copy(update=gpu), *replay_report().results, ranked_result(1, 1.5), ranked_result(2, 1.8)]
    mixed = make_report([*special, *whole.results], name="mixed")
    path = tmp_path / "mixed.json.gz"
    write_report(mixed, path)

    for name in ("model_validate_json", "model_validate"):
        monkeypatch.setattr(Result, name, classmethod(lambda cls, *a, **k: pytest.fail("a result read whole")))
    monkeypatch.setattr(io_module.Report, "model_validate_json", lambda *a: pytest.fail("the summary read"))
    projected = load_results_as(path, CsvResult)
    out = tmp_path / "perf.csv"
    done = CliRunner().invoke(app, ["export", str(path), "-f", "csv", "-o", str(out)])
    monkeypatch.undo()
    assert projected is not None and len(projected) == len(mixed.results) == N + len(special)
    assert [r.config_label for r in projected] == [r.config_label for r in mixed.results]
    assert done.exit_code == 0, done.output
    assert out.read_text() == csv_text(read(path))
    row = next(csv.DictReader(io.StringIO(out.read_text())))
    cells = ("dev", "compression_ratio", "eager_peak_mem", "cudagraph_skips")
    assert [row[c] for c in cells] == ["cuda", "1.250000", "3.000000", "2"]

    # kept otherwise: read whole, the same text
    assert load_results_as(kept["plain"], CsvResult) is None
    plain = CliRunner().invoke(app, ["export", str(kept["plain"]), "-f", "csv"])
    assert plain.exit_code == 0 and plain.output == csv_text(whole)
    # a line that does not validate: read whole, which names it
    text = gzip.decompress(path.read_bytes()).replace(b'"status":"ok"', b'"status":"fine"', 1)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(text))
    assert load_results_as(bad, CsvResult) is None
    failed = CliRunner().invoke(app, ["export", str(bad), "-f", "csv"])
    assert failed.exit_code == 2 and "results.1.status: Input should be" in failed.output


def test_export_v3_of_a_big_report_shares_its_results_out_to_processes_and_writes_what_a_whole_read_writes(
    kept, tmp_path, monkeypatch
):
    """``export -f pytorch-v3`` of a compressed report reads its first line and its digests' ids (not its
    summary), and its results in batches validated and encoded by other processes, forked or spawned: the text
    is byte for byte the whole read's, replicates counted, with a time stamp and a change given; the same in one
    process. A report kept any other way is read whole."""
    from orchestrator.report.export import fanout
    from tests.report_data import replay_report
    from tests.test_ranks import ranked_result

    path = tmp_path / "replicated.json.gz"
    whole = read(kept["gz"])
    first = whole.results[0]
    assert first.eager is not None
    device = first.eager.model_copy(update={"peak_memory_bytes": 3 * 10**9, "device_samples_ms": [0.5, 0.6]})
    gpu = {"experiment_id": "gpu000000000", "device": "cuda", "eager": device, "memory_ratio": 1.25}
    special = [first.model_copy(update=gpu), *replay_report().results, ranked_result(1, 1.5), ranked_result(2, 1.8)]
    some = [*special, *whole.results[:600]]  # ok and failed, GPU figures, replays, distributed runs
    again = [r.model_copy(update={"replicate": 1}) for r in whole.results[:7]]  # 7 experiments run twice
    report = make_report([*some, *again], name="replicated")
    write_report(report, path)
    change = {"repo": "pytorch/pytorch", "head_branch": "main", "head_sha": "f00d"}
    expected = export_text(read(path), "pytorch-v3", **change).encode()
    monkeypatch.setattr(fanout, "BATCH", 100)  # 7 batches, so that both processes take turns
    monkeypatch.setattr(fanout, "_LEAST_STORED", 1)  # a small report's compressed bytes: room for both
    monkeypatch.setattr(Report, "model_validate_json", lambda *a: pytest.fail("the summary read"))
    monkeypatch.setattr(fanout, "_start_method", lambda: "spawn")
    spread = fanout.v3_chunks(path, processes=2, **change)
    assert spread is not None and b"".join(spread) == expected
    here = fanout.v3_chunks(path, processes=1, **change)
    assert here is not None and b"".join(here) == expected
    monkeypatch.undo()
    if sys.platform == "linux":  # forked, from a fresh process: this one may run other threads (a Ray session's)
        forked = subprocess.run([sys.executable, "-c", _FORKED, str(path), json.dumps(change)], capture_output=True)
        assert forked.returncode == 0, forked.stderr.decode()[-2000:]
        assert forked.stdout == expected
    lines = expected.splitlines()[1:-1]
    twice = [json.loads(line.removesuffix(b",")) for line in lines]
    replicates = {
        r["benchmark"]["extra_info"]["experiment_id"]: r["benchmark"]["extra_info"]["replicates"] for r in twice
    }
    assert sum(n == "2" for n in replicates.values()) == 7 and set(replicates.values()) == {"1", "2"}
    assert fanout.v3_chunks(kept["plain"], processes=2) is None  # indented: read whole
    done = CliRunner().invoke(app, ["export", str(kept["plain"]), "-o", str(tmp_path / "plain.json")])
    assert done.exit_code == 0 and (tmp_path / "plain.json").read_text() == export_text(whole, "pytorch-v3")
    out = tmp_path / "v3.json"
    done = CliRunner().invoke(
        app, ["export", str(path), "-o", str(out), *(f"--{k.replace('_', '-')}={v}" for k, v in change.items())]
    )
    assert done.exit_code == 0, done.output
    assert out.read_bytes() == expected


# Forked, each batch's lines and records go through a shared block; where a batch's records or its lines do not fit
# in one, or no block can be mapped, through the pool's pipes: the same text each way.
_FORKED = """
import json, sys
from orchestrator.report.export import fanout
assert fanout._start_method() == "fork"
fanout.BATCH, fanout._LEAST_STORED = 100, 1
came = []
result = fanout._Batch.result
fanout._Batch.result = lambda self: came.append(type(self.future.result()).__name__) or result(self)
def made():
    came.clear()
    return b"".join(fanout.v3_chunks(sys.argv[1], processes=2, **json.loads(sys.argv[2])))
text = made()
assert set(came) == {"int"}, came  # every batch's records left in its block
fanout.BLOCK_BYTES = 400_000  # a batch's lines fit, its records (about 1 MB) do not, but the last one's
assert made() == text and came == ["bytes"] * 6 + ["int"], came
fanout.BLOCK_BYTES = 1000  # nor its lines
assert made() == text and set(came) == {"bytes"}, came
class Uncommitted:  # memory the system will not commit: no block at all
    @staticmethod
    def mmap(*args):
        raise OSError(12, "Cannot allocate memory")
fanout.BLOCK_BYTES, fanout.mmap = 32 * 2**20, Uncommitted
assert made() == text and set(came) == {"bytes"}, came
sys.stdout.buffer.write(text)
"""


def test_export_v3_of_a_big_report_names_a_result_that_does_not_validate_and_a_report_cut_short(
    kept, tmp_path, monkeypatch
):
    """A result found not to validate as the records are made is named as a whole read names it (exit 2, one
    line), and so is a report whose results end before its digests' count, and a process that dies making them;
    no file is left behind. A time stamp that is not ISO 8601 is an error before any piece."""
    from orchestrator.report.export import fanout

    monkeypatch.setattr(fanout, "BATCH", 50)  # 6 batches: two processes
    small = tmp_path / "small.json.gz"
    write_report(make_report(read(kept["gz"]).results[:300], name="small"), small)
    text = gzip.decompress(small.read_bytes())
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(text.replace(b'"status":"ok"', b'"status":"fine"', 3)))
    out = tmp_path / "v3.json"
    failed = CliRunner().invoke(app, ["export", str(bad), "-o", str(out)])
    assert failed.exit_code == 2 and "results.1.status: Input should be" in failed.output
    assert len(failed.output.strip().splitlines()) == 1 and not out.exists()
    with pytest.raises(ReportError, match=r"results\.1\.status"):
        b"".join(fanout.v3_chunks(bad, processes=2) or [])
    head, _, rest = text.partition(b'"results":[\n')
    short = tmp_path / "short.json.gz"  # the last 10 results cut out, the list closed
    kept_lines = rest.split(b"\n")[:290]
    short.write_bytes(gzip.compress(head + b'"results":[\n' + b"\n".join(kept_lines).removesuffix(b",") + b"\n]}\n"))
    cut = CliRunner().invoke(app, ["export", str(short)])
    assert cut.exit_code == 2 and f"{short}: its results are not those its digests list" in cut.output
    # a process that dies (here: as it starts) is one line too, not a traceback
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    def dying(processes, method):
        context = multiprocessing.get_context("spawn")
        return fanout._Encoders(ProcessPoolExecutor(1, mp_context=context, initializer=os._exit, initargs=(3,)), 1)

    monkeypatch.setattr(fanout, "_LEAST_STORED", 1)
    monkeypatch.setattr(fanout, "_encoders", dying)
    died = CliRunner().invoke(app, ["export", str(small), "-o", str(out)])
    assert died.exit_code == 2 and "a process making the records ended before its batch did" in died.output
    assert len(died.output.strip().splitlines()) == 1 and not out.exists()
    dated = tmp_path / "dated.json.gz"
    write_report(
        make_report(read(kept["gz"]).results[:5], name="dated").model_copy(update={"created_at": "soon"}), dated
    )
    with pytest.raises(ExportError, match="created_at"):
        fanout.v3_chunks(dated, processes=2)


def test_the_v3_export_reads_the_digests_ids_from_their_first_column_alone_and_whole_otherwise():
    """The ids are cut from the first column where the columns begin with it; an id holding ``]``, or columns in
    another order, are parsed whole, with the same ids; columns that are not JSON still fail."""
    from pydantic import ValidationError

    from orchestrator.report.export import fanout

    cases = [["a0", "b1"], ["a]0", 'b"]1', "c"], []]
    for ids in cases:
        columns = json.dumps({"experiment_id": ids, "replicate": [[0]] * len(ids)}, separators=(",", ":")).encode()
        assert fanout._ids(columns).experiment_id == ids
        turned = json.dumps({"replicate": [0] * len(ids), "experiment_id": ids}, separators=(",", ":")).encode()
        assert fanout._ids(turned).experiment_id == ids
    with pytest.raises(ValidationError):
        fanout._ids(b'{"experiment_id":["a",')


def test_the_v3_processes_are_forked_only_from_a_process_running_no_other_thread():
    """Forking copies every lock another thread holds, held: with a second thread running, the processes are
    spawned; alone on Linux, forked (each then has this process's modules imported)."""
    from orchestrator.report.export import fanout

    alone = threading.active_count() == 1
    assert fanout._start_method() == ("fork" if alone and sys.platform == "linux" else "spawn")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert fanout._start_method() == "spawn"
    finally:
        stop.set()
        other.join()


def test_what_the_csv_reads_of_a_result_is_declared_as_the_result_declares_it():
    """Each field of ``CsvResult`` and its parts has the type and default of the field of the same name in
    ``Result`` and its parts: the CSV of a result read as ``CsvResult`` is the CSV of the result."""
    from orchestrator.report.export.harness_csv import CsvMeasurement, CsvResult, CsvSide
    from tasks.models import Measurement, SideTiming

    parts = {"eager": CsvSide | None, "compiled": CsvSide | None, "measurement": CsvMeasurement | None}
    for part, whole in ((CsvResult, Result), (CsvSide, SideTiming), (CsvMeasurement, Measurement)):
        for name, field in part.model_fields.items():
            theirs = whole.model_fields[name]
            if part is CsvResult and name in parts:
                assert field.annotation == parts[name] and theirs.default is None is field.default
                continue
            assert (field.annotation, field.default, field.default_factory) == (
                theirs.annotation,
                theirs.default,
                theirs.default_factory,
            ), name


def test_a_results_models_share_their_classs_set_of_fields_and_behave_as_before():
    """Every part of a result shares one set of its class's field names (the largest part of a model's
    memory); assigning, copying and comparing behave as on any model."""
    a, b = make_result(seed=0), make_result(seed=1)
    a2 = Result.model_validate_json(a.model_dump_json())
    assert a2 == a and a2.eager is not None and b.eager is not None
    assert a2.__pydantic_fields_set__ is b.__pydantic_fields_set__ == set(Result.model_fields)
    assert a2.eager.__pydantic_fields_set__ is b.eager.__pydantic_fields_set__
    copy = a2.model_copy(update={"status": "oom"})
    a2.speedup = 9.0
    assert (copy.status, a2.status, a2.speedup, b.speedup) == ("oom", "ok", 9.0, make_result(seed=1).speedup)
    assert a2.__pydantic_fields_set__ == set(Result.model_fields)  # assigning a field adds nothing to it


def test_a_paged_table_marks_every_failed_status_regression_tie_and_slow_cell():
    """The paged table's marks are each cell's class (``_cell_class``), found without looking at every cell of
    the rows that hold none."""
    import orchestrator.report.page as page
    from orchestrator.report.cells import TIE_TEXT, Rows

    headers = ["target", "verdict", "note", "slow", "status"]
    cells = [
        ["a", "-", "-", "-", "ok"],
        ["b", "REGRESSION", "-", "-", "ok"],
        ["c", "-", TIE_TEXT, "-", "ok"],
        ["d", "-", "-", "slow", "ok"],
        ["e", "-", "-", "-", "crashed"],
        ["slow", "ok", "-", "-", "ok"],  # a cell "slow" outside the slow column, "ok" outside the status column
    ]
    rows = Rows("t", headers, [cells[i % len(cells)] for i in range(PAGE_ROWS * 3)], set())
    text = page.paged_table_html(rows)
    marks = json.loads(re.search(r'<script type="application/json">(.*?)</script>', text).group(1))["marks"]
    expected = {
        str(i): {
            str(j): cls for j, (h, c) in enumerate(zip(headers, row, strict=True)) if (cls := page._cell_class(h, c))
        }
        for i, row in enumerate(rows.rows)
    }
    assert marks == {i: m for i, m in expected.items() if m}
    assert {tuple(m.values()) for m in marks.values()} == {("bad",), ("tie",)} and len(marks) == PAGE_ROWS * 2
