"""History: the same measurement followed across many reports in time order, and where it changed.

One series per measured thing (target, params, configuration, device model, phase, precision) and
metric (``METRICS``); one point per report, the median of that report's valid results (its
replicates). Change points come from the detector (``changepoints.change_points``): every change
carries the report where it starts, the levels before and after, the relative change and a p-value;
every series its noise and the smallest step it could have shown (``changepoints.detectable``), each
metric's smallest change to report (``MIN_CHANGE``, ``--min-change``) taken into account.

Here: reading the reports (a file, a folder, a glob, a store's URL), building the series, and showing
them on a terminal, as Markdown or JSON (the page is ``history_html``). Imports the detector, the
reading of reports (``io``), the summary and the cells; like the rest of the report side, nothing
here imports Ray or torch.
"""

from __future__ import annotations

import glob
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter, ValidationError
from rich.console import Console
from rich.text import Text

from orchestrator.report.cells import SCREENFUL, Rows, clipped, markdown_table, ms, rich_table, seconds, times
from orchestrator.report.changepoints import MIN_SEGMENT, change_points, detectable, relative_noises
from orchestrator.report.io import ReportError, history_path, read
from orchestrator.report.models import Report, group_label
from orchestrator.report.points import (
    HISTORY_SUFFIX,
    METRICS,
    Metric,
    ReportPoints,
    metric_value,
    report_points,
)
from orchestrator.store.storage import (
    Location,
    StorageError,
    join,
    location,
    missing_bucket,
    open_location,
    parent,
    read_bytes,
)
from orchestrator.store.storage import glob as glob_objects
from tasks.heap import collector_paused
from tasks.models import Phase, Precision

__all__ = ["METRICS", "Metric", "metric_value"]  # history's metrics, defined with the points beside each report
READERS: Final = 16  # history files read at once: a store answers each GET in tens of ms

# The smallest change each metric's series report, relative (``--min-change``), however significant: below it a
# change is real but too small to act on. Speed: 2%, below the 5% that PyTorch's dashboard and the regression
# gate act on, so that a 5% step always clears it. Compile latency: 5%, a third of the dashboard's 15%.
MIN_CHANGE: Final[dict[Metric, float]] = {
    "speedup": 0.02,
    "eager_ms": 0.02,
    "compiled_ms": 0.02,
    "compile_s_cold": 0.05,
    "compile_s_warm": 0.05,
    "compile_s_shared": 0.05,
}


class Point(BaseModel):
    """One report's value of a series: the median over the report's valid results of it (its replicates)."""

    report: str  # the report's file, as found
    created_at: str
    value: float


class Change(BaseModel):
    """A change point: ``index`` is the first point after the change, ``report`` that point's report.

    ``before`` and ``after`` are the medians of the segments on either side (up to the neighbouring
    changes); ``change`` is ``after / before - 1``; ``p`` the t-test's p-value between the segments,
    corrected for the search over where the change is (``changepoints.search_p``).
    """

    index: int
    report: str
    before: float
    after: float
    change: float
    p: float


class Series(BaseModel):
    """One metric of one measured thing across the reports, oldest first, with its change points.

    ``noise`` is the points' robust noise deviation, relative (``changepoints.relative_noise``; None below 3
    points); ``detectable`` the smallest relative step a change 3 reports before the end would need to be
    flagged at 90% power with this many points and this noise, never below the metric's smallest change
    (``changepoints.detectable``; None below 6 points, where no change can be tested).
    """

    target: str
    params: dict[str, Any]
    config: str
    device_model: str
    phase: Phase
    precision: Precision
    metric: Metric
    points: list[Point]
    changes: list[Change]
    noise: float | None
    detectable: float | None

    @property
    def label(self) -> str:
        """``seed.foo3 shape=[256, 256] [inductor] on A100``."""
        group = group_label(self.target, self.params, self.phase, self.precision)
        return f"{group} [{self.config}] on {self.device_model}"


class History(BaseModel):
    series: list[Series]


_POINTS: Final = TypeAdapter(list[Point])


# ------------------------------------------------------------------------------------------ reading


def report_paths(patterns: Sequence[str]) -> list[Location]:
    """The files that ``patterns`` name, each once: a file as given, a directory's ``*.json`` and ``*.json.gz``
    files (not its journals, nor the history files beside its reports), a glob's matches (directories among
    them expanded alike, history files left out). Raises ``ReportError`` for a
    pattern that matches no report. A URL is read from its store alike: ``s3://bucket/nightly/*.json``,
    ``s3://bucket/nightly`` (``orchestrator.store.storage``)."""
    paths: dict[Location, Location] = {}  # the file itself -> the first name it was found by
    for pattern in patterns:
        if isinstance(location(pattern), str):  # a URL: the objects of a store, each known by its URL
            for url in _objects(pattern):
                paths.setdefault(url, url)
            continue
        matches = [pattern]
        if glob.has_magic(pattern):
            matches = sorted(m for m in glob.glob(pattern) if not m.endswith(HISTORY_SUFFIX))
        found = [p for match in matches for p in _files(Path(match))]
        if not found:
            what = "no report matches" if glob.has_magic(pattern) else "no *.json report in"
            raise ReportError(f"{what} {pattern}")
        for p in found:
            paths.setdefault(p.resolve(), p)
    return list(paths.values())


def _objects(pattern: str) -> list[str]:
    """A URL's reports: a glob's ``*.json`` matches, an object as given, or a folder's ``*.json`` objects;
    never the objects of a journal (``*.journal/``). Raises ``ReportError`` when there are none."""
    try:
        if glob.has_magic(pattern):
            matches = glob_objects(pattern)
        elif pattern.endswith((".json", ".json.gz")):
            return [pattern]  # an object that is not there: reading it says so
        else:
            matches = glob_objects(join(pattern, "*.json")) + glob_objects(join(pattern, "*.json.gz"))
    except StorageError as e:
        raise ReportError(str(e)) from None
    found = sorted(m for m in matches if _is_report(m) and not parent(m).endswith(".journal"))
    if not found:
        what = "no report matches" if glob.has_magic(pattern) else "no *.json report in"
        raise ReportError(missing_bucket(pattern) or f"{what} {pattern}")
    return found


def _is_report(name: str) -> bool:
    return name.endswith((".json", ".json.gz")) and not name.endswith(HISTORY_SUFFIX)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if _is_report(p.name) and p.is_file())
    return [path]  # a file, or a name that is not there: reading it says so


def load_reports(patterns: Sequence[str]) -> list[tuple[str, Report]]:
    """Every report ``patterns`` name, read (``orchestrator.report.read``) and ordered by ``created_at``
    (ties by file name). Raises ``ReportError`` for a file that is not a readable report."""
    loaded = [(str(path), read(path)) for path in report_paths(patterns)]
    return sorted(loaded, key=lambda item: (_created(item[0], item[1]), item[0]))


def _created(where: str, report: Report | ReportPoints) -> datetime:
    try:
        when = datetime.fromisoformat(report.created_at)
    except ValueError:
        raise ReportError(f"{where}: created_at {report.created_at!r} is not an ISO 8601 time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def load_points(patterns: Sequence[str]) -> list[tuple[str, ReportPoints]]:
    """The points of every report ``patterns`` name, ordered by ``created_at`` (ties by file name): from the
    history file beside each report where there is one of the report as it is (``points``), else from the
    report, read whole. History files are read ``READERS`` at a time. Raises ``ReportError``."""
    paths = report_paths(list(patterns))
    with ThreadPoolExecutor(READERS) as pool:
        loaded = list(pool.map(points_of, paths))
    return sorted(loaded, key=lambda item: (_created(item[0], item[1]), item[0]))


def points_of(path: Location) -> tuple[str, ReportPoints]:
    """One report's points: its history file's, if that file is the report's as it is now (the same name and
    size), else from the report, read whole."""
    kept = _history_file(path)
    if kept is not None:
        return str(path), kept
    name = path.name if isinstance(path, Path) else path.rsplit("/", 1)[-1]
    return str(path), report_points(read(path), name)


def _history_file(path: Location) -> ReportPoints | None:
    """The history file beside the report at ``path``, where it is there, valid and of this report."""
    beside = history_path(path)
    try:
        if isinstance(path, Path):
            if not isinstance(beside, Path) or not beside.is_file():
                return None
            data, size = beside.read_bytes(), path.stat().st_size
        else:
            fs, where = open_location(path)
            data, size = read_bytes(str(beside)), fs.size(where)
        points = ReportPoints.model_validate_json(data)
    except (OSError, StorageError, ValidationError, FileNotFoundError):
        return None  # none, or not one this version reads: the report is read whole
    name = path.name if isinstance(path, Path) else path.rsplit("/", 1)[-1]
    return points if points.report == name and points.report_bytes == size else None


# ------------------------------------------------------------------------------------------- series


_Key = tuple[str, str, str, str, Phase, Precision, Metric]  # target, params (JSON), config, device model, ...


def build_history(reports: Sequence[tuple[str, Report]], min_change: Mapping[Metric, float] | None = None) -> History:
    """Every series of ``reports`` (given oldest first), with its change points, each metric's smallest
    change ``min_change`` (``MIN_CHANGE`` for the metrics it leaves out).

    A report's point in a series is the median of its results' values for it (the replicates of one
    experiment, and any experiment differing only in what the series leaves out, such as the seed;
    ``points.report_points``). A report with no valid value has no point in that series: a gap, never a zero.
    """
    return series_of([(where, report_points(r, where)) for where, r in reports], min_change)


def series_of(reports: Sequence[tuple[str, ReportPoints]], min_change: Mapping[Metric, float] | None = None) -> History:
    """``build_history`` from the reports' points (``load_points``), given oldest first."""
    values: dict[_Key, list[tuple[int, float]]] = {}
    firsts: dict[_Key, dict[str, Any]] = {}  # the params of the first point of each series, as its report names them
    for i, (_, kept) in enumerate(reports):
        things = kept.things.keys()
        for thing, metric, value in zip(kept.thing, kept.metric, kept.value, strict=True):
            key = (*things[thing], metric)
            values.setdefault(key, []).append((i, value))
            if key not in firsts:
                firsts[key] = kept.things.params[thing]
    smallest = {**MIN_CHANGE, **(min_change or {})}
    order = {m: n for n, m in enumerate(METRICS)}
    keys = sorted(values, key=lambda k: (*k[:6], order[k[6]]))
    series_values = [[v for _, v in values[key]] for key in keys]
    noises = relative_noises(series_values)  # most series are a few points: worked out together, not one by one
    series = []
    for key, values_, noise in zip(keys, series_values, noises, strict=True):
        points = _POINTS.validate_python(  # a series' points at once: quicker than a model each
            [{"report": reports[i][0], "created_at": reports[i][1].created_at, "value": v} for i, v in values[key]]
        )
        testable = len(values_) >= 2 * MIN_SEGMENT  # shorter: no change can be tested, none is detectable
        series.append(
            Series(
                target=key[0],
                params=firsts[key],
                config=key[2],
                device_model=key[3],
                phase=key[4],
                precision=key[5],
                metric=key[6],
                points=points,
                changes=changes_of(points, smallest[key[6]]) if testable else [],
                noise=noise,
                detectable=detectable(values_, min_change=smallest[key[6]]) if testable else None,
            )
        )
    return History(series=series)


def changes_of(points: Sequence[Point], min_change: float = 0.0) -> list[Change]:
    """The change points of a series, each with the medians of the segments on either side of it; none
    smaller than ``min_change`` (relative)."""
    values = [p.value for p in points]
    splits = change_points(values, min_change=min_change)
    bounds = [0, *(s.index for s in splits), len(values)]
    out = []
    for n, split in enumerate(splits):
        before = statistics.median(values[bounds[n] : split.index])
        after = statistics.median(values[split.index : bounds[n + 2]])
        out.append(
            Change(
                index=split.index,
                report=points[split.index].report,
                before=before,
                after=after,
                change=after / before - 1,
                p=split.p,
            )
        )
    return out


# ---------------------------------------------------------------------------------------- rendering

_FORMATS: dict[Metric, Callable[[float | None], str]] = {
    "speedup": times,
    "eager_ms": ms,
    "compiled_ms": ms,
    "compile_s_cold": seconds,
    "compile_s_warm": seconds,
    "compile_s_shared": seconds,
}


def value_text(metric: Metric, value: float | None) -> str:
    """A metric's value as the report's tables write it: ``2.00x``, ``1.234`` ms, ``8.12`` s."""
    return _FORMATS[metric](value)


def change_text(series: Series, change: Change) -> str:
    """``nightly-07.json (2026-01-07): 2.00x -> 1.80x (-10.0%, p=0.0005)``."""
    when = series.points[change.index].created_at[:10]
    before, after = value_text(series.metric, change.before), value_text(series.metric, change.after)
    return f"{change.report} ({when}): {before} -> {after} ({change.change:+.1%}, p={change.p:.2g})"


def detectable_text(series: Series) -> str:
    """``5.3%``: the smallest step the series could have shown (``Series.detectable``), or why there is none."""
    if series.detectable is None:
        return f"none before {2 * MIN_SEGMENT} points"
    return f"{series.detectable:.1%}"


def noise_text(series: Series) -> str:
    return "-" if series.noise is None else f"{series.noise:.1%}"


def _quality(series: Series) -> list[str]:
    return [str(len(series.points)), noise_text(series), detectable_text(series)]


def headline(history: History, reports: int) -> str:
    changed = sum(bool(s.changes) for s in history.series)
    changes = sum(len(s.changes) for s in history.series)
    return f"{reports} report(s), {len(history.series)} series: {changes} change(s) in {changed} series"


def rows(history: History) -> Rows:
    """One row per series with a change: its latest value, its points, its noise, the smallest step it could
    show, and each change."""
    headers = ["series", "metric", "latest", "points", "noise", "detectable", "changes"]
    body = [
        [
            s.label,
            s.metric,
            value_text(s.metric, s.points[-1].value),
            str(len(s.points)),
            noise_text(s),
            detectable_text(s),
            "; ".join(change_text(s, c) for c in s.changes),
        ]
        for s in history.series
        if s.changes
    ]
    return Rows("series that changed", headers, body, {"latest", "points", "noise", "detectable"}, [])


def quiet_rows(history: History, limit: int | None = None) -> Rows:
    """One row per series without a change: its latest value, its points, its noise and the smallest step it
    could have shown, so that "no change" says how large a change it would have seen; the counts per metric
    and how many series are too short to test under it. ``limit``: rows for the first so many series alone
    (a terminal's screenful of a big sweep's hundreds of thousands), the counts still of all of them."""
    quiet = [s for s in history.series if not s.changes]
    headers = ["series", "metric", "latest", "points", "noise", "detectable"]
    body = [[s.label, s.metric, value_text(s.metric, s.points[-1].value), *_quality(s)] for s in quiet[:limit]]
    right = {"latest", "points", "noise", "detectable"}
    return Rows("series without a change", headers, body, right, quiet_notes(quiet), len(quiet))


def quiet_notes(quiet: Sequence[Series]) -> list[str]:
    """How many series have no change, per metric, and how many are too short for any change to be tested."""
    if not quiet:
        return []
    per_metric = Counter(s.metric for s in quiet)
    counts = ", ".join(f"{metric} {per_metric[metric]}" for metric in METRICS if per_metric[metric])
    notes = [
        f"{len(quiet)} series without a change ({counts})",
        f"detectable: the smallest step a change {MIN_SEGMENT} reports before the last would need to be flagged "
        "9 times in 10, at the series' length and noise (never below the metric's --min-change)",
    ]
    short = sum(s.detectable is None for s in quiet)
    if short:
        notes.append(
            f"{short} of them have fewer than {2 * MIN_SEGMENT} points: a change is tested with at least "
            f"{MIN_SEGMENT} reports either side of it"
        )
    return notes


def print_history(console: Console, history: History, reports: int) -> None:
    """The series that changed as a table, then those that did not with what each could have shown, then the
    counts; each table past a screenful its first rows and a note (every row: ``--format markdown`` or ``json``)."""
    for whole in (rows(history), quiet_rows(history, limit=SCREENFUL)):
        view = clipped(whole, rest="every row with --format markdown or json")
        if view.rows:
            console.print(rich_table(view))
        for note in view.notes:
            console.print(Text(note), soft_wrap=True)
    console.print(Text(headline(history, reports)))


def markdown(history: History, reports: int) -> str:
    """The same as GitHub-flavoured Markdown, for pull requests and wikis."""
    changed, quiet = rows(history), quiet_rows(history)
    out = [f"# History: {headline(history, reports)}", ""]
    out.append(markdown_table(changed) if changed.rows else "No change in any series.")
    if quiet.rows:
        out += ["", markdown_table(quiet)]
    if quiet.notes:
        out += ["", *(f"- {note}" for note in quiet.notes)]
    return "\n".join(out) + "\n"


def json_text(history: History) -> str:
    """``{"series": [...]}``: every series with its points and changes."""
    return history.model_dump_json(indent=2) + "\n"


def min_changes(options: Sequence[str]) -> dict[Metric, float]:
    """Each metric's smallest change from ``--min-change`` options: ``METRIC=SIZE`` for one metric, ``SIZE``
    for all of them, where SIZE is a percentage (``3%``) or a fraction (``0.03``) below 1; later options win.
    Raises ``ValueError`` with one line naming the option and the problem."""
    out: dict[Metric, float] = {}
    for option in options:
        name, _, size = option.rpartition("=")
        names: Sequence[Metric] = METRICS if not name else [m for m in METRICS if m == name.strip()]
        if not names:
            raise ValueError(f"--min-change {option!r}: unknown metric {name!r}; the metrics are {', '.join(METRICS)}")
        text = size.strip()
        try:
            value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            value = math.nan
        if not 0 <= value < 1:
            raise ValueError(
                f"--min-change {option!r}: the size must be a percentage such as 3% or a fraction such as 0.03, "
                "at least 0 and below 100%"
            )
        out.update(dict.fromkeys(names, value))
    return out


def history_of(patterns: Iterable[str], min_change: Mapping[Metric, float] | None = None) -> tuple[History, int]:
    """Read the reports ``patterns`` name and build their history, each metric's smallest change ``min_change``
    (``MIN_CHANGE`` for those it leaves out); the number of reports read with it."""
    with collector_paused():  # hundreds of thousands of series, none of them garbage: nothing to collect
        reports = load_points(list(patterns))
        return series_of(reports, min_change), len(reports)
