"""Reading a journal: a local file of JSON lines, or a store's prefix of result objects, into its
contents, keeping the **first** result of each run.

Never raises for a bad line or object: a line that does not parse (the tail of a driver killed
mid-write: "cut short") or an object that is not a result is skipped with a warning naming it, and
repeats of a run are counted in one warning. Result objects are named
``<sequence>-<experiment id>-r<replicate>.json`` (``object_name``); readers sort on the sequence's
number, so that a longer one still sorts, and leave objects of any other name alone.

Resume, ``compilebench report`` on a journal, and both logs on opening read through here. Imports
only ``contents`` of the package.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from orchestrator.store.journal.contents import JOURNAL_SUFFIX, JournalContents
from orchestrator.store.storage import Location, StorageError, join, location, name_of, open_location, problem
from tasks.heap import collector_paused
from tasks.models import Result
from tasks.text import validation_line

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

SEQUENCE_DIGITS = 8  # result objects' sequence, zero-padded: names sort in arrival order up to 10**8 results

_RESULT_NAME = re.compile(r"^(\d+)-.*\.json$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def object_name(sequence: int, result: Result) -> str:
    """The name of the object holding ``result``, the ``sequence``-th of its journal."""
    return f"{sequence:0{SEQUENCE_DIGITS}d}-{_UNSAFE.sub('_', result.experiment_id)}-r{result.replicate}.json"


def sequence_of(name: str) -> int:
    """The sequence number of a result object's name (-1 for a name of another shape)."""
    match = _RESULT_NAME.match(name)
    return int(match.group(1)) if match else -1


def result_names(fs: AbstractFileSystem, root: str) -> list[str]:
    """The names of the result objects under ``root``, in sequence order."""
    fs.invalidate_cache(root)  # listings are cached per process: another run may have written since
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    names = [name_of(str(p)) for p in entries]
    return sorted((n for n in names if _RESULT_NAME.match(n)), key=lambda n: (sequence_of(n), n))


def read_journal(path: Location) -> JournalContents:
    """Every result of the journal at ``path`` (a missing one: empty); never raises for bad lines or objects.

    ``path`` is a local ``*.journal.jsonl``, or a URL: of a journal's prefix of objects, or of a
    ``*.journal.jsonl`` copied to a store; a local folder is read as a prefix of objects copied
    from a store. A store that cannot be read raises ``StorageError``.
    """
    where = location(path)
    if isinstance(where, Path) and where.is_dir():
        from fsspec.implementations.local import LocalFileSystem

        return read_objects(LocalFileSystem(), str(where), where.name)
    if isinstance(where, Path):
        try:
            return parse_lines(where.read_bytes(), where.name)
        except FileNotFoundError:
            return JournalContents()
    if where.endswith(JOURNAL_SUFFIX):
        fs, key = open_location(where)
        try:
            return parse_lines(bytes(fs.cat_file(key)), name_of(where))
        except FileNotFoundError:
            return JournalContents()
        except Exception as e:
            raise StorageError(problem(e, where)) from None
    fs, root = open_location(where.rstrip("/"))
    try:
        return read_objects(fs, root, name_of(where))
    except Exception as e:
        raise StorageError(problem(e, where)) from None


def parse_lines(data: bytes, name: str) -> JournalContents:
    """The results of a local journal's bytes, one JSON line each."""
    with collector_paused():  # many small objects, no cycles: two thirds of reading 20,000 results otherwise
        return _parse_lines(data, name)


def _parse_lines(data: bytes, name: str) -> JournalContents:
    contents, repeats = JournalContents(), 0
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            result = Result.model_validate_json(line)
        except ValidationError as e:
            cut = number == len(lines) and not data.endswith(b"\n")
            why = "cut short, as by a driver killed while writing it" if cut else validation_line(e)
            contents.warnings.append(f"{name}: skipped line {number}, which is not a result ({why})")
            continue
        repeats += not contents.keep(result)
    _warn_repeats(contents, repeats, name)
    return contents


def read_objects(fs: AbstractFileSystem, root: str, label: str) -> JournalContents:
    """The results of a journal's objects, fetched together, kept in sequence order."""
    contents, repeats = JournalContents(), 0
    names = result_names(fs, root)
    paths = [join(root, n) for n in names]
    fetched = fs.cat(paths, on_error="return") if paths else {}
    for name, key in zip(names, paths, strict=True):
        data = fetched.get(key, FileNotFoundError(key))
        if isinstance(data, BaseException):
            contents.warnings.append(f"{label}/{name}: skipped, which could not be read ({problem(data, name)})")
            continue
        try:
            result = Result.model_validate_json(data)
        except ValidationError as e:
            contents.warnings.append(f"{label}/{name}: skipped, which is not a result ({validation_line(e)})")
            continue
        repeats += not contents.keep(result)
    _warn_repeats(contents, repeats, label)
    return contents


def _warn_repeats(contents: JournalContents, repeats: int, name: str) -> None:
    if repeats:
        contents.warnings.append(
            f"{name}: {repeats} repeated result(s) of a run already in the journal; kept the first"
        )
