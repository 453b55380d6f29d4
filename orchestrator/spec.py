"""Reading a spec file into validated experiments, or one clear line saying what is wrong.

A spec is YAML (safe loader) or JSON::

    name: seed-tutorial
    defaults: {device: auto, timing: {warmup: 3, repeats: 10}}
    experiments:
      - target: seed.foo3
        params: {shape: [4096, 4096]}
        sweep: {compile.mode: [default, max-autotune-no-cudagraphs]}

``defaults`` fills every experiment (an experiment's own values win, nested mappings
merge key by key); ``sweep`` maps dotted field paths to lists and the entry expands into
their cartesian product. Every error is a ``SpecError`` whose message names the file,
the field path and the problem.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.sweep import check_path, deep_merge, expand
from tasks.models import Experiment
from tasks.targets import TargetError, check_params


class SpecError(ValueError):
    """A spec that cannot be run; the message is one line meant for the user."""


class SpecFile(BaseModel):
    """The top level of a spec file; experiment entries are checked one by one after it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    defaults: dict[str, Any] = Field(default_factory=dict)
    experiments: list[dict[str, Any]] = Field(min_length=1)


@dataclass(frozen=True)
class Spec:
    name: str
    source: dict[str, Any]  # the file's content, as loaded
    experiments: list[Experiment]


def load_spec(path: str | Path) -> Spec:
    """Read, validate and expand a spec file. Raises ``SpecError``; starts nothing."""
    path = Path(path)
    raw = _read(path)
    where = path.name
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise SpecError(f"{where}: a spec is a mapping with 'name' and 'experiments', got {got}")
    try:
        top = SpecFile.model_validate(raw)
    except ValidationError as e:
        raise SpecError(f"{where}: {_describe(e, (), SpecFile)}") from None
    _check_defaults(where, top.defaults)

    experiments: list[Experiment] = []
    seen: dict[str, str] = {}
    for i, entry in enumerate(top.experiments):
        label = f"experiments[{i}]"
        entry = dict(entry)
        sweep = _check_sweep(f"{where}: {label}.sweep", entry.pop("sweep", {}))
        merged = deep_merge(top.defaults, entry)
        for point, data in expand(merged, sweep):
            exp = _validate_experiment(where, label, data, point)
            origin = label + (f" ({_point_text(point)})" if point else "")
            if exp.id in seen:
                raise SpecError(f"{where}: {origin}: same experiment as {seen[exp.id]} (id {exp.id})")
            seen[exp.id] = origin
            experiments.append(exp)
    return Spec(top.name, top.model_dump(mode="json", exclude_none=True), experiments)


def _read(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"cannot read spec {path}: {e.strerror or e}") from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path.name}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{path.name}: malformed YAML{at}: {problem}") from None


def _check_defaults(where: str, defaults: dict[str, Any]) -> None:
    probe = {"target": "seed.foo", **defaults}
    try:
        exp = Experiment.model_validate(probe)
    except ValidationError as e:
        raise SpecError(f"{where}: {_describe(e, ('defaults',), Experiment)}") from None
    problem = _semantic_problem(exp, check_target="target" in defaults)
    if problem:
        raise SpecError(f"{where}: {_join(('defaults', *problem[0]))}: {problem[1]}")


def _check_sweep(where: str, sweep: Any) -> dict[str, list[Any]]:
    if not isinstance(sweep, dict):
        raise SpecError(f"{where}: must map field paths to lists of values, got {type(sweep).__name__}")
    for path, values in sweep.items():
        problem = check_path(str(path))
        if problem:
            raise SpecError(f"{where}.{path}: {problem}")
        if not isinstance(values, list):
            raise SpecError(f"{where}.{path}: must be a list of values, got {type(values).__name__}")
        if not values:
            raise SpecError(f"{where}.{path}: empty list (a sweep needs at least one value)")
    return sweep


def _validate_experiment(where: str, label: str, data: dict[str, Any], point: dict[str, Any]) -> Experiment:
    at_point = f" (at sweep point {_point_text(point)})" if point else ""
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as e:
        prefix = _sweep_prefix(tuple(e.errors()[0]["loc"]), point, label)
        in_sweep = prefix[-1] != label
        described = _describe(e, prefix, Experiment, point=in_sweep)
        raise SpecError(f"{where}: {described}{'' if in_sweep else at_point}") from None
    problem = _semantic_problem(exp)
    if problem:
        loc, message = problem
        prefix = _sweep_prefix(loc, point, label)
        if prefix[-1] != label:
            raise SpecError(f"{where}: {_join(prefix)}: {message}")
        raise SpecError(f"{where}: {_join((label, *loc))}: {message}{at_point}")
    return exp


def _sweep_prefix(loc: tuple[Any, ...], point: dict[str, Any], label: str) -> tuple[Any, ...]:
    """Errors inside a swept field point at the sweep value (``experiments[3].sweep.compile.mode``)."""
    dotted = ".".join(str(p) for p in loc)
    for path in point:
        if dotted == path or dotted.startswith(path + "."):
            return (label, "sweep", path)
    return (label,)


def _semantic_problem(exp: Experiment, check_target: bool = True) -> tuple[tuple[str, ...], str] | None:
    """Checks that need torch or the target library: backend, mode, target, params."""
    cfg = exp.compile
    backends = _backends()
    if cfg.backend not in backends:
        return ("compile", "backend"), f"unknown backend '{cfg.backend}' (known: {', '.join(backends)})"
    if cfg.mode is not None and cfg.mode not in _modes():
        return ("compile", "mode"), f"unknown mode '{cfg.mode}' (known: {', '.join(_modes())})"
    if cfg.mode is not None and cfg.options:
        return ("compile", "options"), "cannot be combined with compile.mode (torch.compile takes one or the other)"
    if exp.device == "cpu" and exp.resources.gpus:
        return ("resources", "gpus"), "a 'cpu' experiment reserves no GPU"
    if exp.device == "cuda" and exp.resources.gpus == 0:
        return ("resources", "gpus"), "a 'cuda' experiment needs at least one GPU"
    if check_target:
        try:
            check_params(exp.target, exp.params)
        except TargetError as e:
            field = "params" if "argument" in str(e) else "target"
            return (field,), str(e)
    return None


@functools.cache
def _backends() -> tuple[str, ...]:
    import torch._dynamo

    return tuple(torch._dynamo.list_backends(exclude_tags=()))


@functools.cache
def _modes() -> tuple[str, ...]:
    import torch._inductor

    return tuple(torch._inductor.list_mode_options())


def _describe(e: ValidationError, prefix: tuple[Any, ...], model: type[BaseModel], point: bool = False) -> str:
    """The first pydantic error as ``path: problem``; with ``point`` the prefix already is the path."""
    err = e.errors()[0]
    loc = tuple(err["loc"])
    path = _join(prefix if point else (*prefix, *loc))
    if err["type"] == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1])
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"{_join((*prefix, *loc))}: unknown field{hint}"
    if err["type"] == "missing":
        return f"{path}: required field missing"
    got = err.get("input")
    shown = f" (got {got!r})" if not isinstance(got, dict | list) else ""
    return f"{path}: {err['msg'][0].lower()}{err['msg'][1:]}{shown}"


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        current = field.annotation if field else None
    return list(getattr(current, "model_fields", {}))


def _join(parts: tuple[Any, ...]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "spec"


def _point_text(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in point.items())
