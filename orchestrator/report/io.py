"""Writing reports atomically and reading them back: any schema version, or the journal of a run that died.

Every function takes a local path or the URL of an object in a store (``orchestrator.store.storage``):
``s3://bucket/nightly/r.json`` is written whole or not at all (``storage.write_pieces``) and read as a file is.

A report whose name ends ``.gz`` (``REPORT_SUFFIX``: ``r.json.gz``) is written as compact JSON compressed
with gzip (ISA-L's, ``isal``), about a ninth of the indented text; any report is read compressed or not,
whatever its name (gzip's magic bytes tell). Its first line holds everything but the results, with the results' digests
(``digest``: what ``compare`` reads of each) as columns; then one result a line. ``load_glance`` reads that
first line alone. Beside each report goes its history file (``points``: ``r.history.json``).
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast

from isal import igzip, igzip_threaded, isal_zlib
from pydantic import TypeAdapter, ValidationError

from orchestrator.report.digest import (
    Digest,
    columns,
    digest,
)
from orchestrator.report.models import SCHEMA_VERSION, Environment, Report
from orchestrator.report.points import history_name, report_points
from orchestrator.report.summary import summarize
from orchestrator.store.journal import JOURNAL_SUFFIX, OBJECT_JOURNAL_SUFFIX, read_journal
from orchestrator.store.storage import (
    Location,
    StorageError,
    join,
    location,
    name_of,
    parent,
    read_bytes,
    write_pieces,
)
from tasks.files import write_atomic as write_file_atomic
from tasks.heap import collector_paused
from tasks.result import Result
from tasks.text import validation_line

REPORT_SUFFIX: Final = ".json.gz"  # the name that keeps a big report small: compressed, every sample kept
GZIP_MAGIC: Final = b"\x1f\x8b"
RESULTS_OPEN: Final = b'"results":[\n'  # a compressed report's results follow, one a line, up to a line "]..."
DIGESTS_OPEN: Final = b'"digests":'  # in a compressed report's first line: its results' digests, as columns
# The most of a compressed report read before its results must have begun (name, spec, environment: kilobytes
# to a few megabytes), so that one of another layout is not decompressed twice whole to find that out.
HEAD_LIMIT: Final = 64 * 1024**2
# ISA-L's deflate (``isal``: the same gzip stream as zlib writes and reads, about 3x zlib's speed both ways), at
# its default level: 100,000 results of 10 samples a side in 85 MB, 0.8 s to compress on the 2-core machine where
# zlib's fastest level takes 2.9 s for 93 MB (benchmarks/read_scale.py; docs/report-fields.md).
GZIP_LEVEL: Final = isal_zlib.ISAL_DEFAULT_COMPRESSION
# what a damaged or cut gzip stream raises, from either library
# (``isal``'s stubs type its error as an instance; it is a class, ``igzip_lib.IsalError``)
_ISAL_ERROR: Final = cast(type[Exception], isal_zlib.error)
GZIP_ERRORS: Final[tuple[type[Exception], ...]] = (OSError, EOFError, zlib.error, _ISAL_ERROR)
UNREADABLE: Final[tuple[type[Exception], ...]] = (ValidationError, *GZIP_ERRORS)  # a layout given up on
DIGEST_JSON: Final = TypeAdapter(dict[str, list[Any]])  # the digests' columns as JSON
RESULT_JSON: Final = TypeAdapter(Result)  # a result as compact JSON bytes: ``model_dump_json``'s text, not decoded
READABLE_VERSIONS: Final = (1, 2, SCHEMA_VERSION)


class ReportError(ValueError):
    """A file that cannot be read as a report; the message is one line meant for the user."""


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) whole or not at all: locally to a temporary file beside ``path``, synced, then
    renamed over ``path``, with an ordinary file's permissions (``tasks.files.write_atomic``); to a store as
    one object, replaced whole (``storage.write_pieces``). Raises ``TypeError`` for what is not a ``str``, ``OSError``
    (``StorageError`` for a store)."""
    write_atomic_bytes(path, bytes(text, "utf-8"))


def write_atomic_bytes(path: str | Path, data: bytes | Iterable[bytes]) -> None:
    """``write_atomic`` of bytes as they are, or of pieces of bytes in turn (a local file is written piece by
    piece; an object in a store, streamed where the store makes it whole at once, else in one PUT:
    ``storage.write_pieces``)."""
    where = location(path)
    if isinstance(where, str):
        write_pieces(where, [data] if isinstance(data, bytes) else data)
    else:
        write_file_atomic(where, data)


def write_report(
    report: Report, path: str | Path, journaled: Journaled | None = None, digested: Digested | None = None
) -> None:
    """Write ``report`` to ``path``, then its history file beside it (``history_path``).

    A name ending ``.gz``: compact JSON, gzip-compressed, each result serialised and compressed in turn (the
    text of 100,000 results is never held whole); any other name: JSON indented by 2, as people read it.
    ``journaled``: a result's compact JSON text as the run's journal holds it (``Journal.text_of``), written as
    it is instead of dumped again (a fifth of writing 100,000 results); None where it has none. ``digested``: a
    result's digest worked out as it arrived (``digest.Digests.of``), likewise.
    """
    compressed = str(path).endswith(".gz")
    with collector_paused():  # the text of every result, then its points, made at once: none of it garbage
        if compressed:
            data = _compressed(report, journaled or _none, digested or _none)
        else:
            data = bytes(report.model_dump_json(indent=2) + "\n", "utf-8")
        write_atomic_bytes(path, data)
        points = report_points(report, _name(location(path)), len(data))
    write_atomic_bytes(history_path(path), bytes(points.model_dump_json() + "\n", "utf-8"))


def history_path(path: str | Path) -> Location:
    """Where the history file of the report at ``path`` goes: ``r.history.json`` beside ``r.json.gz``."""
    where = location(path)
    if isinstance(where, Path):
        return where.with_name(history_name(where.name))
    return join(parent(where), history_name(name_of(where)))


# A result's compact JSON text (``RESULT_JSON``'s), and its digest, where one is at hand already (``write_report``),
# else None.
Journaled = Callable[[Result], bytes | None]
Digested = Callable[[Result], Digest | None]


def _none(result: Result) -> None:
    return None


def _compressed(report: Report, journaled: Journaled, digested: Digested) -> bytes:
    """The report as compact JSON (``Report.model_dump_json``'s text, field for field), gzip-compressed: on the
    first line every field but the summary and the results (kilobytes); on the second the summary; on the
    third the results' digests (``DIGESTS_OPEN``, ``DigestColumns``) and the results' opening
    (``RESULTS_OPEN``); then each result on a line of its own: the layout ``_streamed`` reads a result at a
    time and ``load_glance`` reads up to the results."""
    buffer = io.BytesIO()
    # deflated in a thread of its own (``isal``'s ``igzip_threaded``, outside the GIL) while the next lines are dumped
    with igzip_threaded.open(buffer, "wb", compresslevel=GZIP_LEVEL, threads=1) as out:
        for i, name in enumerate(n for n in Report.model_fields if n not in ("results", "summary")):
            field = report.model_dump_json(include={name})  # '{"name":value}'
            out.write(bytes(("{" if i == 0 else ",") + field[1:-1], "utf-8"))
        summary = report.model_dump_json(include={"summary"})  # a line of its own: 100 MB at 100,000 groups
        out.write(bytes(",\n" + summary[1:-1], "utf-8"))
        del summary
        made = [digested(r) or digest(r) for r in report.results]
        digests = DIGEST_JSON.dump_json(columns(made))  # as DigestColumns reads them
        del made
        out.write(b",\n" + DIGESTS_OPEN + digests + b"," + RESULTS_OPEN)
        del digests
        last = len(report.results) - 1
        for i, r in enumerate(report.results):
            out.write((journaled(r) or RESULT_JSON.dump_json(r)) + (b",\n" if i < last else b"\n"))
        out.write(b"]}\n")
    return buffer.getvalue()


def read(path: str | Path) -> Report:
    """A report (any schema version) or a run's journal: a ``*.journal.jsonl`` file, or a ``*.journal``
    prefix of objects in a store (or a copy of one in a local folder). Raises ``ReportError``."""
    where = location(path)
    name = _name(where)
    objects = name.endswith(OBJECT_JOURNAL_SUFFIX) and (isinstance(where, str) or where.is_dir())
    return load_journal(where) if name.endswith(JOURNAL_SUFFIX) or objects else load_report(where)


def load_report(path: str | Path) -> Report:
    """Read a report, compressed or not, upgrading older schema versions to the current one. Raises
    ``ReportError``.

    A report of the current version is validated as it is parsed (``Report.model_validate_json``: no
    intermediate Python objects); an older one, or one that fails, is parsed with ``json`` and upgraded
    (``upgrade``), which also gives the error its line and field.
    """
    where = location(path)
    stored = _stored(where)
    with collector_paused():
        streamed = _streamed(stored)
        if streamed is not None:
            return streamed
        raw = _decompressed(where, stored)
        try:
            report = Report.model_validate_json(raw)
        except ValidationError:
            pass
        else:
            report.schema_version = SCHEMA_VERSION
            return report
        data = _json(where, raw)
        if not isinstance(data, dict) or "results" not in data:
            raise ReportError(f"{path}: not a compilebench report (no 'results')")
        return upgrade(data, where=str(path))


def _streamed(stored: bytes) -> Report | None:
    """A report written a result to a line (``_compressed``) read a line at a time: its results validated one
    by one as they are decompressed (``Result.model_validate_json`` on each line), the rest of it (everything
    but the results) as one small document. None for any other layout, or where a line does not validate:
    ``load_report`` then reads the file whole, as it reads every other, and names what is wrong.

    Why: pydantic validates JSON text by parsing it whole first (a tree of the document's values, outside
    Python's heap). For the 450 MB of text of 100,000 results that tree, the text and the models made from
    it were all held at once: 4 GB at the peak. A line at a time, only the models are (``benchmarks/read_scale.py``).
    """
    if not stored.startswith(GZIP_MAGIC):
        return None
    try:
        with report_lines(stored) as f:
            head = read_head(f)
            if head is None:
                return None
            fields, digests = head
            del head
            report = None
            if digests is not None:  # every field is before the results (the digests are not the report's)
                report = Report.model_validate_json(fields + b'"results":[]}')
                fields = digests = b""  # not held while the results are read
            results: list[Result] = []
            for line in f:
                if line.startswith(b"]"):
                    tail = line + f.read()
                    if report is None:
                        report = Report.model_validate_json(fields + tail)  # every field, results empty
                    elif tail.strip() != b"]}":
                        return None
                    report.results = results
                    report.schema_version = SCHEMA_VERSION
                    return report
                results.append(Result.model_validate_json(line.rstrip(b",\n")))
    except UNREADABLE:
        return None
    return None  # cut short before the results' end


def report_lines(stored: bytes) -> io.BufferedReader:
    """A compressed report's text, read a line at a time as another thread inflates it (``isal``'s
    ``igzip_threaded``, which inflates outside the GIL): the 370 MB of text of 100,000 results inflate while their
    lines are validated, a second less of a whole read (``benchmarks/read_scale.py``). A damaged stream raises
    what inflating it raises (``GZIP_ERRORS``) where the line is read."""
    return cast(io.BufferedReader, igzip_threaded.open(io.BytesIO(stored), "rb"))


def read_head(f: io.BufferedReader) -> tuple[bytes, bytes | None] | None:
    """What precedes a compressed report's results (``_compressed``): its fields (the first line, then the
    summary's) and its digests' line, which ends ``RESULTS_OPEN``; or a report's written before digests: its
    first line, which ends ``RESULTS_OPEN``, and None. None for any other layout (an older compressed report is
    one line: a first line longer than ``HEAD_LIMIT`` is given up on early)."""
    first = f.readline(HEAD_LIMIT)
    if first.endswith(RESULTS_OPEN):
        return first, None
    if not first.endswith(b",\n"):
        return None
    summary, digests = f.readline(), f.readline()
    if summary.startswith(b'"summary":') and digests.startswith(DIGESTS_OPEN) and digests.endswith(RESULTS_OPEN):
        return first + summary, digests
    return None


def upgrade(data: dict[str, Any], where: str = "report") -> Report:
    """A report of any known schema version as the current one.

    Version 1 differs only in its summary (one best per target, means mixing devices and
    targets); the summary is derived, so it is rebuilt from the results.
    """
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        newer = isinstance(version, int) and version > SCHEMA_VERSION
        hint = " (written by a newer compilebench)" if newer else ""
        raise ReportError(f"{where}: unknown report schema_version {version!r}{hint}")
    if version == 1:
        data = {**data, "summary": None}
    data = {**data, "schema_version": SCHEMA_VERSION}  # 2 and 3 differ only in how the file is kept
    if not isinstance(data["results"], list):
        raise ReportError(f"{where}: results: not a list")
    results = []
    for i, r in enumerate(data["results"]):
        try:
            results.append(Result.model_validate(r))
        except ValidationError as e:
            raise ReportError(f"{where}: {validation_line(e, ('results', i))}") from None
    try:
        if data.get("summary") is None:
            data = {**data, "summary": summarize(results).model_dump()}
        return Report.model_validate({**data, "results": results})
    except ValidationError as e:
        raise ReportError(f"{where}: {validation_line(e)}") from None


def load_journal(path: str | Path) -> Report:
    """The report of a run from its journal, e.g. one that died: results as they arrived, summary rebuilt.

    The journal is read as a resumed run reads it (``orchestrator.store.journal.read_journal``: the first
    result of each experiment, lines cut short skipped with a warning). The report is marked
    incomplete: a journal alone cannot tell whether every experiment of the spec finished. A journal
    in a store that holds no result (or does not exist: a store has no empty folders) is an error.
    """
    where = location(path)
    if isinstance(where, Path) and not where.exists():
        raise ReportError(f"cannot read {path}: No such file")
    try:
        with collector_paused():
            contents = read_journal(where)
    except StorageError as e:
        raise ReportError(f"cannot read {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    results = list(contents.results.values())
    if not results and (contents.warnings or isinstance(where, str)):
        raise ReportError(f"{path}: no results in this journal")
    name = _name(where)
    warnings = [f"rebuilt from the journal {name}: the run may not have finished", *contents.warnings]
    finished = max((r.finished_at for r in results), default=0.0)
    with collector_paused():
        summary = summarize(results)
    return Report(
        created_at=datetime.fromtimestamp(finished, UTC).isoformat(timespec="seconds"),
        name=name.removesuffix(JOURNAL_SUFFIX).removesuffix(OBJECT_JOURNAL_SUFFIX),
        spec={},
        environment=_environment_from(results, warnings),
        results=results,
        summary=summary,
        complete=False,
    )


def _environment_from(results: list[Result], warnings: list[str]) -> Environment:
    """What the results' workers recorded of their versions; the driver's own are unknown."""
    versions: dict[str, str] = {}
    for r in results:
        if r.worker:
            versions = {**r.worker.versions, **versions}
    return Environment(
        python=versions.get("python", "unknown"),
        torch=versions.get("torch", "unknown"),
        ray=versions.get("ray", "unknown"),
        platform=versions.get("platform", "unknown"),
        warnings=warnings,
    )


def _bytes(path: Location) -> bytes:
    """The file's bytes, decompressed where they are gzip's."""
    return _decompressed(path, _stored(path))


def _name(where: Location) -> str:
    """The name a location ends with: a file's, or an object's in a store."""
    return where.name if isinstance(where, Path) else name_of(where)


def compressed_bytes(where: Location) -> bytes:
    """A compressed report's bytes as they are kept (what ``load_glance`` and ``load_outline`` read part of);
    b"" for a journal, which is not read here, and for a report kept otherwise, which ``read`` reads whole."""
    if _name(where).endswith((JOURNAL_SUFFIX, OBJECT_JOURNAL_SUFFIX)):
        return b""
    stored = _stored(where)
    return stored if stored.startswith(GZIP_MAGIC) else b""


def _stored(path: Location) -> bytes:
    """The file's bytes as they are kept."""
    try:
        return path.read_bytes() if isinstance(path, Path) else read_bytes(path)
    except StorageError as e:
        raise ReportError(f"cannot read {e}") from None
    except OSError as e:
        raise ReportError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


def _decompressed(path: Location, stored: bytes) -> bytes:
    try:
        return igzip.decompress(stored) if stored.startswith(GZIP_MAGIC) else stored
    except GZIP_ERRORS as e:
        raise ReportError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


def _json(path: Location, raw: bytes | None = None) -> Any:
    try:
        text = (_bytes(path) if raw is None else raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(f"cannot read {path}: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
