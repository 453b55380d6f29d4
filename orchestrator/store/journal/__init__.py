"""The journal: every finished result recorded as it arrives, before anything else sees it.

The journal is the source of truth of a run. The report is derived from the spec and the
journal, so a driver killed at any point loses nothing that had finished, and a rerun with
``resume`` runs only what the journal does not hold yet. A run that finds results of an
earlier one refuses to start unless told to ``resume`` (keep them) or ``overwrite`` (start
over, an explicit deletion). It has two layouts, with the same contents and the same rules:

- **A local file** (``out/r.json`` → ``out/r.journal.jsonl``): one JSON line per result,
  appended and synced (``Journal.append``), or appended as each arrives and synced once per group
  (``Journal.write``, ``Journal.sync``: the run's group commit, ``orchestrator.execution.runner``).
  One driver at a time writes it: an exclusive lock (``flock``, released by the kernel when the
  process dies, even by SIGKILL) keeps a second run on the same ``--out`` from interleaving lines.
  A line that does not parse (the tail of a driver killed mid-write) is skipped with a warning
  naming its line number.
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
  Every write of it is conditional on the version the run read or wrote last: created only if
  absent (S3's ``If-None-Match: *``), a stale one taken over, renewed every ``LEASE_RENEW_S`` and
  deleted at the end only if it is still that version (``If-Match: <ETag>``), so of two runs
  reaching for it at once exactly one holds it; the other reads the winner's lease and refuses to
  start, ``overwrite`` or not (as the lock does), in one line naming the holder and when its lease
  expires. A lease is stale when it was not renewed for ``LEASE_STALE_S``, or at once when it
  names a process of this host that is gone (a driver killed on the same node, as a resubmitted
  ``ray job`` is). How long it went unrenewed is read off the store's own clock alone: the time
  the store says it last wrote the lease object, against the time it says it wrote a probe object
  (``lease-probe-<token>``) the reader has just written and deletes at once; neither the holder's
  clock nor the reader's enters, so hosts whose clocks disagree judge a lease alike. (A store that
  reports no modification times is judged by the ``renewed_at`` the holder wrote, against the
  reader's clock.) A run whose lease was taken (stalled past ``LEASE_STALE_S``) learns it at its
  next renewal, whose condition fails, and stops at its next result, but may have written one
  more object meanwhile. Stores other than S3 have no conditional writes here: each condition is
  emulated by a read then a write, not atomic, and the run says so in a note.

Reading keeps the **first** result of each run: an experiment id and its replicate
(``RunKey``; an experiment with ``replicates: k`` has k runs, 0..k-1). A resumed run never reruns
a run the journal holds, so a second result for the same run can only come from a journal
edited or concatenated by hand; the first is the one every earlier report was built from.

The package, from the bottom up (each module imports only those listed before it):

- ``contents``: where a journal lies beside its report, what it holds, ``JournalError``;
- ``reading``: a journal's lines or objects into its contents, the first result of each run kept;
- ``file_log``: the local file, appended to, synced and locked;
- ``object_log``: the objects in a store, with the lease that keeps one writer;
- ``writer``: ``Journal``, a run's journal open for writing, on either log.
"""

from orchestrator.store.journal.contents import (
    JOURNAL_SUFFIX,
    OBJECT_JOURNAL_SUFFIX,
    JournalContents,
    JournalError,
    RunKey,
    journal_path,
    run_key,
)
from orchestrator.store.journal.object_log import (
    LEASE_NAME,
    LEASE_PROBE_PREFIX,
    LEASE_RENEW_S,
    LEASE_STALE_S,
    Lease,
)
from orchestrator.store.journal.reading import SEQUENCE_DIGITS, read_journal
from orchestrator.store.journal.writer import Journal

__all__ = [
    "JOURNAL_SUFFIX",
    "LEASE_NAME",
    "LEASE_PROBE_PREFIX",
    "LEASE_RENEW_S",
    "LEASE_STALE_S",
    "OBJECT_JOURNAL_SUFFIX",
    "SEQUENCE_DIGITS",
    "Journal",
    "JournalContents",
    "JournalError",
    "Lease",
    "RunKey",
    "journal_path",
    "read_journal",
    "run_key",
]
