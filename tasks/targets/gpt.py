"""``models.gpt``: a small GPT-2-style decoder from ``torch.nn``, random weights, a next-token loss."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasks.targets.registry import register
from tasks.targets.workload import Workload

if TYPE_CHECKING:
    import torch


@register("models.gpt")
def make_gpt(
    device: torch.device,
    batch: int = 2,
    seq: int = 128,
    layers: int = 2,
    dim: int = 128,
    heads: int = 4,
    vocab: int = 2048,
    dropout: float = 0.0,
) -> Workload:
    """A GPT-2-style decoder (causal pre-norm layers, tied LM head) on random token ids; loss: next-token cross-entropy.

    GPT-2 small is ``layers: 12, dim: 768, heads: 12, seq: 1024, vocab: 50257``. The training loss
    is the cross-entropy of each position's logits against the next token of the same input.
    """
    import torch

    from tasks.targets.layers import GPT, next_token_loss

    model = GPT(vocab, seq, dim, heads, layers, dropout).to(device)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return Workload(model, (ids,), loss_fn=lambda logits: next_token_loss(logits, ids))
