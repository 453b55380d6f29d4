"""The documentation site: it builds strictly, its reference pages hold every spec field, CLI option and
report field the code has, a field added to the code appears without anyone writing it, and every
relative link of the README resolves."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer
from pydantic import BaseModel, Field

from orchestrator.cli import app
from orchestrator.plan.schema import spec_schema
from orchestrator.report.models import Report
from tasks.models import Experiment

ROOT = Path(__file__).resolve().parent.parent


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SITE_ENV = "COMPILEBENCH_SITE"  # a site ``mkdocs build --strict`` has just built: the README's test command sets it


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as CI builds it: ``mkdocs build --strict`` (a broken link, anchor or missing page fails).
    Where ``COMPILEBENCH_SITE`` names a folder (relative to the repository), the command that started the
    tests has just built it so (the README's test command: ``mkdocs build --strict && COMPILEBENCH_SITE=site
    pytest``), and that build is read rather than built again."""
    pytest.importorskip("mkdocs")
    built = os.environ.get(SITE_ENV)
    if built:
        path = ROOT / built
        assert (path / "index.html").is_file(), f"{SITE_ENV}={built}: no site there"
        return path
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _page_text(site: Path, page: str) -> str:
    """The visible text of a built page: tags dropped, entities decoded."""
    raw = (site / page / "index.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def _schema_names(node: Any) -> set[str]:
    """Every property name in a JSON Schema, recursively (``$defs``, ``anyOf``, ``items``, sweep paths)."""
    names: set[str] = set()
    if isinstance(node, dict):
        names |= set(node.get("properties", {}))
        for value in node.values():
            names |= _schema_names(value)
    elif isinstance(node, list):
        for value in node:
            names |= _schema_names(value)
    return names


def test_site_builds_and_fills_every_marker(site: Path) -> None:
    for page in ("spec", "cli", "report-fields"):
        assert "reference:" not in (site / page / "index.html").read_text()


def test_spec_page_holds_every_field_of_the_schema(site: Path) -> None:
    text = _page_text(site, "spec")
    schema = spec_schema()
    names = _schema_names(schema)
    assert {"name", "defaults", "experiments", "sweep", "gpu_models", "backend", "compile.mode"} <= names
    missing = sorted(n for n in names if n not in text)
    assert not missing, f"spec fields missing from the spec page: {missing}"
    # nested fields under their dotted paths, with allowed values and defaults
    for path in ("compile.backend", "timing.warmup", "check.rtol", "resources.gpus", "sweep.compile.mode"):
        assert path in text, path
    assert "amp_bf16" in text and "module_compile" in text and '"inductor"' in text


def test_cli_page_holds_every_command_and_option(site: Path) -> None:
    text = _page_text(site, "cli")
    command = typer.main.get_command(app)
    assert set(command.commands) >= {"run", "validate", "tasks", "report", "compare", "history", "schema"}
    for name, sub in command.commands.items():
        assert f"compilebench {name}" in text, name
        for param in sub.params:
            if param.param_type_name == "argument":
                assert param.name.upper() in text, (name, param.name)
            for opt in [*param.opts, *param.secondary_opts]:
                assert opt in text, (name, opt)
            if getattr(param, "help", None):
                assert " ".join(param.help.split())[:40] in text, (name, param.name)


def test_report_page_holds_every_field_of_the_report_models(site: Path) -> None:
    text = _page_text(site, "report-fields")
    models = _hook()._models(Report)
    names = {model.__name__ for model in models}
    assert {"Report", "Result", "Summary", "Measurement", "WorkerInfo", "Environment"} <= names
    for model in models:
        assert model.__name__ in text
        for field in model.model_fields:
            assert field in text, (model.__name__, field)
    # a field documented by a source comment only carries that comment
    assert "one entry per calibrated worker's device" in text


class _Knobs(BaseModel):
    turbo_level: int = Field(3, ge=0, description="how turbo the sentinel runs")


class _ExperimentWithNewField(Experiment):
    sentinel_knob: int = Field(7, description="a field added to the spec")
    sentinel_mode: str = Field("quiet", json_schema_extra={"enum": ["quiet", "loud"]}, description="chosen")
    knobs: _Knobs = Field(default_factory=_Knobs, description="nested knobs")


def test_a_field_added_to_the_spec_models_appears_in_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.plan.schema

    before = _hook().spec_reference()
    assert "sentinel_knob" not in before
    monkeypatch.setattr(orchestrator.plan.schema, "Experiment", _ExperimentWithNewField)
    after = _hook().spec_reference()
    assert "| `sentinel_knob` | integer | `7` | - | a field added to the spec |" in after
    assert "`loud`" in after
    assert "### knobs {#knobs}" in after
    assert "| `knobs.turbo_level` | integer | `3` | >= 0 | how turbo the sentinel runs |" in after
    assert "`sweep.knobs.turbo_level`" in after and "`defaults.sentinel_knob`" in after


def test_a_field_added_to_the_report_models_appears_in_the_reference() -> None:
    class Extra(BaseModel):
        gauge: float = 1.5  # the sentinel's gauge, in furlongs

    class ReportWithNewField(Report):
        sentinel_extra: Extra | None = None  # documented by its comment

    text = _hook().report_reference(ReportWithNewField)
    assert "| `sentinel_extra` | [Extra](#extra) or null | `null` | documented by its comment |" in text
    assert "## Extra {#extra}" in text
    assert "| `gauge` | number | `1.5` | the sentinel's gauge, in furlongs |" in text
    assert "## Result {#result}" in text


def test_an_option_added_to_the_cli_appears_in_the_reference() -> None:
    extra = typer.Typer()

    @extra.command()
    def probe(
        target: str = typer.Argument(..., help="What to probe."),
        depth: int = typer.Option(2, "--depth", "-d", help="How deep to probe.", min=1),
    ) -> None:
        """Probe a target."""

    @extra.command()
    def other() -> None:
        """Another command."""

    text = _hook().cli_reference(typer.main.get_command(extra))
    assert "## compilebench probe {#probe}" in text
    assert "`TARGET`" in text and "What to probe." in text
    assert "`-d, --depth <int range>`" in text and "How deep to probe." in text and "default: 2" in text


def _github_slug(heading: str) -> str:
    """A heading's anchor as GitHub renders it: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(markdown: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", markdown.read_text(), flags=re.S)
    return {_github_slug(m) for m in re.findall(r"^#+ (.+?)(?: \{#[^}]*\})?$", text, flags=re.M)} | set(
        re.findall(r"\{#([\w-]+)\}", text)
    )


def test_every_relative_link_of_the_readme_resolves() -> None:
    readme = ROOT / "README.md"
    text = re.sub(r"```.*?```", "", readme.read_text(), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+://|mailto:", link)]
    assert any(link.startswith("docs/") for link in relative), "the README links into the documentation"
    for link in relative:
        path, _, anchor = link.partition("#")
        target = (ROOT / path) if path else readme
        assert target.exists(), f"README links to {link}: no such file"
        if anchor:
            assert target.suffix == ".md", link
            assert anchor in _anchors(target), f"README links to {link}: no such heading"


def _bash_blocks(markdown: Path) -> list[str]:
    """The ```bash blocks of ``markdown``, each without its surrounding blank space."""
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", markdown.read_text(), flags=re.S)]


def test_readme_keeps_the_two_set_up_commands_first() -> None:
    blocks = _bash_blocks(ROOT / "README.md")
    assert blocks[0] == (
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 uv "
        "&& uv pip install --compile-bytecode -e . && compilebench run examples/seed.yaml --out seed-report.json"
    )
    ci = (ROOT / ".ci" / "run").read_text()
    assert blocks[1] in ci.splitlines(), "CI runs the README's test command"
    shown = _bash_blocks(ROOT / "docs" / "getting-started.md")
    assert blocks[0] in shown and blocks[1] in shown, "getting-started shows both as they are"
    assert "mkdocs build --strict" in blocks[1]
    # pip takes torch from the machine's pip configuration (a local CPU build here); uv, which does not read it,
    # installs the rest and keeps that torch; neither compiles bytecode: the suite writes that of what it imports
    # (tests/conftest.py)
    assert "pip install --no-compile torch==2.13.0 uv && uv pip install -e '.[dev,docs]'" in blocks[1]
    assert f"mkdocs build --strict && {SITE_ENV}=site pytest" in blocks[1]  # the tests read that build
