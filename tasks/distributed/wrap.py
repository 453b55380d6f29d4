"""Parallelism applied to the built target, one function per strategy, in torchtitan's order: find the
blocks, compile (per block, or the whole wrapped model), wrap (DDP, or ``fully_shard`` per block and
then the model).

**Blocks.** FSDP2 shards each block as a unit (its parameters gathered for its forward, freed after),
and compiles each block apart under ``compile_per: block``. A module names its block classes in an
``fsdp_blocks`` attribute: a tuple of classes or class names (the built-in ``models.gpt`` names its
``TransformerLayer``; ``blocks.transformer_layer`` its attention and MLP). Without one, a Hugging Face
model's ``_no_split_modules`` (the classes its own device-map and FSDP wrapping keep whole) are
taken. A user target's factory may carry ``fsdp_blocks`` instead of its module. The blocks are the
outermost submodules of those classes; a target that names none is sharded as one unit.

**DDP.** ``DistributedDataParallel(bucket_cap_mb=...)``, then ``torch.compile`` of the DDP module,
with Dynamo's ``optimize_ddp`` as configured: ``ddp_optimizer`` splits the graph at bucket
boundaries so that gradient all-reduces overlap the backward, ``python_reducer`` leaves the reduction
to compiled autograd, ``off`` compiles one graph and lets DDP's C++ reducer run after it.

**FSDP2.** On a one-dimensional mesh of the gang (``init_device_mesh``, the CPU or CUDA as the
experiment runs): ``compile_per: block`` compiles each block (``torch.compile``, registered in its
parent in place of the block), then ``fully_shard``s it, then the model; ``model`` shards the blocks
and the model, then compiles the whole sharded model.

The eager side is the same wrapped model, uncompiled: under ``compile_per: block`` the compiled blocks
live inside it, so the eager side runs under ``torch.compiler.set_stance("force_eager")``, which runs
each compiled block's original forward. With ``compiled_autograd``, the compiled side's steps run under
compiled autograd (``torch._dynamo.compiled_autograd._enable``, as torchtitan's train context does),
which traces each backward whole, DDP's and FSDP2's gradient hooks included, and compiles it with the
experiment's backend; the eager side's backward stays the autograd engine's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tasks.compiling import compile_callable
from tasks.models import CompileConfig, DistributedConfig

OPTIMIZE_DDP: dict[str, Any] = {"ddp_optimizer": "ddp_optimizer", "python_reducer": "python_reducer", "off": False}
DEFAULT_BUCKET_CAP_MB = 25.0  # DistributedDataParallel's own default


class WrapError(ValueError):
    """A target that cannot be wrapped as the experiment asks (no module to wrap, blocks not found)."""


@dataclass
class Wrapped:
    """The target under its strategy: the module both sides train, each side's callable, and how the eager
    side must be called (``eager_context``, around each eager step)."""

    model: nn.Module
    eager: Callable[..., Any]
    compiled: Callable[..., Any]
    blocks: int  # blocks sharded (and compiled) apart; 0 for DDP
    per_block: bool  # compiled per block: the eager side needs force_eager
    compile_cfg: CompileConfig
    compiled_autograd: bool = False

    def eager_context(self) -> AbstractContextManager[Any]:
        """Around each eager step: compiled blocks run their original forward."""
        return torch.compiler.set_stance("force_eager") if self.per_block else nullcontext()

    def compiled_context(self) -> AbstractContextManager[Any]:
        """Around each compiled step: compiled autograd, where the experiment asks for it."""
        if not self.compiled_autograd:
            return nullcontext()
        from torch._dynamo import compiled_autograd

        compiler = functools.partial(torch.compile, backend=self.compile_cfg.backend, fullgraph=True, dynamic=True)
        return compiled_autograd._enable(compiler)


def block_classes(model: nn.Module, factory: Callable[..., Any] | None = None) -> tuple[Any, ...]:
    """The block classes (or names) a target names: its module's ``fsdp_blocks``, its factory's, or a
    Hugging Face model's ``_no_split_modules``; empty where it names none."""
    for owner in (model, factory):
        named = getattr(owner, "fsdp_blocks", None)
        if named:
            return tuple(named)
    return tuple(getattr(model, "_no_split_modules", None) or ())


def find_blocks(model: nn.Module, classes: tuple[Any, ...]) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, name, block) of every outermost submodule of ``model`` whose class is one of ``classes``
    (a class, or its name), in module order; the model itself is never one of its blocks."""
    names = {c for c in classes if isinstance(c, str)}
    types = tuple(c for c in classes if isinstance(c, type))

    def is_block(m: nn.Module) -> bool:
        return isinstance(m, types) or type(m).__name__ in names

    def walk(parent: nn.Module) -> Iterator[tuple[nn.Module, str, nn.Module]]:
        for name, child in parent.named_children():
            if is_block(child):
                yield parent, name, child
            else:
                yield from walk(child)

    return list(walk(model))


def wrap(
    model: Any,
    cfg: DistributedConfig,
    compile_cfg: CompileConfig,
    device: torch.device,
    factory: Callable[..., Any] | None = None,
) -> Wrapped:
    """The target wrapped and compiled as ``cfg`` says (see the module docstring)."""
    if not isinstance(model, nn.Module):
        raise WrapError(f"distributed.strategy {cfg.strategy} needs an nn.Module target, got {type(model).__name__}")
    torch._dynamo.config.compiled_autograd = cfg.compiled_autograd  # the reset puts it back after the experiment
    if cfg.strategy == "ddp":
        return wrap_ddp(model, cfg, compile_cfg, device)
    return wrap_fsdp2(model, cfg, compile_cfg, device, factory)


def wrap_ddp(model: nn.Module, cfg: DistributedConfig, compile_cfg: CompileConfig, device: torch.device) -> Wrapped:
    """``DistributedDataParallel`` around the model, Dynamo's ``optimize_ddp`` set, the DDP module compiled."""
    from torch.nn.parallel import DistributedDataParallel

    torch._dynamo.config.optimize_ddp = OPTIMIZE_DDP[cfg.optimize_ddp or "ddp_optimizer"]
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index or 0] if device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb or DEFAULT_BUCKET_CAP_MB,
    )
    return Wrapped(ddp, ddp, compile_callable(ddp, compile_cfg), 0, False, compile_cfg, cfg.compiled_autograd)


def wrap_fsdp2(
    model: nn.Module,
    cfg: DistributedConfig,
    compile_cfg: CompileConfig,
    device: torch.device,
    factory: Callable[..., Any] | None = None,
) -> Wrapped:
    """``fully_shard`` per block, then the model, on a mesh of the whole gang; compiled per block first
    (torchtitan's order) or as a whole after sharding."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    reshard = True if cfg.reshard_after_forward is None else cfg.reshard_after_forward
    per_block = (cfg.compile_per or "block") == "block"
    blocks = find_blocks(model, block_classes(model, factory))
    if per_block and not blocks:
        raise WrapError(
            f"distributed.compile_per 'block': target {type(model).__name__} names no blocks (give its module or "
            "factory an fsdp_blocks attribute, or use compile_per: model)"
        )
    for parent, name, block in blocks:
        if per_block:
            block = compile_callable(block, compile_cfg)  # type: ignore[assignment]  # an OptimizedModule
            parent.register_module(name, block)  # FSDP's hooks on it stay outside the compiled code
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    compiled = model if per_block else compile_callable(model, compile_cfg)
    return Wrapped(model, model, compiled, len(blocks), per_block, compile_cfg, cfg.compiled_autograd)
