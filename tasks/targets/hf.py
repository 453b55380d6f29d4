"""``hf.causal_lm``: a Hugging Face causal language model built from a config, with random weights.

Nothing is downloaded and the Hub is never asked: the model comes from ``AutoConfig.for_model``
and ``AutoModelForCausalLM.from_config``. It needs the ``transformers`` package on the worker;
without it the experiment fails with one line that says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasks.targets.registry import TargetError, register
from tasks.targets.workload import Workload

if TYPE_CHECKING:
    import torch


@register("hf.causal_lm")
def make_causal_lm(
    device: torch.device,
    arch: str = "gpt2",
    batch: int = 2,
    seq: int = 128,
    layers: int = 2,
    dim: int = 128,
    heads: int = 4,
    vocab: int = 2048,
    use_cache: bool = False,
) -> Workload:
    """A Hugging Face causal LM (GPT-2 by default) from a config, random weights, no download (needs transformers).

    ``arch`` is a ``transformers`` model type (``gpt2``, ``llama``, ``qwen2``...); the sizes are
    passed under the standard config names (``num_hidden_layers``, ``hidden_size``,
    ``num_attention_heads``, ``max_position_embeddings``, ``vocab_size``), and an architecture's
    feed-forward width, where its config has one (``intermediate_size``), is 4 x ``dim``. The call
    returns the library's ``ModelOutput`` (with its key-value cache when ``use_cache``); the
    training loss is next-token cross-entropy on its logits.
    """
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as e:
        raise TargetError(
            "target 'hf.causal_lm' needs the 'transformers' package, which this worker cannot import "
            f"(pip install transformers): {e}"
        ) from e
    import torch

    from tasks.targets.layers import next_token_loss

    try:
        config = AutoConfig.for_model(
            arch,
            num_hidden_layers=layers,
            hidden_size=dim,
            num_attention_heads=heads,
            max_position_embeddings=seq,
            vocab_size=vocab,
            bos_token_id=0,  # inside the vocabulary, whatever its size
            eos_token_id=0,
            use_cache=use_cache,
        )
    except ValueError as e:  # an unknown model type
        raise TargetError(f"hf.causal_lm: {str(e).splitlines()[0]}") from e
    if hasattr(config, "intermediate_size"):
        config.intermediate_size = 4 * dim
    if hasattr(config, "num_key_value_heads"):
        config.num_key_value_heads = heads
    model = AutoModelForCausalLM.from_config(config).to(device)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return Workload(model, (ids,), loss_fn=lambda output: next_token_loss(output.logits, ids))
