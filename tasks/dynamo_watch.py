"""Counting Dynamo's compilations and collecting why they happened (the recompile sentinel)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch._dynamo.guards
from torch._dynamo.utils import counters

RECOMPILES_LOGGER = "torch._dynamo.guards.__recompiles"  # one DEBUG record per recompile, with reasons
LIMIT_LOGGER = "torch._dynamo.convert_frame"  # WARNING "torch._dynamo hit config.recompile_limit (8)"
LIMIT_COUNTER_PREFIX = "Dynamo recompile limit exceeded"  # key in counters["unimplemented"]


@dataclass(frozen=True)
class Snapshot:
    frames: int  # every frame compilation Dynamo attempted, failed ones included
    graphs: int
    limit_hits: int


class DynamoWatch(logging.Handler):
    """A log handler plus counter snapshots; use as a context manager around compile and timing."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []
        self.limit_messages: list[str] = []
        self.window_before: Snapshot | None = None  # counters when the timed window opened
        self.window_after: Snapshot | None = None  # and when it closed
        self.window_reasons = 0  # guard failures logged before the window opened

    def open_window(self) -> None:
        self.window_before, self.window_reasons = self.snapshot(), len(self.reasons)

    def close_window(self) -> None:
        self.window_after = self.snapshot()

    def __enter__(self) -> DynamoWatch:
        torch._logging.set_logs(recompiles=True)
        recompiles = logging.getLogger(RECOMPILES_LOGGER)
        recompiles.addHandler(self)
        recompiles.propagate = False  # collected here, not printed
        logging.getLogger(LIMIT_LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(RECOMPILES_LOGGER).removeHandler(self)
        logging.getLogger(LIMIT_LOGGER).removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.name == RECOMPILES_LOGGER:
            # "Recompiling function f in file:line\n triggered by the following guard failure(s):\n - 0/0: ..."
            failures = [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]
            self.reasons.append(failures[0] if failures else message.splitlines()[0])
        elif "recompile_limit" in message:
            self.limit_messages.append(" ".join(message.split())[:500])

    @staticmethod
    def snapshot() -> Snapshot:
        limit_hits = sum(n for key, n in counters["unimplemented"].items() if key.startswith(LIMIT_COUNTER_PREFIX))
        return Snapshot(
            frames=counters["frames"]["total"], graphs=counters["stats"]["unique_graphs"], limit_hits=limit_hits
        )
