"""Reading part of a big compressed report (``io.REPORT_SUFFIX``): what a command shows of it, no more.

A compressed report's head (its fields, its summary, its results' digests as columns) comes before its results,
one a line (``io._compressed``). ``load_glance`` reads the head and stops (the regression gate's
``digest.Glance``); ``load_outline`` and ``load_page`` validate, of the results, only those a terminal or a page
lists one by one (``models.Outline``), and the page every digest; ``load_results_as`` validates each result as
a model of the fields a command reads (``export.harness_csv.CsvResult``). Each returns None where the report is
kept otherwise, or does not read so: the caller then reads it whole (``io.read``), which names what is wrong.
Imports ``io`` and the models, digests and cells below it.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, Literal, TypeVar

from pydantic import BaseModel

from orchestrator.report.cells import SCREENFUL
from orchestrator.report.digest import (
    PAGE_FIELDS,
    Decided,
    Digest,
    DigestColumns,
    GateColumns,
    Glance,
    SummaryGlance,
    decided,
    glance,
)
from orchestrator.report.io import (
    DIGESTS_OPEN,
    RESULTS_OPEN,
    UNREADABLE,
    compressed_bytes,
    read,
    read_head,
    report_lines,
)
from orchestrator.report.models import Environment, Outline, Report
from orchestrator.store.storage import location
from tasks.forked import Beside, can_fork
from tasks.heap import collector_paused
from tasks.result import Result


class _Listed(BaseModel):
    """The digest columns ``load_outline`` reads (every other skipped unread): each result's status, whether it
    was judged correct, whether it holds a replay, a distributed run or a trace, and its sides' medians (which
    results have raw samples). None: digests written before the three after ``correct`` were kept."""

    status: list[str]
    traced: list[bool]
    eager_ms: list[float | None]
    compiled_ms: list[float | None]
    correct: list[bool | None] | None = None
    replayed: list[bool] | None = None
    distributed: list[bool] | None = None


@dataclass
class Page:
    """A big compressed report as its page draws it (``load_page``; ``html.render_html``): its ``Outline``, every
    result's digest in the report's order (the table of every result and the charts read those), and the
    results whose raw samples the page embeds (``sampled``: the first with a side timed)."""

    outline: Outline
    digests: list[Digest]
    sampled: list[Result]


def load_outline(path: str | Path) -> Outline | None:
    """A big compressed report as a terminal shows it (``models.Outline``): everything but its results
    validated, and of the results only those a view lists one by one, found by their digests (not ok, a
    replay, a distributed run, a traced one: a few in a hundred, where a sweep goes well); every other result's
    line is decompressed and passed over, not parsed. None where the report has ``SCREENFUL`` results or fewer
    (the terminal shows each of them), is not compressed with digests that say what is listed (written before
    they were kept), or does not read so (``read`` then reads it whole and names what is wrong). Raises
    ``ReportError`` for a file that cannot be read at all.
    """
    found = _outlined(path, _Listed, 0, _LISTING)
    return None if found is None else found[0]


def load_page(path: str | Path, samples: int) -> Page | None:
    """A big compressed report as its page draws it (``Page``): ``load_outline``'s outline, every digest (its
    columns validated whole, ``DigestColumns``) and the first ``samples`` results with a side timed. None as
    for ``load_outline``, and where the digests were written before those the page reads (``PAGE_FIELDS``).
    Raises ``ReportError`` for a file that cannot be read at all."""
    found = _outlined(path, DigestColumns, samples, (*_LISTING, *PAGE_FIELDS))
    if found is None:
        return None
    outline, columns, sampled = found
    return Page(outline, columns.digests(), sampled)


_Columns = TypeVar("_Columns", _Listed, DigestColumns)
_LISTING: Final = ("correct", "replayed", "distributed")  # the columns that say which results are listed


def _outlined(
    path: str | Path, model: type[_Columns], samples: int, required: tuple[str, ...]
) -> tuple[Outline, _Columns, list[Result]] | None:
    """``load_outline``'s outline, the digest columns read as ``model``, and the first ``samples`` results with a
    side timed (each validated once, listed or not); None as ``load_outline`` says, and before any result is
    read where a ``required`` column is not kept (digests written before it was)."""
    with _past_head(path) as past:
        if past is None:
            return None
        f, fields, digests = past
        columns = model.model_validate_json(digests.removeprefix(DIGESTS_OPEN).removesuffix(b"," + RESULTS_OPEN))
        count = len(columns.status)
        if count <= SCREENFUL or any(getattr(columns, name) is None for name in required):
            return None
        # for mypy: ``required`` holds the listing columns
        assert columns.correct is not None and columns.replayed is not None and columns.distributed is not None
        report = Report.model_validate_json(fields + b'"results":[]}')
        del past, fields, digests
        flags = zip(columns.status, columns.replayed, columns.distributed, columns.traced, strict=True)
        listed = [
            status != "ok" or replayed or distributed or traced for status, replayed, distributed, traced in flags
        ]
        sides = enumerate(zip(columns.eager_ms, columns.compiled_ms, strict=True))
        sample = set(itertools.islice((i for i, timed in sides if timed != (None, None)), samples))
        results: list[Result] = []
        sampled: list[Result] = []
        for i, line in enumerate(f):
            if line.startswith(b"]"):
                if i != count or (line + f.read()).strip() != b"]}":
                    return None
                kept = {name: getattr(report, name) for name in Report.model_fields if name != "results"}
                unchecked = sum(s == "ok" and c is None for s, c in zip(columns.status, columns.correct, strict=True))
                return Outline(**kept, results=results, result_count=count, unchecked=unchecked), columns, sampled
            if i < count and (listed[i] or i in sample):
                result = Result.model_validate_json(line.rstrip(b",\n"))
                if listed[i]:
                    results.append(result)
                if i in sample:
                    sampled.append(result)
    return None  # unreadable, or cut short before the results' end


@contextmanager
def _past_head(path: str | Path) -> Iterator[tuple[io.BufferedReader, bytes, bytes] | None]:
    """A big compressed report's lines past its head (``io.read_head``), with the head's fields and digests line,
    the collector paused: None where the report is not compressed with digests. What the block raises of
    ``UNREADABLE`` (a line that does not validate, a damaged stream) ends the block and is not raised: the
    reader then returns None, and ``read`` reads the report whole and names what is wrong."""
    stored = compressed_bytes(location(path))
    if not stored:
        yield None
        return
    try:
        with collector_paused(), report_lines(stored) as f:
            yield _head_and_lines(f)  # the head not kept here: the reader lets go of it once it is read
    except UNREADABLE:
        pass


def _head_and_lines(f: io.BufferedReader) -> tuple[io.BufferedReader, bytes, bytes] | None:
    head = read_head(f)
    return None if head is None or head[1] is None else (f, head[0], head[1])


class _Version(BaseModel):
    """A compressed report's schema version, from its first line (every other field skipped unread): another
    version than these is read whole (``read``), which names it."""

    schema_version: Literal[2, 3]


_Model = TypeVar("_Model", bound=BaseModel)


def load_results_as(path: str | Path, model: type[_Model]) -> list[_Model] | None:
    """Each result of a big compressed report validated as ``model``: a model that declares the fields of
    ``Result`` a command reads (``export.harness_csv.CsvResult``); every other field of a result's line is
    skipped as it is parsed, and of the rest of the report only its schema version is read (its summary,
    100 MB of JSON at 100,000 groups, and its digests are passed over). None where the report is not compressed
    with digests (an indented report, one written before them, a journal), is of another schema version, or
    does not read so: the caller then reads it whole (``read``), which names what is wrong. Raises
    ``ReportError`` for a file that cannot be read at all."""
    with _past_head(path) as past:
        if past is None:
            return None
        f, fields, _ = past
        _Version.model_validate_json(fields[: fields.index(b"\n") - 1] + b"}")  # the first line, its "," closed
        del past, fields
        results: list[_Model] = []
        for line in f:
            if line.startswith(b"]"):
                return results if (line + f.read()).strip() == b"]}" else None
            results.append(model.model_validate_json(line.rstrip(b",\n")))
    return None  # unreadable, or cut short before the results' end


class _Head(BaseModel):
    """The first lines of a compressed report (``_compressed``) as ``load_glance`` reads them in one pass: the
    fields the gate reads, the summary as ``SummaryGlance`` (labels and decisions), the digests; the results are
    not read. Every other field is skipped unread, as are those of a newer version of the same schema."""

    schema_version: Literal[2, 3]  # another version is read whole (``read``), which names it
    name: str
    complete: bool = True
    environment: Environment
    summary: SummaryGlance
    digests: GateColumns


class _GateHead(BaseModel):
    """``_Head`` less the summary, whose line is not read (``load_glances``: a forked copy reads it)."""

    schema_version: Literal[2, 3]
    name: str
    complete: bool = True
    environment: Environment
    digests: GateColumns


class _SummaryHead(BaseModel):
    """``_Head``'s summary alone (``load_glances``)."""

    schema_version: Literal[2, 3]
    summary: SummaryGlance


def load_glance(path: str | Path) -> Glance:
    """A report as ``compare`` reads it (``digest.Glance``), any report or journal ``read`` takes; as
    ``load_glances``. Raises ``ReportError``."""
    return load_glances(path)[0]


def load_glances(*paths: str | Path) -> list[Glance]:
    """Each report as ``compare`` reads it (``digest.Glance``), any report or journal ``read`` takes. Raises
    ``ReportError``.

    A compressed report whose first lines hold its digests (``_compressed``) is read up to its results and no
    further: none of its results is decompressed or validated. Where this process may fork (``forked.can_fork``),
    the groups' decisions are read from the reports' summaries in a forked copy (``forked.Beside``) while this
    one reads their digests: at 100,000 results each summary is 100 MB of JSON, a third of a report's reading,
    and the copy sends back the decisions alone. Any other report (an indented one, one written before digests or
    decisions, a journal), or one whose first lines do not validate, is read whole (``read``, which names what is
    wrong) and digested.
    """
    if not can_fork():
        return [_glance_here(p) for p in paths]
    with Beside(partial(_decisions_of_each, paths)) as decisions:
        heads = [_head_or_whole(p) for p in paths]
        found = decisions.result()
    return [_glance_of(path, head, decisions) for path, head, decisions in zip(paths, heads, found, strict=True)]


def _glance_of(path: str | Path, head: _GateHead | Glance, decisions: Decided | None) -> Glance:
    """A report's ``Glance`` from its head and its decisions as the copy read them."""
    if isinstance(head, Glance):  # read whole already
        return head
    if decisions is None:  # its summary has no decisions: read whole, and they are worked out
        return glance(read(path))
    return Glance(head.name, head.complete, head.environment, decisions, head.digests.digests())


def _head_or_whole(path: str | Path) -> _GateHead | Glance:
    """A compressed report's head (``_gate_head``), or any other report read whole (``read``, which names what is
    wrong) and digested: the reports in turn, so that the first that cannot be read is the one named."""
    head = _gate_head(path)
    return head if head is not None else glance(read(path))


def _glance_here(path: str | Path) -> Glance:
    """``load_glances`` of one report in one pass, in this process."""
    with _past_head(path) as past:
        if past is not None:
            _, fields, digests = past
            top = _Head.model_validate_json(fields + digests.removesuffix(RESULTS_OPEN) + b'"results":[]}')
            if all(g.decision is not None for g in top.summary.groups):
                return Glance(top.name, top.complete, top.environment, decided(top.summary), top.digests.digests())
    return glance(read(path))  # read whole, which names what is wrong


def _gate_head(path: str | Path) -> _GateHead | None:
    """A compressed report's first line and digests (its summary's line passed over); None where it has none or
    they do not validate."""
    with _past_head(path) as past:
        if past is not None:
            _, fields, digests = past
            first = fields[: fields.index(b"\n") + 1]  # the first line, then the digests' (the summary's left out)
            return _GateHead.model_validate_json(first + digests.removesuffix(RESULTS_OPEN) + b'"results":[]}')
    return None


def _decisions_of_each(paths: tuple[str | Path, ...]) -> list[Decided | None]:
    return [_decisions(path) for path in paths]


def _decisions(path: str | Path) -> Decided | None:
    """A compressed report's groups' decisions (``digest.decided``); None where it has no digests, a group has no
    decision (a summary written before them: the report is read whole, and they are worked out from its
    results) or they do not validate."""
    with _past_head(path) as past:
        if past is not None:
            _, fields, _ = past
            top = _SummaryHead.model_validate_json(fields + b'"results":[]}')
            if all(g.decision is not None for g in top.summary.groups):
                return decided(top.summary)
    return None
