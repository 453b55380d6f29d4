"""The journal in an object store (``s3://b/run/r.json`` → the prefix ``s3://b/run/r.journal/``): stores
have no append, so each result is an object of its own, written by one PUT (whole or not at all) and
named by ``reading.object_name`` with a sequence that counts results in arrival order across the run
and its resumes (a resumed run starts after the highest one there). Objects of another name (the
lease, anything else) are not results and are left alone, by ``overwrite`` too.

One writer at a time, on a store without locks: the run holds a lease, the object ``lease.json``
under the prefix, naming its host, process id, start time and a random token. It is created with an
exclusive create (S3's ``If-None-Match: *`` through s3fs; stores without one get a check, then a
write) and renewed every ``LEASE_RENEW_S`` on a thread while the run lasts. A lease is stale when it
was not renewed for ``LEASE_STALE_S``, or at once when it names a process of this host that is gone;
a stale lease is taken over. How long it went unrenewed is read off the store's clock alone (the
lease object's modification time against that of a probe object written now), so hosts whose clocks
disagree judge a lease alike. The limits of this are in ``orchestrator.store.journal``.

Imports ``contents`` and ``reading`` of the package.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.store.journal.contents import JournalContents, JournalError, refusal
from orchestrator.store.journal.reading import object_name, read_objects, result_names, sequence_of
from orchestrator.store.storage import join, name_of, open_location, problem
from tasks.models import Result

LEASE_NAME = "lease.json"
LEASE_PROBE_PREFIX = "lease-probe-"  # + a reader's token: written, its time read, deleted
LEASE_RENEW_S = 30.0  # how often a run rewrites its lease
LEASE_STALE_S = 120.0  # a lease not renewed for this long (four renewals missed) belongs to a run that is gone

# Where fsspec's ``info()`` puts an object's modification time: s3fs, adlfs, local files and gcsfs,
# gcsfs's raw field; ``created`` (the memory store) where the store rewrites an object as a new one.
_MODIFIED_KEYS = ("LastModified", "last_modified", "mtime", "updated", "created")


@dataclass(frozen=True)
class Lease:
    """Who writes a journal in a store: the content of its ``lease.json``."""

    host: str
    pid: int
    started_at: float  # epoch seconds, the holder's clock: for people
    renewed_at: float  # the holder's clock: staleness is judged by the store's (``ObjectLog.lease_age``)
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


class ObjectLog:
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
            names = result_names(self.fs, self.root)
            if not names:
                return JournalContents()
            if overwrite:
                self.fs.rm([join(self.root, n) for n in names])
                return JournalContents()
            contents = read_objects(self.fs, self.root, name_of(self.url))
        except Exception as e:
            raise JournalError(problem(e, self.url)) from None
        if not resume:
            raise refusal(self.url, contents)
        self.next = sequence_of(names[-1]) + 1
        return contents

    def append(self, result: Result) -> None:
        if self.lost:
            raise JournalError(self.lost)
        name = object_name(self.next, result)
        try:
            self.fs.pipe_file(join(self.root, name), result.model_dump_json().encode())
        except Exception as e:
            raise JournalError(problem(e, join(self.url, name))) from None
        self.next += 1

    def write(self, result: Result) -> None:
        """A result's object is stored whole by its one PUT: writing it is appending it."""
        self.append(result)

    def sync(self) -> None:
        """Nothing to do: every object written is stored."""

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
