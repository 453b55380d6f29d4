"""The JSON Schema of a spec file, from the pydantic models, for editors and validators.

``compilebench schema > compilebench.schema.json``; a spec's first line
``# yaml-language-server: $schema=compilebench.schema.json`` then gives completion, hover help
and checks in VS Code's YAML extension. The schema checks structure and types; what needs torch
or the target library (known backends and modes, a target's params) is checked by
``compilebench validate``. Needs neither torch nor Ray.
"""

from __future__ import annotations

import copy
from typing import Any

from tasks.experiment import Experiment

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

SWEEP_DESCRIPTION = (
    "Dotted field paths mapped to lists of values; the entry expands into their cartesian product "
    "(e.g. compile.mode: [default, max-autotune]). Below params and compile.options any key is accepted."
)
GPU_MODELS_DESCRIPTION = (
    "GPU models to run on (nodes' accelerator_type, e.g. [A100, H100]), or 'all' for every model in the "
    "cluster: one experiment per model."
)

# What an editor offers for ``distributed`` (``examples/distributed_mixed.yaml`` sweeps the world size).
DISTRIBUTED_EXAMPLES = [
    {"strategy": "ddp", "world_size": 2},
    {"strategy": "ddp", "world_size": 2, "optimize_ddp": "python_reducer", "compiled_autograd": True},
    {"strategy": "fsdp2", "world_size": 4, "compile_per": "block", "reshard_after_forward": True},
]

# The top level of a spec file (orchestrator.plan.spec.SpecFile), with the help an editor shows.
TOP_LEVEL: dict[str, dict[str, Any]] = {
    "name": {"type": "string", "description": "The sweep's name: the report's title."},
    "description": {"type": ["string", "null"], "description": "What the sweep is for; free text."},
    "defaults": {
        "$ref": "#/$defs/Defaults",
        "description": "Fields every experiment gets; an experiment's own values win, nested mappings merge "
        "key by key.",
    },
    "experiments": {
        "type": "array",
        "minItems": 1,
        "items": {"$ref": "#/$defs/ExperimentEntry"},
        "description": "Experiment entries; each may carry a sweep and gpu_models that expand it.",
    },
}


def spec_schema() -> dict[str, Any]:
    """The spec file's JSON Schema (draft 2020-12).

    An experiment entry has every ``Experiment`` field plus ``sweep`` and ``gpu_models``; ``target``
    is required in each entry unless ``defaults`` gives it.
    """
    experiment = Experiment.model_json_schema(ref_template="#/$defs/{model}")
    defs: dict[str, Any] = experiment.pop("$defs", {})
    fields: dict[str, Any] = experiment["properties"]
    gpu_models = {
        "description": GPU_MODELS_DESCRIPTION,
        "anyOf": [{"type": "array", "items": {"type": "string"}, "minItems": 1}, {"const": "all"}],
    }
    if "DistributedConfig" in defs:
        defs["DistributedConfig"]["examples"] = DISTRIBUTED_EXAMPLES
    defs["ExperimentEntry"] = {
        "title": "Experiment",
        "description": experiment.get("description", ""),
        "type": "object",
        "properties": {**fields, "sweep": _sweep(fields, defs), "gpu_models": gpu_models},
        "additionalProperties": False,
    }
    defs["Defaults"] = {
        "title": "Defaults",
        "description": "Any experiment field, applied to every experiment.",
        "type": "object",
        "properties": copy.deepcopy(fields),
        "additionalProperties": False,
    }
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "compilebench spec",
        "description": "Experiments to run: targets, their params and torch.compile configurations.",
        "type": "object",
        "properties": TOP_LEVEL,
        "required": ["name", "experiments"],
        "additionalProperties": False,
        # without a target in defaults, every experiment names its own
        "if": {"properties": {"defaults": {"not": {"required": ["target"]}}}},
        "then": {"properties": {"experiments": {"items": {"required": ["target"]}}}},
        "$defs": defs,
    }


def _sweep(fields: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Every field path an entry can sweep, each a non-empty list of that field's values."""
    paths: dict[str, Any] = {}
    free: list[str] = []
    for path, field in _paths(fields, defs, ""):
        paths[path] = {"type": "array", "minItems": 1, "items": field, "description": field.get("description", "")}
        if _is_mapping(field):
            free.append(path)
    return {
        "description": SWEEP_DESCRIPTION,
        "type": "object",
        "properties": paths,
        "patternProperties": {
            f"^{p.replace('.', '[.]')}[.][^.]+([.][^.]+)*$": {"type": "array", "minItems": 1} for p in free
        },
        "additionalProperties": False,
    }


def _paths(fields: dict[str, Any], defs: dict[str, Any], prefix: str) -> list[tuple[str, Any]]:
    out = []
    for name, field in fields.items():
        path = prefix + name
        out.append((path, field))
        refs = [f["$ref"] for f in [field, *field.get("anyOf", [])] if "$ref" in f]  # a model, or an optional one
        ref = refs[0] if len(refs) == 1 else ""
        nested = defs.get(ref.rsplit("/", 1)[-1], {}) if ref else {}
        if "properties" in nested:
            out += _paths(nested["properties"], defs, path + ".")
    return out


def _is_mapping(field: dict[str, Any]) -> bool:
    return field.get("type") == "object" and "$ref" not in field
