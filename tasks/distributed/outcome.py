"""What one rank returns for one experiment: its ``RankOutcome``, plain data the driver hands to ``combine``.

A rank never raises for a fault of the target: a failure is an outcome with a status, the error and
whether it was the rank's own (``peer_failure`` false) or the consequence of another rank's (a peer
failed at a stage the ranks agree on, or a collective this rank waited in broke or timed out).
``group_ok`` says whether the rank's process group can still be used: false after a collective broke
or timed out, when the gang must be rebuilt (``leave``, then ``join``) before its next experiment.

No torch here: the driver validates outcomes and combines them without it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.models import CheckInfo, ErrorInfo, Measurement, RankFigures, Status, WorkerInfo


class RankCheck(BaseModel):
    """This rank's correctness verdict: one compiled step against one eager step from the same state and
    batch, on what the rank holds (DDP: the whole replicated parameters; FSDP2: its shards of them,
    ``DTensor.to_local()``; the check is elementwise, so every shard passing is the whole passing)."""

    model_config = ConfigDict(extra="forbid")

    correct: bool | None = None
    info: CheckInfo | None = None
    note: str | None = None  # why correct is None
    mismatch: str | None = None  # why correct is False


class RankOutcome(BaseModel):
    """One rank's part of one distributed experiment (see the module docstring).

    ``samples``: the samples one step of this rank takes (its shard of a global batch, or its own batch);
    ``tokens``: the tokens in them where the target's first input is token ids (a 2-D integer tensor).
    ``worker`` and ``measurement`` are as a single-process result's, for this rank's process.
    """

    model_config = ConfigDict(extra="forbid")

    rank: int
    status: Status = "ok"
    error: ErrorInfo | None = None
    peer_failure: bool = False  # failed because another rank did (or a collective broke), not on its own
    group_ok: bool = True  # the process group is still usable
    backend: str | None = None  # torch.distributed's backend of the tensors used: nccl or gloo
    device: Literal["cuda", "cpu"] | None = None
    figures: RankFigures | None = None
    check: RankCheck = Field(default_factory=RankCheck)
    samples: int | None = None
    tokens: int | None = None
    worker: WorkerInfo | None = None
    measurement: Measurement | None = None
    compile_breakdown: dict[str, float] = Field(default_factory=dict)  # seconds, where torch reports them
    inductor_options: dict[str, object] = Field(default_factory=dict)
    recompile_reasons: list[str] = Field(default_factory=list)

    def rank_figures(self) -> RankFigures:
        """The figures, or an empty set of them with the error where the rank measured nothing."""
        if self.figures is not None:
            return self.figures
        return RankFigures(rank=self.rank, error=self.error)
