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

import difflib
import functools
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.plan.sweep import check_path, deep_merge, expand, with_parts
from tasks.experiment import Experiment
from tasks.heap import collector_paused
from tasks.targets import TargetError, check_params, params_of, resolve
from tasks.text import error_line

ALL_GPU_MODELS = "all"  # gpu_models: all; expanded to the cluster's models once connected (api.run)


TIMING_SPELLINGS = (("warmup", "warmup_ms"), ("repeats", "repeats_ms"))  # a count, or a time budget


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
    """Read, validate and expand a spec file. Raises ``SpecError``; starts nothing.

    Python's cyclic garbage collector is paused meanwhile: expanding builds many small objects and
    no cycles, and the collector would walk every experiment built so far again and again (a third
    of the time of 20,000 experiments, more of 100,000)."""
    with collector_paused():
        return _load_spec(Path(path))


def _load_spec(path: Path) -> Spec:
    raw = _read(path)
    where = path.name
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise SpecError(f"{where}: a spec is a mapping with 'name' and 'experiments', got {got}")
    try:
        top = SpecFile.model_validate(raw)
    except ValidationError as e:
        raise SpecError(f"{where}: {_describe(e, (), SpecFile)}") from None
    defaults = dict(top.defaults)
    default_models = _gpu_models(f"{where}: defaults", defaults.pop("gpu_models", None), defaults)
    _check_defaults(where, defaults)

    experiments: list[Experiment] = []
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    _PARAMS_CHECKED.clear()  # a target's module may have changed since the last spec was loaded
    for i, entry in enumerate(top.experiments):
        label = f"experiments[{i}]"
        entry = dict(entry)
        sweep = _check_sweep(f"{where}: {label}.sweep", entry.pop("sweep", {}))
        models = _gpu_models(f"{where}: {label}", entry.pop("gpu_models", None), entry, sweep) or default_models
        if models:  # one experiment per GPU model: a sweep dimension, varying fastest
            sweep = {**sweep, "gpu_model": models}
        merged = deep_merge(defaults, entry)
        if models and (merged.get("device") == "cpu" or (merged.get("resources") or {}).get("gpus") == 0):
            raise SpecError(f"{where}: {label}.gpu_models: a CPU experiment runs on no GPU model")
        parts: dict[Any, Any] = {}  # the entry's parts, each validated once (``with_parts``)
        for point, data in expand(merged, sweep):
            data = with_parts(_own_timing_wins(data, entry, point), merged, parts)
            exp = _validate_experiment(where, label, data, point)
            exp_id = exp.id  # a hash of the experiment's fields: computed once
            origin = (label, point)
            if exp_id in seen:
                first = _origin(*seen[exp_id])
                raise SpecError(f"{where}: {_origin(*origin)}: same experiment as {first} (id {exp_id})")
            seen[exp_id] = origin
            experiments.append(exp)
    return Spec(top.name, top.model_dump(mode="json", exclude_none=True), experiments)


def _read(path: Path) -> Any:
    """The file's content: JSON by suffix, else YAML; any problem is one ``SpecError`` line."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read spec {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SpecError(
            f"{path.name}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}); "
            "a spec is a YAML or JSON text file"
        ) from None
    if path.suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_unique_json_object)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path.name}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
        except _DuplicateKey as e:
            raise SpecError(f"{path.name}: {e}") from None
    try:
        return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass
    except _DuplicateKey as e:
        raise SpecError(f"{path.name}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or error_line(e)
        raise SpecError(f"{path.name}: malformed YAML{at}: {problem}") from None


class _DuplicateKey(ValueError):
    """A mapping that gives one key twice (plain YAML and JSON keep the last one silently)."""


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base' may be overridden by own keys
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            try:
                if key in first_line:
                    raise _DuplicateKey(f"duplicate key {key!r} at line {line} (first given at line {first_line[key]})")
                first_line[key] = line
            except TypeError:  # an unhashable key: SafeLoader reports it
                break
        return super().construct_mapping(node, deep=deep)


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def _check_defaults(where: str, defaults: dict[str, Any]) -> None:
    probe = {"target": "seed.foo", **defaults}
    try:
        exp = Experiment.model_validate(probe)
    except ValidationError as e:
        raise SpecError(f"{where}: {_describe(e, ('defaults',), Experiment)}") from None
    problem = _semantic_problem(exp, check_target="target" in defaults)
    if problem:
        raise SpecError(f"{where}: {_join(('defaults', *problem[0]))}: {problem[1]}")


def _gpu_models(where: str, value: Any, entry: dict[str, Any], sweep: dict[str, Any] | None = None) -> Any:
    """``gpu_models``: a list of GPU model names (as nodes advertise them) or ``all``; None when absent."""
    if value is None:
        return None
    if "gpu_model" in entry or "gpu_model" in (sweep or {}):
        raise SpecError(f"{where}: gpu_models and gpu_model name the same thing; keep one")
    if value == ALL_GPU_MODELS:
        return [ALL_GPU_MODELS]
    if not isinstance(value, list) or not all(isinstance(m, str) and m and m == m.strip() for m in value):
        raise SpecError(
            f"{where}.gpu_models: must be a list of GPU model names (as nodes advertise them in "
            f"accelerator_type:<MODEL>, e.g. [H100, A10G]) or 'all', got {value!r}"
        )
    if not value:
        raise SpecError(f"{where}.gpu_models: empty list (name at least one GPU model, or 'all')")
    if ALL_GPU_MODELS in value:
        raise SpecError(f"{where}.gpu_models: 'all' stands alone (gpu_models: all), not in a list")
    repeated = sorted({m for m in value if value.count(m) > 1})
    if repeated:
        raise SpecError(f"{where}.gpu_models: {', '.join(repeated)} listed more than once")
    return value


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
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as e:
        prefix = _sweep_prefix(tuple(e.errors()[0]["loc"]), point, label)
        in_sweep = prefix[-1] != label
        described = _describe(e, prefix, Experiment, point=in_sweep)
        raise SpecError(f"{where}: {described}{'' if in_sweep else _at_point(point)}") from None
    problem = _semantic_problem(exp)
    if problem:
        loc, message = problem
        prefix = _sweep_prefix(loc, point, label)
        if prefix[-1] != label:
            raise SpecError(f"{where}: {_join(prefix)}: {message}")
        raise SpecError(f"{where}: {_join((label, *loc))}: {message}{_at_point(point)}")
    return exp


def _at_point(point: dict[str, Any]) -> str:
    return f" (at sweep point {_point_text(point)})" if point else ""


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
    if cfg.backend not in SHIPPED_BACKENDS and cfg.backend not in _backends():
        return ("compile", "backend"), f"unknown backend '{cfg.backend}' (known: {', '.join(_backends())})"
    if cfg.mode is not None and cfg.mode not in SHIPPED_MODES and cfg.mode not in _modes():
        return ("compile", "mode"), f"unknown mode '{cfg.mode}' (known: {', '.join(_modes())})"
    if cfg.backend == "inductor":
        for name in cfg.options:
            problem = _inductor_option_problem(str(name))
            if problem:
                return ("compile", "options", str(name)), problem
    if cfg.mode is not None and cfg.options:
        return ("compile", "options"), "cannot be combined with compile.mode (torch.compile takes one or the other)"
    if exp.device == "cpu" and exp.resources.gpus:
        return ("resources", "gpus"), "a 'cpu' experiment reserves no GPU"
    if exp.device == "cuda" and exp.resources.gpus == 0:
        return ("resources", "gpus"), "a 'cuda' experiment needs at least one GPU"
    if exp.distributed is not None and (exp.resources.gpus or 0) > 1:
        return ("resources", "gpus"), f"a rank of a distributed experiment holds one GPU (got {exp.resources.gpus})"
    if exp.gpu_model is not None and (exp.device == "cpu" or exp.resources.gpus == 0):
        return ("gpu_model",), "a CPU experiment runs on no GPU model"
    if cfg.mark_dynamic and exp.replay is None:
        return ("compile", "mark_dynamic"), "marks the inputs of a replay's compiled calls; set replay too"
    if exp.replay is not None and exp.phase != "inference":
        return ("replay",), f"replays inference calls (serving traffic), not phase '{exp.phase}'"
    if check_target:
        params = exp.params
        if exp.replay is not None:  # each build takes one of the values: the first stands for them
            problem = _replay_param_problem(exp.target, exp.replay.param)
            if problem:
                return ("replay", "param"), problem
            params = {**params, exp.replay.param: exp.replay.values[0]}
        problem = _params_problem(exp.target, params)
        if problem:
            field = "params" if "argument" in problem else "target"
            return (field,), problem
    return None


def _replay_param_problem(target: str, param: str) -> str | None:
    """Why the target's factory takes no parameter ``param``; None when it does (or the target
    names nothing: ``_params_problem`` says so)."""
    try:
        factory = resolve(target)
    except TargetError:
        return None
    kinds = {p.kind for p in inspect.signature(factory).parameters.values()}
    if param in params_of(factory) or inspect.Parameter.VAR_KEYWORD in kinds:
        return None
    return f"target '{target}' has no parameter '{param}' (it accepts: {', '.join(params_of(factory)) or 'none'})"


_PARAMS_CHECKED: dict[tuple[str, str], str | None] = {}  # (target, repr of params) -> problem; one spec's sweep


def _params_problem(target: str, params: dict[str, Any]) -> str | None:
    """``check_params``'s complaint, once per distinct target and params (a sweep repeats them). Keyed on the
    params' ``repr``: equal text is equal loaded data, and the same params in another key order are only checked
    once more (a third of the time of sorted JSON text)."""
    key = (target, repr(params))
    if key not in _PARAMS_CHECKED:
        try:
            check_params(target, params)
            _PARAMS_CHECKED[key] = None
        except TargetError as e:
            _PARAMS_CHECKED[key] = str(e)
    return _PARAMS_CHECKED[key]


# Names every torch release in the pinned range ships (``tests/test_spec.py`` checks them against
# torch's own lists): a spec that uses only these is validated without importing torch, which costs
# the driver 2.5-3.3 s (``import torch._dynamo`` and ``list_backends``) before Ray can start.
SHIPPED_BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")
SHIPPED_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


@functools.cache
def _backends() -> tuple[str, ...]:
    import torch._dynamo

    return tuple(torch._dynamo.list_backends(exclude_tags=()))


def _own_timing_wins(data: dict[str, Any], entry: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """A count and a time budget are two spellings of one setting: an experiment's own
    ``repeats_ms`` (or sweep value) replaces a ``repeats`` it got from ``defaults``, and so on.
    Both given by the experiment itself, or both by ``defaults``, is an error (TimingConfig)."""
    timing = data.get("timing")
    if not isinstance(timing, dict):
        return data
    own = set(entry.get("timing") or {}) if isinstance(entry.get("timing"), dict) else set()
    own |= {path.split(".", 1)[1] for path in point if path.startswith("timing.")}
    if isinstance(point.get("timing"), dict):
        own |= set(point["timing"])
    if not own:  # every setting from defaults: nothing of the experiment's own to win
        return data
    for count, budget in TIMING_SPELLINGS:
        for mine, inherited in ((count, budget), (budget, count)):
            if mine in own and inherited not in own and inherited in timing:
                data = {**data, "timing": {k: v for k, v in timing.items() if k != inherited}}
                timing = data["timing"]
    return data


def _inductor_option_problem(name: str) -> str | None:
    """Why ``name`` is not one of inductor's options (``torch._inductor.list_options()``)."""
    known = _inductor_options()
    if name in known:
        return None
    nested = sorted(o for o in known if o.startswith(name + "."))
    if nested:
        return f"unknown inductor option '{name}': options are flat dotted names ('{nested[0]}'), not nested mappings"
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean '{close[0]}'?" if close else "see torch._inductor.list_options()"
    return f"unknown inductor option '{name}' ({hint})"


@functools.cache
def _inductor_options() -> frozenset[str]:
    import torch._inductor

    return frozenset(torch._inductor.list_options())


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


def _origin(label: str, point: dict[str, Any]) -> str:
    return label + (f" ({_point_text(point)})" if point else "")


def _point_text(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in point.items())
