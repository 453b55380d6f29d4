"""The journal: every finished result recorded as it arrives, before anything else sees it.

The journal is the source of truth of a run. The report is derived from the spec and the
journal, so a driver killed at any point loses nothing that had finished, and a rerun with
``resume`` runs only what the journal does not hold yet. A run that finds results of an
earlier one refuses to start unless told to ``resume`` (keep them) or ``overwrite`` (start
over, an explicit deletion). It has two layouts, with the same contents and the same rules:

- **A local file** (``out/r.json`` → ``out/r.journal.jsonl``): one JSON line per result,
  appended and synced. One driver at a time writes it: an exclusive lock (``flock``, released
  by the kernel when the process dies, even by SIGKILL) keeps a second run on the same
  ``--out`` from interleaving lines. A line that does not parse (the tail of a driver killed
  mid-write) is skipped with a warning naming its line number.
- **Objects in a store** (``s3://b/run/r.json`` → the prefix ``s3://b/run/r.journal/``):
  stores have no append, so each result is an object of its own, named
  ``<sequence>-<experiment id>-r<replicate>.json``. The sequence counts results in the order
  they arrived, across the run and its resumes (a resumed run starts after the highest one
  there); it is zero-padded to ``SEQUENCE_DIGITS`` so that names sort in that order, and
  readers sort on its number, so that a longer one still sorts. The name is for ordering and
  for people; what counts is the content. An object is written by one PUT and exists whole or
  not at all; one that does not parse as a result (written by hand or by another program) is
  skipped with a warning naming it. Objects whose names have another shape (the lease below,
  anything else) are not results and are left alone, by ``overwrite`` too.

  One writer at a time, on a store without locks: the run holds a lease, the object
  ``lease.json`` under the prefix, naming its host, process id, start time and a random token.
  It is created with an exclusive create (S3's ``If-None-Match: *`` through s3fs; stores
  without one get a check, then a write) and renewed every ``LEASE_RENEW_S`` while the run
  lasts. A second run refuses to start while the lease is live, ``overwrite`` or not (as the
  lock does). A lease is stale when it was not renewed for ``LEASE_STALE_S``, or at once when
  it names a process of this host that is gone (a driver killed on the same node, as a
  resubmitted ``ray job`` is); a stale lease is taken over. How long it went unrenewed is read
  off the store's own clock alone: the time the store says it last wrote the lease object,
  against the time it says it wrote a probe object (``lease-probe-<token>``) the reader has just
  written and deletes at once; neither the holder's clock nor the reader's enters, so hosts
  whose clocks disagree judge a lease alike. (A store that reports no modification times is
  judged by the ``renewed_at`` the holder wrote, against the reader's clock.) Limits: taking a
  stale lease over is a delete then an exclusive create, so of two runs doing it at once the
  second may delete the first's new lease; and a run whose lease was taken (stalled past
  ``LEASE_STALE_S``) learns it at its next renewal and stops at its next result, but may have
  written one more object meanwhile.

Reading keeps the **first** result of each run: an experiment id and its replicate
(``RunKey``; an experiment with ``replicates: k`` has k runs, 0..k-1). A resumed run never reruns
a run the journal holds, so a second result for the same run can only come from a journal
edited or concatenated by hand; the first is the one every earlier report was built from.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from pydantic import ValidationError

from orchestrator.store.storage import Location, StorageError, join, location, name_of, open_location, parent, problem
from tasks.models import Result

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

JOURNAL_SUFFIX = ".journal.jsonl"  # a local journal: one file beside the report
OBJECT_JOURNAL_SUFFIX = ".journal"  # a journal in a store: a prefix of objects beside the report
SEQUENCE_DIGITS = 8  # result objects' sequence, zero-padded: names sort in arrival order up to 10**8 results
LEASE_NAME = "lease.json"
LEASE_PROBE_PREFIX = "lease-probe-"  # + a reader's token: written, its time read, deleted
LEASE_RENEW_S = 30.0  # how often a run rewrites its lease
LEASE_STALE_S = 120.0  # a lease not renewed for this long (four renewals missed) belongs to a run that is gone

# Where fsspec's ``info()`` puts an object's modification time: s3fs, adlfs, local files and gcsfs,
# gcsfs's raw field; ``created`` (the memory store) where the store rewrites an object as a new one.
_MODIFIED_KEYS = ("LastModified", "last_modified", "mtime", "updated", "created")
_RESULT_NAME = re.compile(r"^(\d+)-.*\.json$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

RunKey = tuple[str, int]  # (experiment id, replicate): one run of an experiment


def run_key(result: Result) -> RunKey:
    return (result.experiment_id, result.replicate)


@overload
def journal_path(report: Path) -> Path: ...
@overload
def journal_path(report: str) -> str: ...
def journal_path(report: Location) -> Location:
    """Beside the report: ``out/r.json`` → ``out/r.journal.jsonl``; ``s3://b/run/r.json`` → ``s3://b/run/r.journal``.

    A ``str`` is a URL (``orchestrator.store.storage.location`` turns local strings into paths).
    """
    if isinstance(report, Path):
        return report.with_name(report.stem + JOURNAL_SUFFIX)
    return join(parent(report), Path(name_of(report)).stem + OBJECT_JOURNAL_SUFFIX)


class JournalError(RuntimeError):
    """The journal cannot be used as asked; the message is one line meant for the user."""


@dataclass
class JournalContents:
    """What a journal holds: the first result of each run (experiment id, replicate), in journal order."""

    results: dict[RunKey, Result] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # one line per line (or object) skipped or repeated

    def __len__(self) -> int:
        return len(self.results)


def read_journal(path: Location) -> JournalContents:
    """Every result of the journal at ``path`` (a missing one: empty); never raises for bad lines or objects.

    ``path`` is a local ``*.journal.jsonl``, or a URL: of a journal's prefix of objects, or of a
    ``*.journal.jsonl`` copied to a store; a local folder is read as a prefix of objects copied
    from a store. A store that cannot be read raises ``StorageError``.
    """
    where = location(path)
    if isinstance(where, Path) and where.is_dir():
        from fsspec.implementations.local import LocalFileSystem

        return _read_objects(LocalFileSystem(), str(where), where.name)
    if isinstance(where, Path):
        try:
            return _parse_lines(where.read_bytes(), where.name)
        except FileNotFoundError:
            return JournalContents()
    if where.endswith(JOURNAL_SUFFIX):
        fs, key = open_location(where)
        try:
            return _parse_lines(bytes(fs.cat_file(key)), name_of(where))
        except FileNotFoundError:
            return JournalContents()
        except Exception as e:
            raise StorageError(problem(e, where)) from None
    fs, root = open_location(where.rstrip("/"))
    try:
        return _read_objects(fs, root, name_of(where))
    except Exception as e:
        raise StorageError(problem(e, where)) from None


def _parse_lines(data: bytes, name: str) -> JournalContents:
    """The results of a local journal's bytes, one JSON line each."""
    contents, repeats = JournalContents(), 0
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            result = Result.model_validate_json(line)
        except ValidationError as e:
            cut = number == len(lines) and not data.endswith(b"\n")
            why = "cut short, as by a driver killed while writing it" if cut else _first_error(e)
            contents.warnings.append(f"{name}: skipped line {number}, which is not a result ({why})")
            continue
        repeats += not _keep_first(contents, result)
    _warn_repeats(contents, repeats, name)
    return contents


def _result_names(fs: AbstractFileSystem, root: str) -> list[str]:
    """The names of the result objects under ``root``, in sequence order."""
    fs.invalidate_cache(root)  # listings are cached per process: another run may have written since
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    names = [name_of(str(p)) for p in entries]
    return sorted((n for n in names if _RESULT_NAME.match(n)), key=lambda n: (_sequence(n), n))


def _sequence(name: str) -> int:
    match = _RESULT_NAME.match(name)
    return int(match.group(1)) if match else -1


def _read_objects(fs: AbstractFileSystem, root: str, label: str) -> JournalContents:
    """The results of a journal's objects, fetched together, kept in sequence order."""
    contents, repeats = JournalContents(), 0
    names = _result_names(fs, root)
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
            contents.warnings.append(f"{label}/{name}: skipped, which is not a result ({_first_error(e)})")
            continue
        repeats += not _keep_first(contents, result)
    _warn_repeats(contents, repeats, label)
    return contents


def _keep_first(contents: JournalContents, result: Result) -> bool:
    """Add ``result`` unless its run is there already (then False: a repeat)."""
    key = run_key(result)
    if key in contents.results:
        return False
    contents.results[key] = result
    return True


def _warn_repeats(contents: JournalContents, repeats: int, name: str) -> None:
    if repeats:
        contents.warnings.append(
            f"{name}: {repeats} repeated result(s) of a run already in the journal; kept the first"
        )


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def _refusal(where: str, contents: JournalContents) -> JournalError:
    held = f"holds {len(contents)} result(s)" if len(contents) else "is the journal"
    return JournalError(
        f"{where} already {held} of an earlier run: "
        "pass --resume to keep them and run the rest, or --overwrite to start over"
    )


class Journal:
    """The journal of one run, open for writing and held by this run alone for as long as it lasts.

    ``path``: a local ``*.journal.jsonl`` (a ``str`` that is no URL counts as local) or the URL of
    a prefix in an object store (``journal_path`` of the report's location). ``resume``: keep what
    the journal holds (``previous``) and add after it. ``overwrite``: empty it. Neither, on a
    journal that already holds something: ``JournalError``, before anything else has started.
    ``lease_renew_s``: how often a run on a store renews its lease (``LEASE_RENEW_S``).
    """

    def __init__(
        self, path: Location, *, resume: bool = False, overwrite: bool = False, lease_renew_s: float = LEASE_RENEW_S
    ) -> None:
        if resume and overwrite:
            raise JournalError("resume and overwrite exclude each other: keep the earlier results, or start over")
        self.path: Location = location(path)
        self._log = _FileLog(self.path) if isinstance(self.path, Path) else _ObjectLog(self.path, lease_renew_s)
        self.previous = self._log.open(resume=resume, overwrite=overwrite)

    def append(self, result: Result) -> None:
        """Record ``result`` durably (synced, or stored) before returning."""
        self._log.append(result)

    def close(self) -> None:
        self._log.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _FileLog:
    """A local journal: one file, appended to and synced, locked with ``flock``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, *, resume: bool, overwrite: bool) -> JournalContents:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")
        try:
            self._lock()
            return self._prepare(resume=resume, overwrite=overwrite)
        except BaseException:
            self._file.close()
            raise

    def _lock(self) -> None:
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JournalError(
                f"{self.path} is being written by another compilebench run; wait for it or choose another --out"
            ) from None

    def _prepare(self, *, resume: bool, overwrite: bool) -> JournalContents:
        size = os.fstat(self._file.fileno()).st_size
        if size == 0:
            return JournalContents()
        if overwrite:
            self._file.truncate(0)
            return JournalContents()
        contents = read_journal(self.path)
        if not resume:
            raise _refusal(str(self.path), contents)
        with self.path.open("rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":  # a line cut short by a kill: new lines start on a line of their own
                self._file.write(b"\n")
        return contents

    def append(self, result: Result) -> None:
        self._file.write(result.model_dump_json().encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed and os.fstat(self._file.fileno()).st_size == 0:
            self.path.unlink(missing_ok=True)  # nothing was recorded (the cluster was unreachable…): leave no trace
        self._file.close()  # closing releases the lock


@dataclass(frozen=True)
class Lease:
    """Who writes a journal in a store: the content of its ``lease.json``."""

    host: str
    pid: int
    started_at: float  # epoch seconds, the holder's clock: for people
    renewed_at: float  # the holder's clock: staleness is judged by the store's (``_ObjectLog.lease_age``)
    token: str  # random: tells this run's lease from a later one of the same process

    @staticmethod
    def mine() -> Lease:
        now = time.time()
        return Lease(socket.gethostname(), os.getpid(), now, now, uuid.uuid4().hex)

    @staticmethod
    def parse(data: bytes) -> Lease | None:
        """The lease in ``data``, or None for anything that is not one."""
        try:
            fields = json.loads(data)
            return Lease(
                str(fields["host"]),
                int(fields["pid"]),
                float(fields["started_at"]),
                float(fields["renewed_at"]),
                str(fields["token"]),
            )
        except (ValueError, TypeError, KeyError):
            return None

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    def stale(self, age_s: float) -> str | None:
        """Why the run holding this lease is gone, or None when it may still be running; ``age_s``:
        seconds since the lease was last written."""
        if self.host == socket.gethostname() and not _alive(self.pid):
            return f"its process {self.pid} on this host is gone"
        if age_s > LEASE_STALE_S:
            return f"not renewed for {age_s:.0f} s"
        return None

    def describe(self, age_s: float | None = None) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
        renewed = f", renewed {age_s:.0f} s ago" if age_s is not None else ""
        return f"host {self.host}, pid {self.pid}, since {started}{renewed}"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


class _ObjectLog:
    """A journal in an object store: one object per result under a prefix, held by a lease."""

    def __init__(self, url: str, renew_s: float) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = open_location(self.url)
        self.lease_key = join(self.root, LEASE_NAME)
        self.lease = Lease.mine()
        self.renew_s = renew_s
        self.next = 0  # the sequence number of the next result object
        self.lost: str | None = None  # why this run no longer holds its lease
        self._held = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def open(self, *, resume: bool, overwrite: bool) -> JournalContents:
        try:
            self._take_lease()
            contents = self._prepare(resume=resume, overwrite=overwrite)
        except BaseException:
            self.close()
            raise
        self._renewer = threading.Thread(target=self._renew_until_closed, name="journal-lease", daemon=True)
        self._renewer.start()
        return contents

    def _take_lease(self) -> None:
        """Create the lease, taking over a stale one; ``JournalError`` while another run holds it."""
        for _ in range(2):
            try:
                self._create(self.lease_key, self.lease.encode())
                self._held = True
                return
            except FileExistsError:
                pass
            except Exception as e:
                raise JournalError(problem(e, self.url)) from None
            held = self._read_lease()
            age = self.lease_age(held) if held is not None else None
            if held is not None and age is not None and held.stale(age) is None:
                raise JournalError(
                    f"{self.url} is being written by another compilebench run ({held.describe(age)}); wait for it or "
                    f"choose another --out (a run that is gone loses its lease {LEASE_STALE_S:.0f} s after its last "
                    "renewal)"
                )
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.lease_key)  # stale, or not a lease at all: take it over
        raise JournalError(f"{self.url}: another run took the journal's lease while this one was taking it over")

    def _create(self, key: str, data: bytes) -> None:
        """Write ``key`` only if it does not exist: ``FileExistsError`` otherwise."""
        try:
            self.fs.pipe_file(key, data, mode="create")
        except TypeError:  # a store whose fsspec package predates exclusive writes: check, then write
            if self.fs.exists(key):
                raise FileExistsError(key) from None
            self.fs.pipe_file(key, data)

    def lease_age(self, held: Lease) -> float | None:
        """Seconds since the lease object was last written, by the store's clock: its modification
        time against that of a probe object written now. None when the lease object is gone. A
        store that reports no modification times: ``held.renewed_at`` against this host's clock."""
        try:
            written = self._modified(self.lease_key)
        except FileNotFoundError:
            return None
        now = self._store_now() if written is not None else None
        if written is None or now is None:
            return max(time.time() - held.renewed_at, 0.0)
        return max(now - written, 0.0)

    def _store_now(self) -> float | None:
        """The store's time now: when it says it wrote a probe object (deleted at once)."""
        probe = join(self.root, LEASE_PROBE_PREFIX + self.lease.token)
        try:
            self.fs.pipe_file(probe, b"")
            return self._modified(probe)
        finally:
            with contextlib.suppress(Exception):
                self.fs.rm_file(probe)

    def _modified(self, key: str) -> float | None:
        """When the store last wrote ``key`` (epoch seconds), or None when it does not say."""
        self.fs.invalidate_cache(key)  # info() may answer from a listing made before the last write
        return _modified_time(self.fs.info(key))

    def _read_lease(self) -> Lease | None:
        try:
            return Lease.parse(bytes(self.fs.cat_file(self.lease_key)))
        except FileNotFoundError:
            return None

    def _prepare(self, *, resume: bool, overwrite: bool) -> JournalContents:
        try:
            names = _result_names(self.fs, self.root)
            if not names:
                return JournalContents()
            if overwrite:
                self.fs.rm([join(self.root, n) for n in names])
                return JournalContents()
            contents = _read_objects(self.fs, self.root, name_of(self.url))
        except Exception as e:
            raise JournalError(problem(e, self.url)) from None
        if not resume:
            raise _refusal(self.url, contents)
        self.next = _sequence(names[-1]) + 1
        return contents

    def append(self, result: Result) -> None:
        if self.lost:
            raise JournalError(self.lost)
        name = f"{self.next:0{SEQUENCE_DIGITS}d}-{_UNSAFE.sub('_', result.experiment_id)}-r{result.replicate}.json"
        try:
            self.fs.pipe_file(join(self.root, name), result.model_dump_json().encode())
        except Exception as e:
            raise JournalError(problem(e, join(self.url, name))) from None
        self.next += 1

    def _renew_until_closed(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                self.renew()
            except Exception:  # the store did not answer: the lease has LEASE_STALE_S to be renewed next time
                continue
            if self.lost:
                return

    def renew(self) -> None:
        """Rewrite the lease with a new ``renewed_at``, unless another run has taken it (``lost``)."""
        held = self._read_lease()
        if held is None or held.token != self.lease.token:
            who = f"({held.describe()})" if held else "(its lease object is gone)"
            self.lost = (
                f"{self.url}: this run lost the journal's lease to another run {who}; it stops here: rerun with "
                "--resume once no other run writes there"
            )
            self._held = False
            return
        self.lease = replace(self.lease, renewed_at=time.time())
        self.fs.pipe_file(self.lease_key, self.lease.encode())

    def close(self) -> None:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        if self._held:
            self._held = False
            with contextlib.suppress(Exception):  # left behind, the lease goes stale on its own
                self.fs.rm_file(self.lease_key)


def _modified_time(info: dict[str, Any]) -> float | None:
    """An object's modification time in fsspec's ``info()``, as epoch seconds: a ``datetime`` (one
    without a zone is UTC), a number, or an ISO 8601 string; None where there is none."""
    for key in _MODIFIED_KEYS:
        value = info.get(key)
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None
