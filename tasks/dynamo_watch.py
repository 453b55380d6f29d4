"""Counting Dynamo's compilations and collecting why they happened (the recompile sentinel),
and whether inductor really used CUDA graphs.

Counts come from ``torch._dynamo.utils.counters``; the log records only add the reasons a
person reads. Dynamo writes a guard-failure message only while its ``recompiles`` (or
``recompiles_verbose``) log artifact is enabled, so the watch enables it for its duration,
whatever the user's ``TORCH_LOGS`` says, and puts back exactly what it changed on exit: the
artifact set of torch's log state and the level, propagation and handlers of each logger it
touched. A user who asked for those logs still sees them; otherwise they are collected silently.

The text matched here (the logger names, the ``- `` lines of a recompile message, the
``unimplemented`` counter key of the recompile limit) is tested against the torch range that
pyproject.toml pins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo.guards
import torch._logging._internal
from torch._dynamo.utils import counters

RECOMPILE_ARTIFACTS = ("recompiles", "recompiles_verbose")
RECOMPILES_LOGGERS = {  # one DEBUG record per recompile, with the guard failures as "- " lines
    "torch._dynamo.guards.__recompiles": "recompiles",
    "torch._dynamo.guards.__recompiles_verbose": "recompiles_verbose",
}
LIMIT_LOGGER = "torch._dynamo.convert_frame"  # WARNING "torch._dynamo hit config.recompile_limit (8)"
# counters["unimplemented"] keys of a recompile-limit hit: the graph-break type Dynamo records
# (torch >= 2.7), and the message older releases used.
LIMIT_COUNTER_PREFIXES = ("Dynamo recompile limit exceeded", "cache_size_limit reached")
CUDAGRAPH_LOGGERS = (  # "skipping cudagraphs due to ..." (artifact 'cudagraphs'; 'perf_hints' before 2.6)
    "torch._inductor.cudagraph_utils.__cudagraphs",
    "torch._inductor.cudagraph_utils.__perf_hints",
    "torch._inductor.compile_fx.__perf_hints",
)
CUDAGRAPH_SKIP_TEXT = "skipping cudagraphs"


@dataclass(frozen=True)
class Snapshot:
    frames: int  # every frame compilation Dynamo attempted, failed ones included
    graphs: int
    limit_hits: int
    cudagraph_skips: int = 0


@dataclass(frozen=True)
class _Saved:
    """A logger's settings before the watch changed them (it adds itself as a handler, removed on exit)."""

    level: int
    propagate: bool


class DynamoWatch(logging.Handler):
    """A log handler plus counter snapshots; use as a context manager around compile and timing."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []
        self.limit_messages: list[str] = []
        self.cudagraph_skip_reasons: list[str] = []
        self.entered: Snapshot | None = None  # counters when the watch began
        self.window_before: Snapshot | None = None  # counters when the timed window opened
        self.window_after: Snapshot | None = None  # and when it closed
        self.window_reasons = 0  # guard failures logged before the window opened
        self._saved_loggers: dict[str, _Saved] = {}
        self._saved_artifacts: set[str] | None = None
        self._log_state: Any = None

    def open_window(self) -> None:
        self.window_before, self.window_reasons = self.snapshot(), len(self.reasons)

    def close_window(self) -> None:
        self.window_after = self.snapshot()

    def __enter__(self) -> DynamoWatch:
        state = self._log_state = torch._logging._internal.log_state
        self._saved_artifacts = set(state.artifact_names)
        user_enabled = self._saved_artifacts & set(RECOMPILE_ARTIFACTS)
        if not user_enabled:
            state.enable_artifact("recompiles")  # makes Dynamo format and log each recompile's reasons
        for name, artifact in RECOMPILES_LOGGERS.items():
            # The user's own recompile logs keep flowing to their handlers; ours stay quiet.
            self._attach(name, level=logging.DEBUG, propagate=None if artifact in user_enabled else False)
        self._attach(LIMIT_LOGGER)
        for name in CUDAGRAPH_LOGGERS:
            self._attach(name)
        self.entered = self.snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        for name, saved in self._saved_loggers.items():
            logger = logging.getLogger(name)
            logger.removeHandler(self)
            logger.setLevel(saved.level)
            logger.propagate = saved.propagate
        self._saved_loggers.clear()
        if self._log_state is not None and self._saved_artifacts is not None:
            self._log_state.artifact_names.clear()
            self._log_state.artifact_names.update(self._saved_artifacts)

    def _attach(self, name: str, level: int | None = None, propagate: bool | None = None) -> None:
        logger = logging.getLogger(name)
        self._saved_loggers.setdefault(name, _Saved(logger.level, logger.propagate))
        logger.addHandler(self)
        if level is not None:
            logger.setLevel(level)
        if propagate is not None:
            logger.propagate = propagate

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            return
        if record.name in RECOMPILES_LOGGERS:
            # "Recompiling function f in file:line\n triggered by the following guard failure(s):\n - 0/0: ..."
            failures = [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]
            self.reasons.append(failures[0] if failures else message.splitlines()[0])
        elif record.name == LIMIT_LOGGER:
            if "recompile_limit" in message or "cache_size_limit" in message:
                self.limit_messages.append(" ".join(message.split())[:500])
        elif CUDAGRAPH_SKIP_TEXT in message:
            self.cudagraph_skip_reasons.append(" ".join(message.split())[:500])

    @staticmethod
    def snapshot() -> Snapshot:
        limit_hits = sum(
            n for key, n in counters["unimplemented"].items() if str(key).startswith(LIMIT_COUNTER_PREFIXES)
        )
        return Snapshot(
            frames=counters["frames"]["total"],
            graphs=counters["stats"]["unique_graphs"],
            limit_hits=limit_hits,
            cudagraph_skips=counters["inductor"]["cudagraph_skips"],
        )

    def cudagraph_verdict(self) -> tuple[bool, list[str]]:
        """Whether inductor used CUDA graphs for everything compiled under the watch (no skip
        counted since it began), and why it skipped them where it did."""
        start = self.entered or Snapshot(0, 0, 0, 0)
        skips = self.snapshot().cudagraph_skips - start.cudagraph_skips
        reasons = list(self.cudagraph_skip_reasons)
        if skips > len(reasons):
            reasons.append(f"{skips - len(reasons)} graph(s) skipped without a logged reason")
        return skips == 0, reasons
