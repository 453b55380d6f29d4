"""Reference pages generated from the code at build time, so that they cannot drift from it.

An MkDocs hook (``hooks:`` in ``mkdocs.yml``). A page holding a marker line gets, in its place:

- ``<!-- reference: spec -->``: every field of a spec file, from ``orchestrator.plan.schema.spec_schema()``
  (the pydantic models' JSON Schema): the top level, an experiment entry, each nested model under
  its dotted path, ``defaults`` and every path ``sweep`` accepts; type, default, allowed values and
  description of each.
- ``<!-- reference: cli -->``: every command of ``orchestrator.cli.app`` with its usage, arguments and
  options, read from the Typer app through click's own objects (``typer.main.get_command``).
- ``<!-- reference: report -->``: every field of a report, from ``orchestrator.report.models.Report``
  down through ``tasks.models.Result`` and every model nested in them; a field's description is its
  ``Field(description=...)``, else the comment on its line in the source.

Nothing generated is committed: a field or an option added to the code is on the next build's
pages. Each ``*_reference`` function takes what it renders as an argument (a schema, a click
command, a model class), so a test can render a changed copy.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

JSON_NAMES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}  # as JSON names them
MARKER = re.compile(r"^<!-- reference: (\w+) -->$", re.MULTILINE)
PROGRAM = "compilebench"


# --- the spec, from its JSON Schema ------------------------------------------------------------------


def spec_reference(schema: dict[str, Any] | None = None) -> str:
    """Markdown for every field of a spec file, walked from its JSON Schema.

    Method: the top level's properties first; then an experiment entry's; then every nested model
    an entry field refers to (``$ref``, also inside ``anyOf``), as a section named by its dotted
    path (``compile``, ``timing``…) listing ``path.field`` rows; then ``defaults`` (the same fields,
    listed by name) and ``sweep`` (every dotted path it accepts, from the schema's own list).
    """
    if schema is None:
        from orchestrator.plan.schema import spec_schema

        schema = spec_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    entry = defs["ExperimentEntry"]
    out = ["### The top level {#top-level}", "", _text(schema.get("description", "")), ""]
    out += _field_table(schema["properties"], set(schema.get("required", [])), "", defs)
    out += ["", "### An experiment {#experiments}", "", _text(entry.get("description", "")), ""]
    fields = {k: v for k, v in entry["properties"].items() if k not in ("sweep", "gpu_models")}
    out += _field_table(fields, set(), "", defs)
    for path, name in _nested(fields, defs, ""):
        model = defs[name]
        out += ["", f"### {path} {{#{_anchor(path)}}}", ""]
        out += [f"`{path}` is a mapping ({name}). {_text(model.get('description', ''))}", ""]
        out += _field_table(model["properties"], set(model.get("required", [])), path + ".", defs)
    out += ["", "### defaults {#defaults}", "", _text(defs["Defaults"].get("description", "")), ""]
    out.append("Fields: " + ", ".join(f"`defaults.{k}`" for k in defs["Defaults"]["properties"]) + ".")
    for key in ("gpu_models", "sweep"):
        out += ["", f"### {key} {{#{key}}}", "", _text(entry["properties"][key].get("description", ""))]
    out += ["", "Paths `sweep` accepts, each mapped to a list of values of that field:", ""]
    out += ["| path | values of |", "| --- | --- |"]
    for path, prop in entry["properties"]["sweep"]["properties"].items():
        out.append(f"| `sweep.{path}` | {_schema_type(prop.get('items', {}), defs)} |")
    free = list(entry["properties"]["sweep"].get("patternProperties", {}))
    if free:
        out += ["", "Below a mapping field (`params`, `compile.options`) any dotted key is accepted too."]
    return "\n".join(out) + "\n"


def _nested(fields: dict[str, Any], defs: dict[str, Any], prefix: str) -> Iterator[tuple[str, str]]:
    """(dotted path, model name) of every nested model below ``fields``, depth first."""
    for key, field in fields.items():
        for name in _refs(field):
            model = defs.get(name, {})
            if "properties" in model:
                yield prefix + key, name
                yield from _nested(model["properties"], defs, prefix + key + ".")


def _refs(field: dict[str, Any]) -> list[str]:
    """The model names a property refers to: its own ``$ref`` or those inside ``anyOf``/``items``."""
    ref = field.get("$ref")
    if ref:
        return [ref.rsplit("/", 1)[-1]]
    names: list[str] = []
    for part in field.get("anyOf", []) + ([field["items"]] if isinstance(field.get("items"), dict) else []):
        names += _refs(part)
    return names


def _field_table(props: dict[str, Any], required: set[str], prefix: str, defs: dict[str, Any]) -> list[str]:
    rows = ["| field | type | default | allowed values | description |", "| --- | --- | --- | --- | --- |"]
    for key, prop in props.items():
        default = "required" if key in required else _value(prop["default"]) if "default" in prop else "-"
        kind = _schema_type(prop, defs)
        for name in _refs(prop):
            if "properties" in defs.get(name, {}):  # a nested model: link to its own section
                kind = kind.replace(f"{name} (mapping)", f"[{name}](#{_anchor(prefix + key)})")
        rows.append(
            f"| `{prefix}{key}` | {kind} | {default} | {_allowed(prop)} | {_text(prop.get('description', ''))} |"
        )
    return rows


def _schema_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A property's type in words: ``string``, ``integer or null``, ``list of number``, a link to a model."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"{name} (mapping)" if name in defs else name
    if "anyOf" in prop:
        return " or ".join(dict.fromkeys(_schema_type(p, defs) for p in prop["anyOf"]))
    if "const" in prop:
        return f"`{_plain(prop['const'])}`"
    if "enum" in prop:
        return "string" if all(isinstance(v, str) for v in prop["enum"]) else "value"
    kind = prop.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        items = prop.get("items")
        if isinstance(items, dict):
            return f"list of {_schema_type(items, defs)}"
        if "prefixItems" in prop:
            return "[" + ", ".join(_schema_type(p, defs) for p in prop["prefixItems"]) + "]"
        return "list"
    if kind == "object":
        return "mapping"
    return str(kind)


def _allowed(prop: dict[str, Any]) -> str:
    """Enumerated values and bounds of a property (also inside ``anyOf``), or ``-``."""
    parts: list[str] = []
    for p in [prop, *prop.get("anyOf", [])]:
        parts += [f"`{_plain(v)}`" for v in p.get("enum", [])]
        for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
            if key in p:
                parts.append(f"{sign} {p[key]}")
        if "minItems" in p:
            parts.append(f"at least {p['minItems']} item(s)")
    return ", ".join(dict.fromkeys(parts)) or "-"


# --- the command line, from the Typer app ------------------------------------------------------------


def cli_reference(command: Any = None) -> str:
    """Markdown for every command of the CLI: usage, help, arguments and options.

    Method: ``typer.main.get_command(app)`` gives the click group Typer builds; each subcommand's
    usage line, help text and each parameter's help record (option names, metavar, help with its
    default and bounds) are what ``--help`` prints, read through click's own methods.
    """
    if command is None:
        import typer

        from orchestrator.cli import app

        command = typer.main.get_command(app)
    root = command.context_class(command, info_name=PROGRAM)
    out = [_text(command.help or ""), ""]
    out += ["| command | what it does |", "| --- | --- |"]
    for name, sub in command.commands.items():
        out.append(f"| [`{PROGRAM} {name}`](#{_anchor(name)}) | {_text(_first_paragraph(sub.help or ''))} |")
    for name, sub in command.commands.items():
        ctx = sub.context_class(sub, info_name=name, parent=root)
        usage = sub.get_usage(ctx).removeprefix("Usage: ")
        out += ["", f"## {PROGRAM} {name} {{#{_anchor(name)}}}", "", "```", usage, "```", ""]
        out += [_text(sub.help or ""), ""]
        params = [p for p in sub.params if not getattr(p, "hidden", False)]
        if not params:
            out.append("No arguments or options besides `--help`.")
            continue
        out += ["| argument or option | help |", "| --- | --- |"]
        for p in params:
            if p.param_type_name == "argument":
                names, help_text = f"`{p.name.upper()}` ({p.display_type(ctx).strip('<>')})", p.help or ""
                if p.required:
                    help_text += "  [required]"
            else:
                record = p.get_help_record(ctx)
                names, help_text = f"`{record[0]}`", record[1]
            out.append(f"| {names} | {_text(help_text)} |")
    return "\n".join(out) + "\n"


# --- the report, from its models ---------------------------------------------------------------------


def report_reference(root: type[BaseModel] | None = None) -> str:
    """Markdown for every field of a report: the root model, then each model nested in it, breadth first.

    Method: a model's fields come from ``model_fields`` (inherited ones included); a field's type is
    its annotation in words, with nested models linked to their own sections; its description is
    ``Field(description=...)``, else the ``#`` comment on its line of the class's source.
    """
    if root is None:
        from orchestrator.report.models import Report

        root = Report
    models = _models(root)
    out: list[str] = []
    for model in models:
        comments = _field_comments(model)
        out += ["", f"## {model.__name__} {{#{_anchor(model.__name__)}}}", ""]
        doc = _first_paragraph(inspect.getdoc(model) or "")
        if doc and model.__doc__:
            out += [_text(doc), ""]
        out += ["| field | type | default | description |", "| --- | --- | --- | --- |"]
        for name, info in model.model_fields.items():
            default = "required" if info.is_required() else _default(info)
            description = info.description or comments.get(name, "")
            out.append(f"| `{name}` | {_annotation(info.annotation)} | {default} | {_text(description)} |")
    return "\n".join(out).lstrip() + "\n"


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model reachable from ``root``'s field annotations, breadth first, each once."""
    seen: list[type[BaseModel]] = [root]
    for model in seen:
        for info in model.model_fields.values():
            for found in _models_in(info.annotation):
                if found not in seen:
                    seen.append(found)
    return seen


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _annotation(annotation: Any) -> str:
    """A field's annotation in words: ``str or null``, ``list of [Node](#node)``, ``one of `a`, `b` ``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{_anchor(annotation.__name__)})"
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{_plain(a)}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_annotation(a) for a in args)
    if origin is typing.Annotated:
        return _annotation(args[0])
    if origin in (list, set, frozenset):
        return f"list of {_annotation(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_annotation(args[0])} to {_annotation(args[1])}" if args else "mapping"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {_annotation(args[0])}"
        return "[" + ", ".join(_annotation(a) for a in args) + "]"
    if annotation is Any:
        return "any"
    return JSON_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(info: Any) -> str:
    if info.default_factory is not None:
        try:
            return _value(info.default_factory())
        except TypeError:  # a factory that takes the validated data
            return "-"
    return _value(info.default)


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The trailing ``#`` comment of each annotated field in the source of ``model`` and its bases."""
    comments: dict[str, str] = {}
    for cls in reversed([c for c in model.__mro__ if issubclass(c, BaseModel) and c is not BaseModel]):
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        by_line: dict[int, str] = {}
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                by_line[tok.start[0]] = tok.string.lstrip("#").strip()
        body = ast.parse(source).body[0]
        for node in getattr(body, "body", []):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
                text = " ".join(by_line[n] for n in span if n in by_line)
                if text:
                    comments[node.target.id] = text
    return comments


# --- shared helpers ----------------------------------------------------------------------------------


def _anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _value(value: Any) -> str:
    """A default as a code span; empty containers and None as JSON."""
    text = json.dumps(value, default=str)
    return f"`{text}`" if len(text) <= 60 else "(see description)"


def _first_paragraph(text: str) -> str:
    return text.strip().split("\n\n", 1)[0]


def _text(text: str) -> str:
    """Text for one table cell or paragraph, on one line; outside code spans, pipes and Markdown's emphasis
    characters escaped and angle brackets as entities, so that ``*.json`` and ``<id>`` read as written.
    """
    parts = " ".join(text.split()).split("`")
    for i in range(0, len(parts), 2):  # the even parts lie outside code spans
        parts[i] = re.sub(r"([*_\\[\]])", r"\\\1", parts[i]).replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = parts[i].replace("|", "\\|")  # in a code span a pipe splits no cell and needs no escape
    return "`".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "spec": spec_reference,
    "cli": cli_reference,
    "report": report_reference,
}


def render(markdown: str) -> str:
    """``markdown`` with every marker line replaced by its generated reference."""
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook: fill the reference markers of a page."""
    return render(markdown)
