"""Counting the graphs Dynamo's DDPOptimizer cut at DDP's bucket boundaries (``ddp_splits``), which are no
graph breaks: Dynamo captured one graph, and the optimizer split it into one subgraph per bucket before
the backend compiled each.

The count comes from the optimizer's own log record (torch 2.13,
``torch/_dynamo/backends/distributed.py``: INFO "DDPOptimizer used bucket cap %s and created %d
buckets", logged once per captured graph whose buckets hold parameters): a graph cut into n buckets adds
n - 1 graphs. The watch enables that logger at INFO for its duration and, unless the user's logging
settings already show its INFO records, keeps them from the handlers torch attached to it; on exit the
logger is as it was.
"""

from __future__ import annotations

import logging

DDP_LOGGER = "torch._dynamo.backends.distributed"
BUCKETS_TEXT = "DDPOptimizer used bucket cap"


class DdpSplits(logging.Handler):
    """A log handler counting DDPOptimizer's extra subgraphs; use as a context manager around a compile."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.graphs = 0  # captured graphs the optimizer bucketed
        self.splits = 0  # subgraphs beyond one per captured graph
        self._saved: tuple[int, bool, list[logging.Handler]] | None = None

    def __enter__(self) -> DdpSplits:
        logger = logging.getLogger(DDP_LOGGER)
        quiet = not logger.isEnabledFor(logging.INFO)  # the user does not show these records: neither do we
        self._saved = (logger.level, logger.propagate, list(logger.handlers) if quiet else [])
        for handler in self._saved[2]:
            logger.removeHandler(handler)
        logger.addHandler(self)
        logger.setLevel(logging.INFO)
        logger.propagate = logger.propagate and not quiet
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger(DDP_LOGGER)
        logger.removeHandler(self)
        if self._saved is not None:
            level, propagate, handlers = self._saved
            logger.setLevel(level)
            logger.propagate = propagate
            for handler in handlers:
                logger.addHandler(handler)

    def emit(self, record: logging.LogRecord) -> None:
        if BUCKETS_TEXT in str(record.msg) and isinstance(record.args, tuple) and len(record.args) >= 2:
            self.graphs += 1
            buckets = record.args[1]
            self.splits += max(buckets - 1, 0) if isinstance(buckets, int) else 0
