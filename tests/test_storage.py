"""Reports, pages and journals in an object store: a real S3 API (moto's server on 127.0.0.1) through s3fs.

The server runs in this process for the module; every client, the drivers in subprocesses
included, finds it through ``AWS_ENDPOINT_URL`` alone, as a MinIO or Ceph user would. Drivers
are the real CLI joining the session's Ray instance (``tests.test_resume``'s helpers).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator import api
from orchestrator.cli import app
from orchestrator.plan.spec import load_spec
from orchestrator.report import read, write_report
from orchestrator.store.journal import (
    LEASE_NAME,
    LEASE_STALE_S,
    Journal,
    JournalError,
    Lease,
    journal_path,
    read_journal,
)
from orchestrator.store.storage import (
    ConditionFailed,
    conditional,
    create_only,
    delete_version,
    location,
    open_location,
    read_version,
    replace_version,
)
from tests.conftest import use_s3_endpoint
from tests.lease_race import race
from tests.report_data import make_report, make_result
from tests.test_resume import ROOT, gated_sweep, start

BUCKET = "bench"

TINY = """
name: tiny
defaults:
  device: cpu
  compile: {backend: eager}
  timing: {warmup: 0, repeats: 3}
  check: {enabled: false}
experiments:
  - target: seed.foo
  - target: seed.bar
"""

runner = CliRunner()


class S3:
    """The test server: its endpoint, an s3fs client, and a fresh prefix for each test."""

    def __init__(self, endpoint: str) -> None:
        import s3fs

        self.endpoint = endpoint
        self.fs = s3fs.S3FileSystem(skip_instance_cache=True)
        self.count = 0

    def prefix(self) -> str:
        self.count += 1
        return f"s3://{BUCKET}/t{self.count}"

    def names(self, url: str) -> list[str]:
        """The object names under ``url``, sorted."""
        self.fs.invalidate_cache()
        try:
            return sorted(p.rpartition("/")[2] for p in self.fs.ls(url, detail=False))
        except FileNotFoundError:
            return []

    def backdate(self, url: str, seconds: float) -> None:
        """Make the store say it last wrote the object at ``url`` ``seconds`` earlier than it did."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        bucket, _, key = url.removeprefix("s3://").partition("/")
        stored = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[bucket].keys[key]
        stored.last_modified -= timedelta(seconds=seconds)

    def refuse_credentials(self, refuse: bool) -> None:
        """From now on, check every request's credentials against the server's users (it has none)."""
        count = b"0" if refuse else b"inf"
        url, plain = f"{self.endpoint}/moto-api/reset-auth", {"Content-Type": "text/plain"}
        urllib.request.urlopen(urllib.request.Request(url, data=count, headers=plain))


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Iterator[S3]:
    """The session's S3 server (``conftest.s3_endpoint``) with this module's bucket, every client pointed at it."""
    import s3fs

    with pytest.MonkeyPatch.context() as env:
        use_s3_endpoint(env, s3_endpoint)  # fsspec keeps clients; one made earlier points at another endpoint
        store = S3(s3_endpoint)
        store.fs.mkdir(BUCKET)
        try:
            yield store
        finally:
            s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def address(ray_cluster) -> str:
    """The session's Ray instance, joined by the drivers in subprocesses."""
    import ray

    return ray.get_runtime_context().gcs_address


def no_ray(*args, **kwargs):
    raise AssertionError("connected to Ray before checking the location")


def result(experiment_id: str, replicate: int = 0, started_at: float = 1.0):
    return make_result(experiment_id).model_copy(
        update={"experiment_id": experiment_id, "replicate": replicate, "started_at": started_at}
    )


# ------------------------------------------------------------------ a real run writes to the bucket


def test_a_run_writes_its_report_page_and_journal_as_objects(s3, address, write_spec):
    spec, prefix = write_spec(TINY), s3.prefix()
    out, html = f"{prefix}/r.json", f"{prefix}/r.html"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", str(spec), "--out", out, "--html", html, "--address", address],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"Report: {out}, {html}" in proc.stdout
    ids = [e.id for e in load_spec(spec).experiments]
    assert s3.names(prefix) == ["r.history.json", "r.html", "r.journal", "r.json"]  # no probe left behind
    report = json.loads(s3.fs.cat_file(out))
    assert [r["experiment_id"] for r in report["results"]] == ids and report["complete"] is True
    assert s3.fs.cat_file(html).startswith(b"<!DOCTYPE html>")
    # one object per result, numbered in arrival order; no lease left
    names = s3.names(f"{prefix}/r.journal")
    assert [n[:9] for n in names] == ["00000000-", "00000001-"]
    assert sorted(n[9:] for n in names) == sorted(f"{rid}-r0.json" for rid in ids)
    assert list(read_journal(journal_path(out)).results) == [(n[9:].removesuffix("-r0.json"), 0) for n in names]

    shown = runner.invoke(app, ["report", out, "--format", "csv"])
    assert shown.exit_code == 0, shown.output
    assert all(rid in shown.output for rid in ids)
    rebuilt = runner.invoke(app, ["report", journal_path(out)])
    assert (
        rebuilt.exit_code == 0
        and "INCOMPLETE" in rebuilt.output
        and "rebuilt from the journal r.journal" in (rebuilt.output)
    )
    same = runner.invoke(app, ["compare", out, out, "--format", "json"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.output)["fails"] is False


def test_a_driver_killed_mid_sweep_resumes_from_the_bucket_with_every_experiment_once(
    s3, address, write_spec, tmp_path
):
    """While the first driver runs, a second on the same --out exits 2 in one line naming it (the first
    is held by its gate meanwhile: the refusal costs this test only the second's start)."""
    gate = tmp_path / "gate"
    spec, prefix = write_spec(gated_sweep(gate, free=2)), s3.prefix()
    out, journal = f"{prefix}/r.json", f"{prefix}/r.journal"
    ids = [e.id for e in load_spec(spec).experiments]

    first = start(spec, out, address)  # type: ignore[arg-type]
    deadline = time.monotonic() + 600
    while len([n for n in s3.names(journal) if n != LEASE_NAME]) < 2:
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "no results arrived"
        time.sleep(0.1)
    assert_refused_naming(first.pid, spec, out, address)
    first.kill()  # SIGKILL: no handler runs; its lease stays behind, naming a process that is gone
    first.communicate()
    assert LEASE_NAME in s3.names(journal) and "r.json" not in s3.names(prefix)
    before = read_journal(journal).results
    assert len(before) == 2
    s3.fs.pipe_file(f"{journal}/00000002-garbage-r0.json", b'{"experiment_id": "half')  # not a result
    gate.touch()

    resumed = start(spec, out, address, "--resume")  # type: ignore[arg-type]
    _, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr
    assert "(2 kept from the journal, 4 to run)" in stderr
    assert "r.journal/00000002-garbage-r0.json: skipped, which is not a result (" in stderr
    report = json.loads(s3.fs.cat_file(out))
    assert [r["experiment_id"] for r in report["results"]] == ids  # each once, in spec order
    assert report["complete"] is True and report["summary"]["counts"]["ok"] == len(ids)
    for r in report["results"]:
        if (r["experiment_id"], 0) in before:  # kept as they were, not run again
            assert r["started_at"] == before[(r["experiment_id"], 0)].started_at
    names = s3.names(journal)
    assert LEASE_NAME not in names
    results = [n for n in names if "garbage" not in n]
    assert [n[:8] for n in results] == ["00000000", "00000001", "00000003", "00000004", "00000005", "00000006"]
    assert sorted(n.split("-")[1] for n in results) == sorted(ids)  # nothing ran twice


def assert_refused_naming(holder: int, spec: Path, out: str, address: str) -> None:
    """A driver started on ``out`` while process ``holder`` of this host runs there exits 2 in one line
    naming the holder: host, pid, since when, when the lease expires."""
    second = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", str(spec), "--out", out, "--address", address],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 2, second.stderr
    when, host = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", re.escape(Lease.mine().host)
    assert re.fullmatch(
        rf"error: {re.escape(journal_path(out))} is being written by another compilebench run \(host {host}, "
        rf"pid {holder}, since {when}, renewed \d+ s ago; the lease expires at {when} \(in \d+ s\) unless "
        r"renewed\); wait for it or choose another --out",
        second.stderr.strip(),
    ), second.stderr


def test_the_library_runs_to_a_url_and_overwrite_empties_the_bucket_journal(s3, ray_cluster, write_spec):
    spec, prefix = write_spec(TINY), s3.prefix()
    out = f"{prefix}/r.json"
    first = api.run(spec, out)
    assert first.complete and read(out) == first
    with pytest.raises(JournalError, match="already holds 2 result"):
        api.run(spec, out)
    earlier = f"{prefix}/r.traces/0123456789ab-r0/dedicated_log_torch_trace_old.log"
    s3.fs.pipe_file(earlier, b"an earlier run's trace")
    api.run(spec, out, resume=True)
    assert s3.fs.cat_file(earlier) == b"an earlier run's trace"  # resume keeps the traces
    again = api.run(spec, out, overwrite=True)
    assert "r.traces" not in s3.names(prefix)  # overwrite removes them with the journal
    assert [r.experiment_id for r in again.results] == [r.experiment_id for r in first.results]
    assert all(a.started_at > b.finished_at for a, b in zip(again.results, first.results, strict=True))
    names = s3.names(f"{prefix}/r.journal")
    assert [n[:8] for n in names] == ["00000000", "00000001"]  # the earlier objects are gone
    assert {r.started_at for r in read_journal(f"{prefix}/r.journal").results.values()} == {
        r.started_at for r in again.results
    }


# ------------------------------------------------------------------ the journal in a bucket


def test_an_earlier_bucket_journal_is_refused_kept_or_emptied_only_when_asked(s3):
    url = f"{s3.prefix()}/r.journal"
    with Journal(url) as journal:
        journal.append(result("a"))
        journal.append(result("b"))
    assert s3.names(url) == ["00000000-a-r0.json", "00000001-b-r0.json"]
    with pytest.raises(JournalError) as refused:
        Journal(url)
    assert str(refused.value) == (
        f"{url} already holds 2 result(s) of an earlier run: "
        "pass --resume to keep them and run the rest, or --overwrite to start over"
    )
    assert s3.names(url) == ["00000000-a-r0.json", "00000001-b-r0.json"]  # refusing touched nothing, left no lease

    with Journal(url, resume=True) as journal:
        assert list(journal.previous.results) == [("a", 0), ("b", 0)]
        journal.append(result("a", replicate=1))
    assert s3.names(url) == ["00000000-a-r0.json", "00000001-b-r0.json", "00000002-a-r1.json"]
    assert list(read_journal(url).results) == [("a", 0), ("b", 0), ("a", 1)]

    s3.fs.pipe_file(f"{url}/notes.txt", b"kept")  # not a result's name: never read, never deleted
    with Journal(url, overwrite=True) as journal:
        assert len(journal.previous) == 0
        assert s3.names(url) == [LEASE_NAME, "notes.txt"]
    assert s3.names(url) == ["notes.txt"]
    assert read_journal(url).results == {} and read_journal(f"{s3.prefix()}/none.journal").results == {}


def test_objects_are_read_in_sequence_order_garbage_named_and_the_first_result_of_a_run_kept(s3):
    url = f"{s3.prefix()}/r.journal"
    objects = {
        "100000000-c-r0.json": result("c"),  # past the padding: still after every shorter number
        "00000002-a-r0.json": result("a", started_at=9.0),  # a repeat of run (a, 0): the first one wins
        "00000000-a-r0.json": result("a", started_at=1.0),
        "00000001-b-r0.json": b"{not json",
        "99999999-d-r0.json": result("d"),
    }
    for name, value in objects.items():
        data = value if isinstance(value, bytes) else value.model_dump_json().encode()
        s3.fs.pipe_file(f"{url}/{name}", data)
    contents = read_journal(url)
    assert list(contents.results) == [("a", 0), ("d", 0), ("c", 0)]
    assert contents.results[("a", 0)].started_at == 1.0
    assert contents.warnings[0].startswith("r.journal/00000001-b-r0.json: skipped, which is not a result (")
    assert contents.warnings[1] == "r.journal: 1 repeated result(s) of a run already in the journal; kept the first"
    with Journal(url, resume=True) as journal:  # numbering goes on after the highest
        journal.append(result("e"))
    assert "100000001-e-r0.json" in s3.names(url)


def test_a_journal_copied_from_the_bucket_to_a_folder_reads_the_same(s3, tmp_path):
    url = f"{s3.prefix()}/r.journal"
    with Journal(url) as journal:
        journal.append(result("a"))
        journal.append(result("b"))
    s3.fs.get(url, str(tmp_path / "r.journal"), recursive=True)  # as `aws s3 sync` would
    assert read_journal(tmp_path / "r.journal").results == read_journal(url).results
    report = read(tmp_path / "r.journal")
    assert [r.experiment_id for r in report.results] == ["a", "b"] and report.complete is False


def test_one_writer_at_a_time_and_a_stale_lease_is_taken_over(s3):
    url = f"{s3.prefix()}/r.journal"
    with Journal(url), pytest.raises(JournalError) as refused:
        Journal(url, resume=True)
    assert str(refused.value).startswith(f"{url} is being written by another compilebench run (host ")
    assert f"pid {os.getpid()}, since " in str(refused.value)
    assert s3.names(url) == []  # closing gave the lease back

    now = time.time()
    elsewhere = Lease("another-host", 1, now - 3600, now, "t1")
    s3.fs.pipe_file(f"{url}/{LEASE_NAME}", elsewhere.encode())
    s3.backdate(f"{url}/{LEASE_NAME}", 5)
    with pytest.raises(JournalError, match=r"renewed \d+ s ago"):  # live: renewed recently
        Journal(url)
    s3.backdate(f"{url}/{LEASE_NAME}", 600)
    with Journal(url):  # not renewed for 600 s: stale, taken over
        taken = Lease.parse(s3.fs.cat_file(f"{url}/{LEASE_NAME}"))
        assert taken is not None and taken.pid == os.getpid() and taken.token != "t2"

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = Lease(Lease.mine().host, int(gone.stdout), now, now, "t3")  # this host, a process that has exited
    s3.fs.pipe_file(f"{url}/{LEASE_NAME}", dead.encode())
    Journal(url).close()
    assert s3.names(url) == []


def test_a_lease_is_judged_by_the_stores_clock_not_by_the_times_its_holder_wrote(s3):
    url = f"{s3.prefix()}/r.journal"
    lease = f"{url}/{LEASE_NAME}"
    now, day = time.time(), 86400.0
    s3.fs.pipe_file(lease, Lease("another-host", 1, now - day, now - day, "behind").encode())  # its clock a day slow
    live = r"\(host another-host, pid 1, since .*, renewed \d{1,2} s ago; the lease expires at .* \(in \d+ s\) unless"
    with pytest.raises(JournalError, match=live):
        Journal(url)  # the store wrote it just now: live
    assert s3.names(url) == [LEASE_NAME]  # the store's time was read off a probe, deleted
    s3.fs.pipe_file(lease, Lease("another-host", 1, now + day, now + day, "ahead").encode())  # its clock a day fast
    s3.backdate(lease, LEASE_STALE_S + 60)
    with Journal(url):  # the store wrote it 180 s ago: stale, taken over
        taken = Lease.parse(s3.fs.cat_file(lease))
        assert taken is not None and taken.token not in ("behind", "ahead") and taken.pid == os.getpid()
    assert s3.names(url) == []


def test_the_store_honours_conditional_writes_and_deletes(s3):
    """moto's server (5.2.5) answers S3's conditions as S3 does: 412 for ``If-None-Match: *`` on an object
    that exists and for ``If-Match`` with another ETag, on PutObject and on DeleteObject."""
    fs, key = open_location(f"{s3.prefix()}/lease.json")
    assert conditional(fs)
    first = create_only(fs, key, b"1")
    with pytest.raises(FileExistsError):
        create_only(fs, key, b"2")
    second = replace_version(fs, key, b"3", first)
    assert read_version(fs, key).data == b"3" and read_version(fs, key).tag == second != first
    with pytest.raises(ConditionFailed):
        replace_version(fs, key, b"4", first)  # the version read before is gone
    with pytest.raises(ConditionFailed):
        delete_version(fs, key, first)
    assert read_version(fs, key).data == b"3"
    delete_version(fs, key, second)
    with pytest.raises(FileNotFoundError):
        read_version(fs, key)
    with pytest.raises(ConditionFailed):
        replace_version(fs, key, b"5", second)  # If-Match on an object that is gone: never created anew


def test_writers_creating_one_object_at_once_let_exactly_one_through(s3, monkeypatch):
    """As on S3: of eight writers that create one object at the same moment (``If-None-Match: *``), exactly
    one succeeds and seven are refused, each of five times. moto looks the object up, then writes: its lookup
    answers 20 ms late here, so that on a server that handled requests side by side (``ThreadedMotoServer``)
    each writer would find no object and all would write. The session's server handles one request at a time."""
    from moto.s3.models import S3Backend

    look_up = S3Backend.get_object

    def slow_look_up(self: S3Backend, *args: Any, **kwargs: Any) -> Any:
        found = look_up(self, *args, **kwargs)
        time.sleep(0.02)  # answered late: the object may have been written meanwhile
        return found

    monkeypatch.setattr(S3Backend, "get_object", slow_look_up)
    fs, folder = open_location(s3.prefix())
    for n in range(5):
        key, together = f"{folder}/{n}", threading.Barrier(8)

        def create(writer: int, key: str = key, together: threading.Barrier = together) -> bool:
            together.wait(30)
            try:
                create_only(fs, key, str(writer).encode())
            except FileExistsError:
                return False
            return True

        with ThreadPoolExecutor(8) as pool:
            created = list(pool.map(create, range(8)))
        assert created.count(True) == 1, (n, created)
        assert read_version(fs, key).data == str(created.index(True)).encode()


def test_two_drivers_racing_for_one_journal_exactly_one_runs_every_time(s3):
    """Two processes open the same journal at the same moment, 20 times: on an empty journal (both
    create the lease with ``If-None-Match: *``), on a lease not renewed for 600 s and on one whose
    process is gone (both read the same stale lease before either writes: ``tests.lease_race``). Each
    time exactly one gets the lease, and the other is refused in one line naming it. Processes, not
    threads: each has its own s3fs client and event loop, as two drivers have."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    now, host = time.time(), Lease.mine().host
    rounds = []
    for n in range(20):
        url = f"{s3.prefix()}/r.journal"
        if n % 4 == 1:
            s3.fs.pipe_file(f"{url}/{LEASE_NAME}", Lease("another-host", 1, now - 3600, now - 600, "old").encode())
            s3.backdate(f"{url}/{LEASE_NAME}", 600)
        elif n % 4 == 3:
            s3.fs.pipe_file(f"{url}/{LEASE_NAME}", Lease(host, int(gone.stdout), now, now, "gone").encode())
        rounds.append((url, n % 2 == 1))
    spawn = multiprocessing.get_context("spawn")  # not fork: this process runs the S3 server's threads
    start_together, read_together, answers = spawn.Barrier(2), spawn.Barrier(2), spawn.Queue()
    racers = [spawn.Process(target=race, args=(rounds, start_together, read_together, answers)) for _ in range(2)]
    for racer in racers:
        racer.start()
    try:
        got = [answers.get(timeout=120) for _ in range(2 * len(rounds))]
    finally:
        for racer in racers:
            racer.join(timeout=60)
            if racer.exitcode is None:
                racer.kill()
    assert [racer.exitcode for racer in racers] == [0, 0]
    for url, _ in rounds:
        answered = {pid: refused for where, pid, refused in got if where == url}
        winners = [pid for pid, refused in answered.items() if refused is None]
        assert len(answered) == 2 and len(winners) == 1, (url, answered)
        [loser] = [refused for refused in answered.values() if refused is not None]
        held_by = f"{url} is being written by another compilebench run (host {host}, pid {winners[0]}, since "
        assert loser.startswith(held_by), loser
        assert s3.names(url) == []  # the winner gave its lease back


def test_a_run_that_lost_its_lease_stops_at_its_next_result(s3):
    url = f"{s3.prefix()}/r.journal"
    journal = Journal(url, lease_renew_s=0.05)
    try:
        journal.append(result("a"))
        now = time.time()
        s3.fs.pipe_file(f"{url}/{LEASE_NAME}", Lease("another-host", 7, now, now, "theirs").encode())
        deadline = time.monotonic() + 60
        with pytest.raises(JournalError) as lost:
            while time.monotonic() < deadline:
                time.sleep(0.05)
                journal.append(result("b"))
        assert str(lost.value).startswith(f"{url}: this run lost the journal's lease to another run (host another-host")
    finally:
        journal.close()
    assert Lease.parse(s3.fs.cat_file(f"{url}/{LEASE_NAME}")).token == "theirs"  # type: ignore[union-attr]


def test_with_a_botocore_too_old_to_send_conditions_the_lease_is_kept_by_read_then_write_and_noted(s3, monkeypatch):
    import botocore

    from orchestrator.store import storage

    monkeypatch.setattr(storage, "_botocore_sends_conditions", lambda: False)  # s3fs would drop them silently
    url = f"{s3.prefix()}/r.journal"
    with Journal(url) as journal:
        assert journal.previous.warnings == [
            f"{url}: botocore {botocore.__version__} cannot send S3's conditional writes (a newer one can), so the "
            "journal's lease is taken and renewed by a read then a write: two runs started on this journal at the "
            "same moment could both run"
        ]
        journal.append(result("a"))
        with pytest.raises(JournalError, match=r"is being written by another compilebench run \(host "):
            Journal(url)
    assert s3.names(url) == ["00000000-a-r0.json"]


def test_a_renewal_the_store_made_but_whose_answer_was_lost_keeps_the_lease(s3):
    url = f"{s3.prefix()}/r.journal"
    lease = f"{url}/{LEASE_NAME}"
    with Journal(url, lease_renew_s=0.05) as journal:
        mine = Lease.parse(s3.fs.cat_file(lease))
        assert mine is not None
        s3.fs.pipe_file(lease, replace(mine, renewed_at=mine.renewed_at + 1).encode())  # its own lease, another ETag
        deadline = time.monotonic() + 60
        while (now := Lease.parse(s3.fs.cat_file(lease))) is not None and now.renewed_at <= mine.renewed_at + 1:
            assert time.monotonic() < deadline, "the lease was not renewed again"
            time.sleep(0.05)
        assert now is not None and now.token == mine.token
        journal.append(result("a"))  # not lost: renewed from the version it found
    assert s3.names(url) == ["00000000-a-r0.json"]


# ------------------------------------------------------------------ reading and bad input


def test_pieces_are_streamed_to_s3_as_one_object_made_only_when_the_last_is_written(s3, monkeypatch):
    """``write_pieces``: past s3fs's block size the pieces go up as the parts of a multipart upload, never all held,
    and the object is made whole at the end; where the pieces stop after a part went up, the upload is aborted:
    the object before is left as it was and no upload is left open. Another store takes them joined."""
    import s3fs

    from orchestrator.store.storage import read_bytes, write_pieces

    monkeypatch.setattr(s3fs.S3FileSystem, "default_block_size", 5 * 2**20)  # S3's smallest part
    url = s3.prefix() + "/records.json"
    pieces = [bytes([65 + i % 26]) * 2**20 for i in range(12)]  # 12 MB: three parts
    parts: list[int] = []
    upload = s3fs.core.S3File._upload_chunk
    monkeypatch.setattr(
        s3fs.core.S3File, "_upload_chunk", lambda f, final=False: parts.append(f.buffer.tell()) or upload(f, final)
    )
    write_pieces(url, iter(pieces))
    assert read_bytes(url) == b"".join(pieces) and len(parts) >= 3  # streamed, a part at a time

    def stopping():
        yield from pieces[:8]  # a part has gone up
        raise RuntimeError("the records stopped")

    with pytest.raises(RuntimeError, match="the records stopped"):
        write_pieces(url, stopping())
    assert read_bytes(url) == b"".join(pieces)
    bucket = url.removeprefix("s3://").partition("/")[0]
    assert not s3.fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")

    write_pieces("memory://compilebench-pieces/a.json", iter(pieces[:2]))
    assert read_bytes("memory://compilebench-pieces/a.json") == b"".join(pieces[:2])


def test_report_and_compare_read_urls(s3):
    prefix = s3.prefix()
    base, new = make_report([make_result("a", 2.0)]), make_report([make_result("a", 1.0)])
    write_report(base, f"{prefix}/base.json")
    write_report(new, f"{prefix}/new.json")
    assert read(f"{prefix}/base.json") == base
    shown = runner.invoke(app, ["report", f"{prefix}/new.json", "--html", f"{prefix}/new.html"])
    assert shown.exit_code == 0, shown.output
    assert s3.fs.cat_file(f"{prefix}/new.html").startswith(b"<!DOCTYPE html>")
    compared = runner.invoke(app, ["compare", f"{prefix}/base.json", f"{prefix}/new.json", "--format", "json"])
    assert compared.exit_code == 1 and json.loads(compared.output)["fails"] is True  # 2x to 1x: a regression
    missing = runner.invoke(app, ["report", f"{prefix}/missing.json"])
    assert missing.exit_code == 2
    assert missing.output.strip().splitlines() == [f"error: cannot read {prefix}/missing.json: No such file"]
    nothing = runner.invoke(app, ["report", f"{prefix}/missing.journal"])
    assert (
        nothing.exit_code == 2
        and nothing.output.strip() == f"error: {prefix}/missing.journal: no results in this journal"
    )


def test_file_urls_are_local_paths(tmp_path):
    url = f"file://{tmp_path}/r.json"
    assert location(url) == tmp_path / "r.json"
    assert journal_path(location(url)) == tmp_path / "r.journal.jsonl"  # the local layout, locked and appended
    write_report(make_report([make_result("a")]), url)
    assert read(url) == read(tmp_path / "r.json")


BAD_OUT = {
    "unknown scheme": (
        "nope://bucket/r.json",
        "error: --out nope://bucket/r.json: unknown URL scheme 'nope://'; give a local path or an fsspec URL "
        "such as s3://bucket/key, gs://bucket/key or file:///path",
    ),
    "missing bucket": ("s3://no-such-bucket/r.json", "error: --out s3://no-such-bucket/r.json: bucket "),
    "a bucket, not an object": (f"s3://{BUCKET}/", f"error: --out s3://{BUCKET}/: names a folder; give the URL "),
    "refused credentials": (f"s3://{BUCKET}/x/r.json", f"error: --out s3://{BUCKET}/x/r.json: access denied ("),
}


@pytest.mark.parametrize("case", list(BAD_OUT))
def test_a_location_that_cannot_take_the_report_exits_2_in_one_line_before_ray_starts(
    s3, write_spec, monkeypatch, case
):
    monkeypatch.setattr(api, "connect", no_ray)
    out, expected = BAD_OUT[case]
    spec = write_spec(TINY)
    s3.refuse_credentials(case == "refused credentials")
    try:
        refused = runner.invoke(app, ["run", str(spec), "--out", out])
        page = runner.invoke(app, ["run", str(spec), "--out", f"s3://{BUCKET}/y/r.json", "--html", out])
    finally:
        s3.refuse_credentials(False)
    assert refused.exit_code == 2 and page.exit_code == 2
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    if case == "missing bucket":
        assert lines == ["error: --out s3://no-such-bucket/r.json: bucket 'no-such-bucket' does not exist"]
    if case != "refused credentials":  # there the store refuses --out first
        assert page.output.strip().splitlines() == [lines[0].replace("--out", "--html", 1)]
    assert s3.names(f"s3://{BUCKET}/x") == [] and s3.names(f"s3://{BUCKET}/y") == []  # no probe, no journal left


def test_history_reads_url_globs_and_folders_but_no_journal(s3):
    from orchestrator.report import ReportError
    from orchestrator.report.history import history_of, load_reports

    prefix = s3.prefix()
    for day, speedup in ((1, 2.0), (2, 2.1), (3, 1.0)):
        report = make_report([make_result("a", speedup)]).model_copy(update={"created_at": f"2026-01-0{day}T00:00:00"})
        write_report(report, f"{prefix}/nightly/day{day}.json")
    with Journal(f"{prefix}/nightly/day4.journal") as journal:  # a run that is still going: not a report
        journal.append(result("a"))
    expected = [f"{prefix}/nightly/day{day}.json" for day in (1, 2, 3)]
    for pattern in (f"{prefix}/nightly/*.json", f"{prefix}/nightly", f"{prefix}/**/*.json"):
        assert [where for where, _ in load_reports([pattern])] == expected, pattern
    assert history_of([f"{prefix}/nightly/*.json"])[1] == 3
    shown = runner.invoke(app, ["history", f"{prefix}/nightly/*.json", "--format", "json"])
    assert shown.exit_code == 0, shown.output
    with pytest.raises(ReportError, match="no report matches"):
        load_reports([f"{prefix}/none/*.json"])
    for missing in ("s3://no-such-bucket/nightly", "s3://no-such-bucket/nightly/*.json"):  # not listed as empty
        shown = runner.invoke(app, ["history", missing])
        assert shown.exit_code == 2, shown.output
        assert shown.output.strip() == f"error: {missing}: bucket 'no-such-bucket' does not exist"
