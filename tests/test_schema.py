"""The spec file's JSON Schema: printed by `compilebench schema`, true to the models, and every example passes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.plan.schema import spec_schema
from orchestrator.plan.spec import SpecFile
from tasks.models import CheckConfig, CompileConfig, Experiment, Resources, TimingConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.y*ml")) + sorted((ROOT / "examples").glob("*.json"))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(validator, spec) -> list[str]:
    return [e.message for e in validator.iter_errors(spec)]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates(validator, path):
    assert errors(validator, yaml.safe_load(path.read_text())) == []


def test_examples_exist():
    assert len(EXAMPLES) >= 2


def test_the_top_level_is_the_spec_files():
    assert set(spec_schema()["properties"]) == set(SpecFile.model_fields)


def test_every_spec_field_has_a_description():
    schema = spec_schema()
    for model in (Experiment, CompileConfig, TimingConfig, CheckConfig, Resources):
        properties = schema["$defs"]["ExperimentEntry"]["properties"] if model is Experiment else None
        if properties is None:
            properties = schema["$defs"][model.__name__]["properties"]
        missing = [name for name in model.model_fields if not properties[name].get("description")]
        assert missing == [], f"{model.__name__}: {missing}"


def test_structural_mistakes_are_caught(validator):
    assert errors(validator, {"name": "x", "experiments": [{"params": {}}]}) == ["'target' is a required property"]
    assert errors(validator, {"name": "x", "experiments": []}) == ["[] should be non-empty"]
    (typo,) = errors(validator, {"name": "x", "experiments": [{"target": "a", "compile": {"fulgraph": True}}]})
    assert "'fulgraph' was unexpected" in typo
    (sweep,) = errors(validator, {"name": "x", "experiments": [{"target": "a", "sweep": {"compile.mod": ["x"]}}]})
    assert "compile.mod" in sweep
    (device,) = errors(validator, {"name": "x", "experiments": [{"target": "a", "device": "tpu"}]})
    assert "'tpu' is not one of" in device


def test_what_the_loader_accepts_the_schema_accepts(validator):
    spec = {
        "name": "x",
        "defaults": {"target": "seed.foo", "timing": {"warmup": 1}},
        "experiments": [
            {"sweep": {"params.shape": [[8], [16]], "compile.options.max_autotune": [True], "seed": [1, 2]}},
            {"target": "seed.foo3", "gpu_models": ["A100", "H100"]},
            {"target": "seed.foo3", "gpu_models": "all", "compile": {"mode": "default"}},
        ],
    }
    assert errors(validator, spec) == []
