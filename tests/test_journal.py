"""The journal: appended, never truncated silently, read back line by line; one writer at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.store.journal import LEASE_NAME, Journal, JournalError, Lease, journal_path, read_journal
from orchestrator.store.storage import modified_time
from tasks.models import CompileConfig, Result, TimingConfig

ROOT = Path(__file__).resolve().parents[1]


def result(experiment_id: str, started_at: float = 1.0, status: str = "ok") -> Result:
    return Result(
        experiment_id=experiment_id,
        target="seed.foo",
        params={},
        device="cpu",
        compile=CompileConfig(),
        timing=TimingConfig(),
        seed=0,
        status=status,  # type: ignore[arg-type]
        started_at=started_at,
        finished_at=started_at + 1,
    )


def test_journal_sits_next_to_the_report(tmp_path):
    assert journal_path(tmp_path / "out" / "seed.json") == tmp_path / "out" / "seed.journal.jsonl"


def test_appends_read_back_in_order(tmp_path):
    path = tmp_path / "r.journal.jsonl"
    with Journal(path) as journal:
        journal.append(result("a"))
        journal.append(result("b"))
    contents = read_journal(path)
    assert list(contents.results) == [("a", 0), ("b", 0)] and contents.warnings == []
    assert read_journal(tmp_path / "missing.jsonl").results == {}


def test_an_earlier_journal_is_refused_kept_or_emptied_only_when_asked(tmp_path):
    path = tmp_path / "r.journal.jsonl"
    with Journal(path) as journal:
        journal.append(result("a"))
    with pytest.raises(JournalError) as refused:
        Journal(path)
    assert str(refused.value) == (
        f"{path} already holds 1 result(s) of an earlier run: "
        "pass --resume to keep them and run the rest, or --overwrite to start over"
    )
    assert len(read_journal(path)) == 1  # refusing touched nothing

    with Journal(path, resume=True) as journal:
        assert list(journal.previous.results) == [("a", 0)]
        journal.append(result("b"))
    assert list(read_journal(path).results) == [("a", 0), ("b", 0)]

    with Journal(path, overwrite=True) as journal:
        assert len(journal.previous) == 0 and path.read_bytes() == b""
    assert not path.exists()  # a journal that recorded nothing leaves no file behind
    path.write_bytes(b"")
    with Journal(path):  # an empty journal holds nothing to lose
        pass
    with pytest.raises(JournalError, match="exclude each other"):
        Journal(path, resume=True, overwrite=True)


def test_a_line_cut_by_a_kill_is_skipped_with_a_warning_and_appends_start_on_a_new_line(tmp_path):
    path = tmp_path / "r.journal.jsonl"
    with Journal(path) as journal:
        journal.append(result("a"))
    line = result("b").model_dump_json()
    with path.open("a") as f:
        f.write(line[: len(line) // 2])  # the driver died mid-write
    contents = read_journal(path)
    assert list(contents.results) == [("a", 0)]
    assert contents.warnings == [
        "r.journal.jsonl: skipped line 2, which is not a result (cut short, as by a driver killed while writing it)"
    ]
    with Journal(path, resume=True) as journal:
        journal.append(result("b"))
    contents = read_journal(path)
    assert list(contents.results) == [("a", 0), ("b", 0)]
    assert len(contents.warnings) == 1 and "skipped line 2" in contents.warnings[0]


def test_first_result_of_an_id_wins_and_garbage_is_named(tmp_path):
    path = tmp_path / "r.journal.jsonl"
    path.write_text(
        "\n".join([result("a", 1.0).model_dump_json(), "{not json", result("a", 2.0).model_dump_json(), ""])
    )
    contents = read_journal(path)
    assert contents.results[("a", 0)].started_at == 1.0
    assert contents.warnings[0].startswith("r.journal.jsonl: skipped line 2, which is not a result (")
    assert contents.warnings[1] == (
        "r.journal.jsonl: 1 repeated result(s) of a run already in the journal; kept the first"
    )


def test_one_writer_at_a_time_and_the_lock_dies_with_its_process(tmp_path):
    path = tmp_path / "r.journal.jsonl"
    with Journal(path), pytest.raises(JournalError, match="being written by another compilebench run"):
        Journal(path, resume=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from orchestrator.store.journal import Journal; "
            f"j = Journal(Path({str(path)!r}), resume=True); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(JournalError, match="another compilebench run"):
            Journal(path, resume=True)
    finally:
        holder.kill()  # SIGKILL: no cleanup runs; the kernel drops the lock with the process
        holder.wait()
    Journal(path, resume=True).close()  # the holder is gone, and so is its lock


def test_replicates_of_one_experiment_are_runs_of_their_own(tmp_path):
    path = tmp_path / "r.journal.jsonl"
    with Journal(path) as journal:
        for replicate in (0, 1, 2):
            journal.append(result("a").model_copy(update={"replicate": replicate}))
        journal.append(result("a").model_copy(update={"replicate": 1, "started_at": 9.0}))  # a repeat of run 1
    contents = read_journal(path)
    assert list(contents.results) == [("a", 0), ("a", 1), ("a", 2)]
    assert contents.results[("a", 1)].started_at != 9.0
    assert "1 repeated result(s) of a run" in contents.warnings[0]


def test_a_lease_in_a_store_without_s3s_times_or_conditions_is_judged_by_the_stores_clock_and_noted():
    import fsspec

    url = f"memory://journals/{uuid.uuid4().hex}/r.journal"
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"{url}/{LEASE_NAME}", Lease("another-host", 1, 0.0, 0.0, "1970").encode())  # its clock says 1970
    live = r"\(host another-host, pid 1, since 1970-01-01 00:00:00 UTC, renewed \d s ago; the lease expires at "
    with pytest.raises(JournalError, match=live):
        Journal(url)  # the store wrote it just now: live
    fs.rm_file(f"{url}/{LEASE_NAME}")
    with Journal(url) as journal:
        assert journal.previous.warnings == [  # printed as a note by `run`
            f"{url}: memory:// gives compilebench no conditional writes (S3 does), so the journal's lease is taken "
            "and renewed by a read then a write: two runs started on this journal at the same moment could both run"
        ]
        journal.append(result("a"))
    assert list(read_journal(url).results) == [("a", 0)]
    assert [p.rpartition("/")[2] for p in fs.ls(url, detail=False)] == ["00000000-a-r0.json"]  # no lease, no probe


def test_modification_times_as_stores_report_them():
    when = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    epoch = when.timestamp()
    assert modified_time({"LastModified": when}) == epoch  # s3fs
    assert modified_time({"last_modified": when.replace(tzinfo=None)}) == epoch  # no zone: UTC
    assert modified_time({"mtime": epoch}) == epoch  # local files
    assert modified_time({"updated": "2026-03-01T12:00:00.000Z"}) == epoch  # gcsfs's raw field
    assert modified_time({"mtime": "not a time", "created": when}) == epoch
    assert modified_time({"size": 3}) is None


@pytest.mark.parametrize("opened", ["resumed after a cut line", "overwritten"])
def test_the_report_writes_each_result_as_the_journal_holds_it(tmp_path, opened):
    """The text of each result this run wrote is read back from the journal (this very object only), its digest
    is the one worked out as it arrived, and the report written with them is the report made anew, byte for
    byte, also after a resume past a line cut short and after an overwrite (the file's end moved)."""
    import gzip

    from orchestrator.report import write_report
    from orchestrator.report.digest import Digest, Digests, digest
    from orchestrator.report.io import RESULT_JSON
    from tests.report_data import mixed_report

    path = tmp_path / "r.journal.jsonl"
    with Journal(path) as journal:
        journal.append(result("earlier"))
    with path.open("a") as f:
        f.write('{"experiment_id": "cut')
    report = mixed_report()
    kept = {"resume": opened != "overwritten", "overwrite": opened == "overwritten"}
    with Journal(path, **kept) as journal:
        for r in report.results:
            journal.write(r)
        journal.sync()
        texts = [journal.text_of(r) for r in report.results]
        assert texts == [RESULT_JSON.dump_json(r) for r in report.results]
        assert journal.text_of(report.results[0].model_copy()) is None  # a copy may differ: dumped anew
        earlier = journal.previous.results.get(("earlier", 0))
        assert (earlier is not None) == (opened != "overwritten")
        if earlier is not None:
            assert journal.text_of(earlier) is None  # read back, not written by this run
        asked: list[str] = []

        def journaled(r: Result) -> bytes | None:
            asked.append(r.experiment_id)
            return journal.text_of(r)

        digests = Digests()  # as a run works them out, each result as it arrives
        for r in report.results:
            digests.add(r)
        assert digests.of(report.results[0]) == digest(report.results[0])
        assert digests.of(report.results[0].model_copy()) is None  # another object: worked out anew
        given: list[str] = []

        def digested(r: Result) -> Digest | None:
            given.append(r.experiment_id)
            return digests.of(r)

        write_report(report, tmp_path / "with.json.gz", journaled, digested)
        assert given == asked
    write_report(report, tmp_path / "anew.json.gz")
    assert asked == [r.experiment_id for r in report.results]
    written = (gzip.decompress((tmp_path / name).read_bytes()) for name in ("with.json.gz", "anew.json.gz"))
    assert next(written) == next(written)
    assert [r.experiment_id for r in read_journal(path).results.values()][-len(report.results) :] == asked


def test_a_run_freezes_the_results_it_read_before_the_collector_walks_them(tmp_path):
    """``settled_journal``: a resumed journal's results are read and then frozen with the rest of the process
    (left out of cyclic collection while the run lasts), with no collection in between; the collector runs
    again after, and a refused journal leaves it as it was."""
    import gc

    from orchestrator.api import settled_journal

    path = tmp_path / "r.journal.jsonl"
    with Journal(path) as journal:
        for n in range(2000):  # enough allocations to set off a collection as soon as the collector may run
            journal.write(result(f"e{n}"))
        journal.sync()
    collections: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    frozen = gc.get_freeze_count()
    gc.callbacks.append(seen)
    try:
        with settled_journal(path, resume=True) as journal:
            read = list(collections)
            assert len(journal.previous.results) == 2000
            assert gc.isenabled() and gc.get_freeze_count() > frozen + 2000
    finally:
        gc.callbacks.remove(seen)
    assert read == []  # none from the reading to the freeze
    assert gc.get_freeze_count() == 0 and gc.isenabled()  # unfrozen when the run ends, as gc.unfreeze does
    with pytest.raises(JournalError), settled_journal(path):  # neither resume nor overwrite: refused, as run is
        pass
    assert gc.isenabled()


_SETTLED_BESIDE = """
import json, sys
from orchestrator import api
from tasks import forked

forks = []


class Seen(forked.Beside):
    def __init__(self, make):
        super().__init__(make)
        forks.append(self.forked)


api.Beside = Seen
spec_path, out, bad_spec, bad_out = sys.argv[1:]
with api.settled_run(spec_path, out, resume=True) as (spec, where, journal):
    found = {"forked": forks, "ids": [e.id for e in spec.experiments], "kept": len(journal.previous.results)}
errors = []
for spec_arg, out_arg in ((bad_spec, bad_out), (bad_spec, out), (spec_path, bad_out)):
    try:
        with api.settled_run(spec_arg, out_arg, resume=True):
            pass
    except Exception as e:
        errors.append(type(e).__name__)
print(json.dumps(found | {"errors": errors, "forks": forks}))
"""


def test_a_resume_loads_its_spec_in_a_copy_beside_the_journal_and_says_a_bad_spec_first(write_spec, tmp_path):
    """``settled_run`` on a resume, in a process of its own as a command runs it: the spec is loaded in a forked
    copy while the journal is read, and is the spec ``load_spec`` gives (the same ids); a bad spec is said before
    a bad ``out`` and before a journal the run may not take, as when the spec was loaded first; a good spec with a
    bad ``out`` says the ``out``. Without a fork (here, in a pytest worker told it may not) the same."""
    import json

    from orchestrator import api
    from orchestrator.plan.paths import OutPathError
    from orchestrator.plan.spec import SpecError, load_spec
    from tasks import forked

    spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    sweep: {seed: [0, 1, 2, 3, 4, 5]}\n")
    ids = [e.id for e in load_spec(spec).experiments]
    out = tmp_path / "r.json"
    with Journal(journal_path(out)) as journal:
        for experiment_id in ids[:2]:
            journal.append(result(experiment_id))
    bad_spec = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    seed: many\n", name="bad.yaml")
    bad_out = tmp_path  # a directory: no report goes there
    journal_path(bad_out).touch()  # a journal there to read beside the spec (an empty one, not this run's to remove)
    command = [sys.executable, "-c", _SETTLED_BESIDE, str(spec), str(out), str(bad_spec), str(bad_out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    if sys.platform == "linux":
        assert found["forks"] == [True] * 4
    assert found["ids"] == ids and found["kept"] == 2
    assert found["errors"] == ["SpecError", "SpecError", "OutPathError"]
    assert journal_path(bad_out).read_bytes() == b""

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(forked, "can_fork", lambda: False)
    monkeypatch.setattr(api, "can_fork", lambda: False)
    try:
        with api.settled_run(spec, out, resume=True) as (loaded, _, opened):
            assert [e.id for e in loaded.experiments] == ids and len(opened.previous.results) == 2
        for spec_arg, out_arg, error in ((bad_spec, bad_out, SpecError), (spec, bad_out, OutPathError)):
            with pytest.raises(error), api.settled_run(spec_arg, out_arg, resume=True):
                pass
    finally:
        monkeypatch.undo()


_REFUSED_RESUME = """
import sys
from orchestrator import api
from orchestrator.plan.spec import SpecError

spec, out = sys.argv[1:]
try:
    with api.settled_run(spec, out, resume=True):
        print("ran")
except SpecError as e:
    print("refused:", str(e).split(":")[0])
"""


def test_a_resume_refused_for_its_spec_leaves_the_journal_and_the_folders_as_they_were(write_spec, tmp_path):
    """A bad spec on a resume: the journal (its last line cut short by a killed driver) is read beside the spec
    and left byte for byte as it was, its newline added only when a run writes; a resume into a folder with no
    journal yet creates neither the folder nor a journal. The user's target module the spec names is imported
    once. A good spec then resumes it: the first new line starts on a line of its own."""
    (tmp_path / "user_targets_once.py").write_text(
        "import os\nwith open(os.environ['IMPORTED'], 'a') as f:\n    f.write('imported\\n')\n"
        "def make(device):\n    return (lambda x: x), ()\n"
    )
    bad = write_spec(
        "name: x\nexperiments:\n  - target: user_targets_once:make\n  - target: seed.foo\n    seed: many\n",
        name="bad.yaml",
    )
    out = tmp_path / "kept" / "r.json"
    out.parent.mkdir()
    with Journal(journal_path(out)) as journal:
        journal.append(result("a"))
    with journal_path(out).open("ab") as f:
        f.write(b'{"experiment_id": "b", "tar')  # a driver killed mid-line
    before = journal_path(out).read_bytes()
    new = tmp_path / "new" / "r.json"
    imported = tmp_path / "imported.txt"
    env = {**os.environ, "IMPORTED": str(imported), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    for where, imports in ((out, 1), (new, 2)):  # each in a process of its own, as a command runs
        command = [sys.executable, "-c", _REFUSED_RESUME, str(bad), str(where)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["refused: bad.yaml"]
        assert imported.read_text().splitlines() == ["imported"] * imports  # the spec loaded once a run
    assert journal_path(out).read_bytes() == before
    assert not new.parent.exists()

    with Journal(journal_path(out), resume=True) as journal:
        assert list(journal.previous.results) == [("a", 0)]
        journal.append(result("c"))
    lines = journal_path(out).read_bytes().splitlines()
    assert lines[:2] == before.splitlines() and Result.model_validate_json(lines[2]).experiment_id == "c"
