"""The ``torch.nn`` modules the built-in blocks and ``models.gpt`` are made of.

Imported by the target factories when they run, never when targets are listed, so that
``compilebench tasks`` does not import torch. Everything is plain ``torch.nn``: no kernels of
our own, nothing downloaded, random weights from the (seeded) global RNG.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """Linear(dim, hidden) -> GELU (tanh approximation, as GPT-2) -> Linear(hidden, dim)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.proj = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class SelfAttention(nn.Module):
    """Multi-head self-attention: one fused QKV projection, ``scaled_dot_product_attention``, an
    output projection. ``causal`` masks future positions (a decoder); dropout on the attention
    weights only in training mode."""

    def __init__(self, dim: int, heads: int, causal: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be a multiple of heads ({heads})")
        self.heads, self.causal, self.dropout = heads, causal, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(batch, seq, dim))


class TransformerLayer(nn.Module):
    """A pre-norm transformer layer (GPT-2's): ``x + attn(ln(x))``, then ``x + mlp(ln(x))``,
    with dropout on each residual branch in training mode. FSDP2 shards (and compiles) its attention and
    its MLP apart (``fsdp_blocks``)."""

    fsdp_blocks = (SelfAttention, MLP)

    def __init__(self, dim: int, heads: int, hidden: int, causal: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, causal, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    """A GPT-2-style decoder: token and learned position embeddings, ``layers`` causal pre-norm
    transformer layers, a final LayerNorm and a language-model head tied to the token embedding.
    Weights are initialised as GPT-2's (normal, std 0.02; zero biases). Token ids in, logits out.
    FSDP2 shards (and compiles) each transformer layer apart (``fsdp_blocks``)."""

    fsdp_blocks = (TransformerLayer,)

    def __init__(self, vocab: int, seq: int, dim: int, heads: int, layers: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(TransformerLayer(dim, heads, 4 * dim, True, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2
        self.apply(_gpt2_init)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(positions))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln_f(x))


def _gpt2_init(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each position's logits against the next token (in float32, whatever the
    logits' dtype, as autocast computes it)."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
