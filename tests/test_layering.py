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
        "import orchestrator.plan.spec, tasks.procedure, tasks.stats, tasks.metadata\n"
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
    assert {"report", "compare"} <= names, "a command this test checks is gone"
    lines = [
        ["report", str(REPORT)],
        ["report", str(REPORT), "--format", "markdown"],
        ["compare", str(REPORT), str(REPORT)],
    ]
    assert imported_by(*lines) == {"torch": False, "ray": False}


def test_validate_of_the_shipped_backends_and_modes_imports_neither_torch_nor_ray():
    assert imported_by(["validate", str(ROOT / "examples" / "seed.yaml")]) == {"torch": False, "ray": False}


def test_validate_pays_for_torch_only_for_a_name_torch_must_confirm(write_spec):
    spec = write_spec(
        "name: x\nexperiments:\n  - target: seed.foo\n    compile: {backend: aot_eager_decomp_partition}\n"
    )
    assert imported_by(["validate", str(spec)]) == {"torch": True, "ray": False}


def test_the_scheduling_policy_and_its_nodes_need_no_ray():
    code = (
        "import sys\n"
        "import orchestrator.execution.policy, orchestrator.machines.nodes\n"
        "from orchestrator.report.models import Node\n"
        "assert Node is orchestrator.machines.nodes.Node\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_a_worker_process_imports_its_actor_and_nothing_of_the_scheduler():
    """Ray imports, in each worker process, the module its actor's class is defined in: ``actors`` reaches,
    of the driver side, only what an actor finds where Ray put it (``events``), not the policy, the pool, the
    cluster's description or the runner."""
    graph = project_graph()
    reached: set[str] = set()
    todo = ["orchestrator.execution.actors"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += graph[name]
    driver = {name for name in reached if name.startswith("orchestrator.")}
    assert driver == {"orchestrator.execution.actors", "orchestrator.execution.events"}, sorted(driver)


# ------------------------------------------------------------------ the worker side's import graph


def import_graph(*packages: str) -> dict[str, set[str]]:
    """Which modules of ``packages`` each of their modules imports, from its source: every import, those inside
    functions and under ``TYPE_CHECKING`` included (an import deferred to run time is still a circle)."""
    import ast

    paths = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for package in packages
        for p in (ROOT / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                found |= {base, *(f"{base}.{a.name}" for a in node.names)}
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle a depth-first walk meets, each as the path that closes it."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                found.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return found


def project_graph() -> dict[str, set[str]]:
    """The import graph of every package and script folder of the project, as one graph: an arrow from a
    benchmark into the report and back would be a circle too."""
    return import_graph("orchestrator", "tasks", "benchmarks", "scripts")


def test_the_project_has_no_import_circle():
    graph = project_graph()
    assert {"orchestrator.cli", "orchestrator.report.render", "tasks.procedure"} <= set(graph)
    assert circles(graph) == []


def test_the_worker_side_imports_nothing_of_the_driver():
    graph = project_graph()
    assert (
        sorted(
            f"{m} -> {d}"
            for m, deps in graph.items()
            if m.startswith("tasks")
            for d in deps
            if not d.startswith("tasks")
        )
        == []
    )


def test_the_circle_check_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_the_worker_side_reads_like_its_flow():
    """The steps of one experiment each have a module, and the data models import nothing of their side:
    the experiment only their base (``lean``) and its identity (``ids``), both of which import nothing, the result
    only the experiment and the base, their re-export only those three."""
    graph = import_graph("tasks")
    steps = {"worker", "reset", "failures", "procedure", "compiling", "sides", "check.outputs", "check.judge"}
    assert {f"tasks.{s}" for s in steps | {"check.step", "experiment", "result"}} <= set(graph)
    assert graph["tasks.lean"] == set() and graph["tasks.ids"] == set()
    assert graph["tasks.experiment"] == {"tasks.lean", "tasks.ids"}
    assert graph["tasks.result"] <= {"tasks.experiment", "tasks.lean"} and "tasks.experiment" in graph["tasks.result"]
    assert graph.get("tasks.models", set()) <= {"tasks.experiment", "tasks.result", "tasks.lean"}
    assert "tasks.procedure" not in graph["tasks.sides"] | graph["tasks.compiling"]


# ------------------------------------------------------------------ the driver's floors (docs/layout.md)

# What each stage of the driver may import of ``orchestrator`` (besides itself; ``tasks`` is open to all):
# the path a spec takes, read from the bottom up. The entry points (api, cli) may import every stage.
DRIVER_FLOORS: dict[str, set[str]] = {
    "machines": set(),  # nodes, the environment, calibration: plain data both sides share
    "store": set(),  # locations, the journal, traces: the lowest floor
    "plan": {"store", "machines"},  # checked before anything runs
    "execution": {"plan", "store", "machines"},  # on the cluster; never the report
    "report": {"plan", "store", "machines"},  # reads what was kept; never the execution side
}
ENTRY_POINTS = {
    "orchestrator",
    "orchestrator.__main__",
    "orchestrator.api",
    "orchestrator.cli",
    "orchestrator.cli.common",
    "orchestrator.cli.running",
    "orchestrator.cli.reading",
}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "orchestrator" and parts[1] in DRIVER_FLOORS else None


def floor_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Every driver module outside the stages and entry points, and every import that runs to a stage
    its own may not import, as ``module -> imported``."""
    loose = [f"{m}: outside the stages" for m in graph if _stage(m) is None and m not in ENTRY_POINTS]
    arrows = [
        f"{m} -> {d}"
        for m, deps in graph.items()
        if (stage := _stage(m)) is not None
        for d in deps
        if d.startswith("orchestrator") and (other := _stage(d)) != stage and other not in DRIVER_FLOORS[stage]
    ]
    return sorted(loose + arrows)


def test_the_driver_is_grouped_by_its_flow():
    """Every driver module is an entry point or lives in one stage's folder, and each stage imports only the
    stages below it: no arrow from the execution side into the report, none from the report into execution."""
    assert floor_crossings(import_graph("orchestrator")) == []


def test_the_floor_check_finds_crossings_and_loose_modules():
    graph = {
        "orchestrator.cli": {"orchestrator.report.render", "orchestrator.execution.runner"},
        "orchestrator.execution.runner": {"orchestrator.report.models", "orchestrator.store.journal"},
        "orchestrator.report.models": {"orchestrator.machines.nodes", "orchestrator.api"},
        "orchestrator.store.journal": set(),
        "orchestrator.helpers": set(),
    }
    assert floor_crossings(graph) == [
        "orchestrator.execution.runner -> orchestrator.report.models",
        "orchestrator.helpers: outside the stages",
        "orchestrator.report.models -> orchestrator.api",
    ]


# The report package's modules in the order of its docstring: each imports only modules before it.
REPORT_ORDER = [
    "models", "cells", "decision", "summary", "digest", "points", "io", "skim", "replay", "ranks", "views",
    "render", "page", "charts", "html", "compile_phases", "compare.models", "compare.noise", "compare.verdicts",
    "compare.gate", "compare.aa", "compare.render", "compare", "changepoints", "history",
    "history_html", "progress", "export.mapping", "export.strings", "export.pytorch_v3", "export.harness_csv",
    "export.fanout", "export",
]  # fmt: skip


def test_the_report_package_imports_one_way():
    graph = import_graph("orchestrator")
    names = [f"orchestrator.report.{m}" for m in REPORT_ORDER]
    package = {m for m in graph if m.startswith("orchestrator.report.")}
    assert package == set(names), "a report module is missing from REPORT_ORDER, or listed and gone"
    backwards = [
        f"{m} -> {d}" for i, m in enumerate(names) for d in sorted(graph[m]) if d in package and names.index(d) >= i
    ]
    assert backwards == []
