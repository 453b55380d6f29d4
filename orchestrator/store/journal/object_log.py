"""The journal in an object store (``s3://b/run/r.json`` → the prefix ``s3://b/run/r.journal/``): stores
have no append, so each result is an object of its own, written by one PUT (whole or not at all) and
named by ``reading.object_name`` with a sequence that counts results in arrival order across the run
and its resumes (a resumed run starts after the highest one there). Objects of another name (the
lease, anything else) are not results and are left alone, by ``overwrite`` too.

One writer at a time, on a store without locks: the run holds a lease, the object ``lease.json``
under the prefix, naming its host, process id, start time and a random token. Every write of it is
conditional on what the run read or wrote last (``orchestrator.store.storage``: S3's ``If-None-Match:
*`` to create it, ``If-Match: <ETag>`` to take over a stale one, to renew it every ``LEASE_RENEW_S``
and to delete it at the end), so of two runs reaching for it at once exactly one holds it, and a run
whose lease was taken learns it at its next renewal instead of overwriting the new holder's. A lease
is stale when it was not renewed for ``LEASE_STALE_S``, or at once when it names a process of this
host that is gone. How long it went unrenewed is read off the store's clock alone (the lease object's
modification time against that of a probe object written now), so hosts whose clocks disagree judge
a lease alike. On a store without conditional writes the conditions are emulated by a read then a
write, and the run says so (``NOT_CONDITIONAL``). The limits of this are in ``orchestrator.store.journal``.

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
from pathlib import Path

from orchestrator.store.journal.contents import JournalContents, JournalError, refusal
from orchestrator.store.journal.reading import object_name, read_objects, result_names, sequence_of
from orchestrator.store.storage import (
    ConditionFailed,
    Version,
    create_only,
    delete_version,
    join,
    modified_time,
    name_of,
    open_location,
    problem,
    read_version,
    replace_version,
    without_conditions,
)
from tasks.models import Result

LEASE_NAME = "lease.json"
LEASE_PROBE_PREFIX = "lease-probe-"  # + a reader's token: written, its time read, deleted
LEASE_RENEW_S = 30.0  # how often a run rewrites its lease
LEASE_STALE_S = 120.0  # a lease not renewed for this long (four renewals missed) belongs to a run that is gone
TAKE_ATTEMPTS = 3  # reads of the lease a run makes while others keep changing it, before it gives up

# The note of a run on a store without conditional writes (``.format(url=..., why=...)``).
NOT_CONDITIONAL = (
    "{url}: {why}, so the journal's lease is taken and renewed by a read then a write: two runs started on "
    "this journal at the same moment could both run"
)


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
        """Who holds the lease and since when; given ``age_s`` (seconds since its last renewal, the
        store's clock), also when it expires unless renewed (this host's clock)."""
        started = _utc(self.started_at)
        if age_s is None:
            return f"host {self.host}, pid {self.pid}, since {started}"
        left = max(LEASE_STALE_S - age_s, 0.0)
        return (
            f"host {self.host}, pid {self.pid}, since {started}, renewed {age_s:.0f} s ago; "
            f"the lease expires at {_utc(time.time() + left)} (in {left:.0f} s) unless renewed"
        )


def _utc(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


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
        self.tag = ""  # the version tag of the lease as this run last wrote it
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
        if why := without_conditions(self.fs, self.url):
            contents.warnings.append(NOT_CONDITIONAL.format(url=self.url, why=why))
        self._renewer = threading.Thread(target=self._renew_until_closed, name="journal-lease", daemon=True)
        self._renewer.start()
        return contents

    def _take_lease(self) -> None:
        """Create the lease if there is none (``If-None-Match: *``), else take it over if stale, only
        if it is still the version read (``If-Match``); ``JournalError`` naming the holder while
        another run holds it. A condition that fails means another run moved first: read again."""
        try:
            for _ in range(TAKE_ATTEMPTS):
                with contextlib.suppress(FileExistsError):
                    self._hold(create_only(self.fs, self.lease_key, self.lease.encode()))
                    return
                try:
                    found = read_version(self.fs, self.lease_key)
                except FileNotFoundError:
                    continue  # given back meanwhile: create it again
                held = Lease.parse(found.data)
                if held is not None and held.token == self.lease.token:  # this run's own write, answered late
                    self._hold(found.tag)
                    return
                age = self.lease_age(found, held) if held is not None else None
                if held is not None and age is not None and held.stale(age) is None:
                    raise JournalError(
                        f"{self.url} is being written by another compilebench run ({held.describe(age)}); wait for "
                        "it or choose another --out"
                    )
                with contextlib.suppress(ConditionFailed):  # stale, or not a lease at all: take it over
                    self._hold(replace_version(self.fs, self.lease_key, self.lease.encode(), found.tag))
                    return
        except JournalError:
            raise
        except Exception as e:
            raise JournalError(problem(e, self.url)) from None
        raise JournalError(
            f"{self.url}: the journal's lease changed hands {TAKE_ATTEMPTS} times while this run was taking it; "
            "another run is starting on it"
        )

    def _hold(self, tag: str) -> None:
        self.tag, self._held = tag, True

    def lease_age(self, found: Version, held: Lease) -> float:
        """Seconds since the lease object ``found`` was last written, by the store's clock: its
        modification time against that of a probe object written now. A store that reports no
        modification times: ``held.renewed_at`` against this host's clock."""
        now = self._store_now() if found.modified is not None else None
        if found.modified is None or now is None:
            return max(time.time() - held.renewed_at, 0.0)
        return max(now - found.modified, 0.0)

    def _store_now(self) -> float | None:
        """The store's time now: when it says it wrote a probe object (deleted at once)."""
        probe = join(self.root, LEASE_PROBE_PREFIX + self.lease.token)
        try:
            self.fs.pipe_file(probe, b"")
            self.fs.invalidate_cache(probe)  # info() may answer from a listing made before the write
            return modified_time(self.fs.info(probe))
        finally:
            with contextlib.suppress(Exception):
                self.fs.rm_file(probe)

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
        """Rewrite the lease with a new ``renewed_at`` only if it is still the version this run last
        wrote (``If-Match``); when it is not, and the lease read now is not this run's own (a renewal
        the store made but whose answer was lost), another run has taken it: ``lost``."""
        renewed = replace(self.lease, renewed_at=time.time())
        try:
            self.tag, self.lease = replace_version(self.fs, self.lease_key, renewed.encode(), self.tag), renewed
            return
        except ConditionFailed:
            pass
        try:
            found: Version | None = read_version(self.fs, self.lease_key)
        except FileNotFoundError:
            found = None
        held = Lease.parse(found.data) if found is not None else None
        if found is not None and held is not None and held.token == self.lease.token:
            self.tag, self.lease = found.tag, held  # renewed at the next turn, from this version
            return
        who = f"({held.describe()})" if held else "(its lease object is gone)"
        self.lost = (
            f"{self.url}: this run lost the journal's lease to another run {who}; it stops here: rerun with "
            "--resume once no other run writes there"
        )
        self._held = False

    def close(self) -> None:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        if self._held:
            self._held = False
            with contextlib.suppress(Exception):  # another's now (ConditionFailed), or left to go stale on its own
                delete_version(self.fs, self.lease_key, self.tag)
