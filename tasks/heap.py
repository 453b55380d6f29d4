"""Python's cycle collector paused over a block: ``collector_paused``, the one helper for it.

A block that makes many objects and no garbage (a report's or a journal's results read, a spec's experiments
expanded, a summary worked out) would otherwise have the collector walk every object made so far again and
again: two thirds of the time of reading 20,000 results, half of summarising 100,000. The timers pause it too,
as ``timeit`` does, so that a collection triggered by one call's allocations does not land in a sample.

Imports nothing of the project; both sides use it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off inside, as it was after (a pause inside another leaves it off)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
