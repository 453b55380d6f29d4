"""Building blocks of real models, from ``torch.nn`` only, with random weights.

Each factory takes size parameters whose defaults run in milliseconds on a small CPU; scale them
up for realistic sizes (e.g. ``dim: 4096, seq: 2048`` on a GPU). Precision and phase are not
parameters: the experiment's ``precision`` casts the module and its floating inputs (or runs it
under autocast) and its ``phase`` chooses inference or a training step. Modules are imported
when a factory runs, so listing targets does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasks.targets.registry import register

if TYPE_CHECKING:
    import torch


def _tokens(device: torch.device, batch: int, seq: int, dim: int) -> torch.Tensor:
    import torch

    return torch.randn(batch, seq, dim, device=device)


@register("blocks.mlp")
def make_mlp(device: torch.device, batch: int = 8, seq: int = 64, dim: int = 256, hidden: int | None = None):
    """Linear(dim, hidden) -> GELU -> Linear(hidden, dim) on (batch, seq, dim): two GEMMs around a pointwise op."""
    from tasks.targets.layers import MLP

    return MLP(dim, hidden or 4 * dim).to(device), (_tokens(device, batch, seq, dim),)


@register("blocks.layernorm_gelu")
def make_layernorm_gelu(device: torch.device, batch: int = 8, seq: int = 128, dim: int = 1024):
    """LayerNorm(dim) -> GELU on (batch, seq, dim): a reduction fused with pointwise ops, memory-bound."""
    from torch import nn

    return nn.Sequential(nn.LayerNorm(dim), nn.GELU()).to(device), (_tokens(device, batch, seq, dim),)


@register("blocks.softmax")
def make_softmax(device: torch.device, batch: int = 4, heads: int = 8, seq: int = 256):
    """Softmax over the last dim of attention-score-shaped (batch, heads, seq, seq) input; no parameters.

    With no parameters, a training step differentiates with respect to the input (the procedure
    makes floating inputs of a parameter-free target require grad).
    """
    import torch
    from torch import nn

    return nn.Softmax(dim=-1).to(device), (torch.randn(batch, heads, seq, seq, device=device),)


@register("blocks.attention")
def make_attention(
    device: torch.device, batch: int = 4, seq: int = 128, dim: int = 256, heads: int = 4, causal: bool = True
):
    """Multi-head self-attention: QKV projection, scaled_dot_product_attention (causal flag), output projection."""
    from tasks.targets.layers import SelfAttention

    return SelfAttention(dim, heads, causal).to(device), (_tokens(device, batch, seq, dim),)


@register("blocks.conv_bn_relu")
def make_conv_bn_relu(
    device: torch.device, batch: int = 8, in_channels: int = 32, channels: int = 64, size: int = 32, kernel: int = 3
):
    """Conv2d (same padding, no bias) -> BatchNorm2d -> ReLU on (batch, in_channels, size, size) images."""
    import torch
    from torch import nn

    module = nn.Sequential(
        nn.Conv2d(in_channels, channels, kernel, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
    )
    return module.to(device), (torch.randn(batch, in_channels, size, size, device=device),)


@register("blocks.transformer_layer")
def make_transformer_layer(
    device: torch.device,
    batch: int = 4,
    seq: int = 128,
    dim: int = 256,
    heads: int = 4,
    hidden: int | None = None,
    causal: bool = False,
    dropout: float = 0.0,
):
    """A pre-norm transformer layer (LayerNorm, attention, residual; LayerNorm, MLP, residual) on (batch, seq, dim)."""
    from tasks.targets.layers import TransformerLayer

    layer = TransformerLayer(dim, heads, hidden or 4 * dim, causal, dropout)
    return layer.to(device), (_tokens(device, batch, seq, dim),)
