"""Each rank's batch: the target's ``batch`` parameter as the whole gang's (``batch: global``, each rank
building its 1/world_size shard) or as each rank's own (``batch: per_rank``).

Every rank builds the target from the experiment's seed, so that the ranks start from the same weights
(FSDP2 keeps each rank's shard of the tensors it is given; DDP checks they agree). The same seed draws
the same example inputs too: the ranks train on equal shards. A step's time and memory do not depend on
the values in the batch, and the check compares each rank's compiled step with its own eager step.
"""

from __future__ import annotations

from typing import Any

from tasks.models import Experiment
from tasks.targets import params_of, resolve

BATCH_PARAM = "batch"


class BatchError(ValueError):
    """A global batch that cannot be shared out among the ranks."""


def rank_params(exp: Experiment, world_size: int) -> dict[str, Any]:
    """The target's parameters for one rank: under ``batch: global``, ``batch`` divided by ``world_size``."""
    cfg = exp.distributed
    if cfg is None or cfg.batch == "per_rank":
        return dict(exp.params)
    accepted = params_of(resolve(exp.target))
    if BATCH_PARAM not in accepted:
        raise BatchError(
            f"distributed.batch 'global' shares the target's '{BATCH_PARAM}' parameter among the ranks, and target "
            f"'{exp.target}' has none (give distributed.batch: per_rank)"
        )
    total = exp.params.get(BATCH_PARAM, accepted[BATCH_PARAM])
    if not isinstance(total, int) or isinstance(total, bool) or total < 1:
        raise BatchError(f"distributed.batch 'global' needs an integer params.{BATCH_PARAM} >= 1, got {total!r}")
    if total % world_size:
        raise BatchError(
            f"distributed.batch 'global': params.{BATCH_PARAM} {total} does not divide among world_size {world_size} "
            f"ranks (give a multiple of {world_size}, or distributed.batch: per_rank)"
        )
    return {**exp.params, BATCH_PARAM: total // world_size}


def samples_and_tokens(inputs: tuple[Any, ...]) -> tuple[int | None, int | None]:
    """The samples of one call (the first tensor input's first dimension) and, where that tensor is token ids
    (a 2-D integer tensor), the tokens in them."""
    import torch

    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    if first is None or first.dim() == 0:
        return None, None
    tokens = first.numel() if first.dim() == 2 and not first.is_floating_point() else None
    return int(first.shape[0]), tokens
