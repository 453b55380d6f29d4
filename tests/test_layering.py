"""What each side may import: the worker side and spec loading need no Ray; the quick commands
(``--help``, ``tasks``, the report readers) need neither torch nor Ray; ``validate`` needs no Ray.

Each case runs the real CLI in a fresh process and reads, at its exit, which of torch and Ray
it had imported. (``tests/test_report_layering.py`` also runs the report commands with both hidden.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "tests" / "data" / "seed-v1.json"

# Runs each command line given as a JSON list of argument lists, then prints which heavy modules were imported.
CLI = """
import json, sys
from orchestrator.cli import app
for args in json.loads(sys.argv[1]):
    try:
        app(args, prog_name="compilebench")
    except SystemExit as e:
        if e.code not in (0, None):
            raise SystemExit(f"{args}: exit {e.code}")
print(json.dumps({m: m in sys.modules for m in ("torch", "ray")}), file=sys.stderr)
"""


def imported_by(*command_lines: list[str]) -> dict[str, bool]:
    proc = subprocess.run(
        [sys.executable, "-c", CLI, json.dumps(list(command_lines))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stderr.strip().splitlines()[-1])


def test_tasks_and_spec_loading_do_not_import_ray():
    code = (
        "import sys\n"
        "import orchestrator.spec, tasks.procedure, tasks.stats, tasks.metadata\n"
        "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_help_of_every_command_imports_neither_torch_nor_ray():
    from orchestrator.cli import app

    commands = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert {"run", "validate", "tasks"} <= set(commands)
    lines = [["--help"]] + [[name, "--help"] for name in commands]
    assert imported_by(*lines) == {"torch": False, "ray": False}


def test_listing_targets_imports_neither_torch_nor_ray():
    assert imported_by(["tasks"]) == {"torch": False, "ray": False}


def test_reading_a_report_imports_neither_torch_nor_ray():
    from orchestrator.cli import app

    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    if "report" not in names:
        pytest.skip("no report command")
    lines = [["report", str(REPORT)], ["report", str(REPORT), "--format", "markdown"]]
    if "compare" in names:
        lines.append(["compare", str(REPORT), str(REPORT)])
    assert imported_by(*lines) == {"torch": False, "ray": False}


def test_validate_pays_for_torch_but_never_for_ray():
    assert imported_by(["validate", str(ROOT / "examples" / "seed.yaml")]) == {"torch": True, "ray": False}


def test_the_scheduling_policy_and_its_nodes_need_no_ray():
    code = (
        "import sys\n"
        "import orchestrator.policy, orchestrator.nodes\n"
        "from orchestrator.report.models import Node\n"
        "assert Node is orchestrator.nodes.Node\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
