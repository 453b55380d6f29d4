"""One of two drivers racing for the leases of journals in a store (``tests.test_storage``): a process of
its own, which takes each journal's lease when the other does and says whether it got it.

It imports the journal alone (no Ray, no torch), so a process starts in a fraction of a second.
"""

from __future__ import annotations

import os
from multiprocessing.synchronize import Barrier
from typing import Any

BARRIER_TIMEOUT_S = 60.0  # a partner that never arrives breaks the barrier: the race fails, it does not hang


def race(rounds: list[tuple[str, bool]], start: Barrier, read: Barrier, answers: Any) -> None:
    """For each ``(journal url, interleave)``: meet the other racer, open the journal, put ``(url, pid,
    None)`` on ``answers`` when this process got its lease or ``(url, pid, message)`` when refused,
    meet again (the winner holds its lease until both have answered), close.

    ``interleave``: the journal has a stale lease, and each racer waits at ``read`` after its first
    read of it, so that both have read the same stale version before either writes: the interleaving
    in which a read-then-write takeover lets both through.
    """
    from orchestrator.store.journal import Journal, JournalError, object_log

    read_version = object_log.read_version
    wait_after_read = [False]

    def read_then_wait(fs: Any, path: str) -> Any:
        found = read_version(fs, path)
        if wait_after_read[0]:
            wait_after_read[0] = False
            read.wait(BARRIER_TIMEOUT_S)
        return found

    object_log.read_version = read_then_wait  # type: ignore[assignment]
    for url, interleave in rounds:
        wait_after_read[0] = interleave
        start.wait(BARRIER_TIMEOUT_S)
        journal = None
        try:
            journal = Journal(url)
            answers.put((url, os.getpid(), None))
        except JournalError as e:
            answers.put((url, os.getpid(), str(e)))
        start.wait(BARRIER_TIMEOUT_S)
        if journal is not None:
            journal.close()
