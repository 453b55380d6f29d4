"""The report side needs neither Ray nor torch: `--help`, `report`, `compare`, `export` and `schema` run with both
hidden."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.report import write_report
from tests.report_data import make_report, make_result, mixed_report

ROOT = Path(__file__).resolve().parents[1]

# Runs the CLI with a meta-path finder that refuses to import ray or torch, as on a laptop without them.
HIDDEN = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('ray', 'torch'):
            raise ImportError(f'{name} is hidden in this test')
        return None
sys.meta_path.insert(0, Hide())
sys.argv = ['compilebench', *sys.argv[1:]]
from orchestrator.cli import main
main()
"""


def cli_without_ray_or_torch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDDEN, *args], capture_output=True, text=True, cwd=cwd, timeout=300, env=_env()
    )


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("reports")
    write_report(mixed_report(), folder / "base.json")
    slower = make_report([make_result("seed.foo3", 1.0, gpu="A100", compiled_ms=1.3, params={"shape": [256, 256]})])
    write_report(slower, folder / "new.json")
    (folder / "run.journal.jsonl").write_text(make_result("a").model_dump_json() + "\n")
    return folder


def test_the_hiding_works(reports):
    proc = subprocess.run(
        [sys.executable, "-c", HIDDEN.replace("from orchestrator.cli import main\nmain()", "import torch")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "torch is hidden in this test" in proc.stderr


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["--help"], 0, "compare"),
        (["report", "base.json"], 0, "best configuration per group"),
        (["report", "base.json", "--format", "markdown"], 0, "# mixed"),
        (["report", "base.json", "--format", "csv"], 0, "experiment_id,target"),
        (["report", "run.journal.jsonl"], 0, "INCOMPLETE"),
        (["report", "base.json", "--html", "page.html"], 0, "best configuration per group"),
        (["compare", "base.json", "new.json"], 1, "REGRESSION"),
        (["compare", "base.json", "base.json"], 0, "no regressions"),
        (["schema"], 0, '"title": "compilebench spec"'),
        (["export", "base.json"], 0, '"schema_version":"v3"'),
        (["export", "base.json", "--format", "csv"], 0, "dev,name,batch_size,speedup,abs_latency"),
    ],
)
def test_report_compare_and_schema_need_neither_ray_nor_torch(reports, args, code, expected):
    proc = cli_without_ray_or_torch(*args, cwd=reports)
    assert proc.returncode == code, proc.stderr
    assert expected in proc.stdout
    assert "hidden in this test" not in proc.stderr


def test_the_html_page_was_written_without_torch(reports):
    cli_without_ray_or_torch("report", "base.json", "--html", "page2.html", cwd=reports)
    assert (reports / "page2.html").read_text().startswith("<!DOCTYPE html>")


def test_importing_the_report_package_loads_no_ray_or_torch():
    code = (
        "import sys\n"
        "import orchestrator.report, orchestrator.report.compare, orchestrator.report.html, orchestrator.plan.schema\n"
        "import orchestrator.report.progress, orchestrator.report.export\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
