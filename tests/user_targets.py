"""Targets as a user would write them, named by import path in specs (``tests.user_targets:...``)."""

from __future__ import annotations

import torch


def make_scaled(device: torch.device, n: int = 64):
    """A plain function and its inputs: the factory contract."""
    return (lambda x: torch.tanh(x) * 3), (torch.randn(n, device=device),)


def make_broken(device: torch.device):
    """A factory that fails: the experiment must become a runtime_error, not a crash."""
    raise ValueError("this factory cannot build its target")


def make_failing_call(device: torch.device):
    def fn(x):
        raise RuntimeError("boom inside the target")

    return fn, (torch.ones(2, device=device),)


def make_sleepy(device: torch.device, ms: float = 50.0):
    """A call that takes ``ms`` of wall time, long enough for tasks to overlap."""
    import time

    def fn(x):
        time.sleep(ms / 1e3)
        return x + 1

    return fn, (torch.ones(4, device=device),)


def make_relu(device: torch.device):
    """torch.relu in a graph: the debug backends named *_TESTING_ONLY break exactly this op."""
    return (lambda x: torch.relu(x) * 2), (torch.randn(16, device=device),)


def make_crash(device: torch.device):
    """Kills its own worker process, as a segfault or the OOM killer would."""
    import os

    os._exit(3)


PYTHON_FORWARDS = {"eager": 0}


class CountingModule(torch.nn.Module):
    """Counts the forwards Python runs outside Dynamo: the eager calls."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if not torch.compiler.is_compiling():
            PYTHON_FORWARDS["eager"] += 1
        return self.lin(x)


def make_counting_module(device: torch.device):
    PYTHON_FORWARDS["eager"] = 0
    return CountingModule().to(device), (torch.randn(2, 4, device=device),)


# The five cases of issue 7's table, and the other shapes of output a check must handle.


def make_nested(device: torch.device, n: int = 64):
    """A nested output with non-tensor leaves: a dict holding a list, a tuple, an int and a str."""

    def fn(x):
        t = torch.tanh(x)
        return {"logits": t * 2, "aux": [t + 1, (t.sum(), 3)], "name": "out"}

    return fn, (torch.randn(n, device=device),)


SEEN_BY_MUTATING = []


def make_mutating(device: torch.device, n: int = 64):
    """Adds 1 to its input in place: every call must still see the same input values."""
    SEEN_BY_MUTATING.clear()

    def fn(x):
        if not torch.compiler.is_compiling():
            SEEN_BY_MUTATING.append(float(x[0]))
        x.add_(1)
        return x * 2

    return fn, (torch.zeros(n, device=device),)


def make_long_sum(device: torch.device, n: int = 1_000_000, total: float = 100.0):
    """A long float32 reduction that inductor sums in another order than eager.

    The input is shifted to sum to ``total``: the 2e-4 to 3e-3 by which two summation orders differ
    are then a relative 2e-6 to 3e-5, above assert_close's float32 rtol (1.3e-6), below the 1e-4
    of PyTorch's harness."""
    x = torch.randn(n, device=device)
    return (lambda x: (x * 1.0001).sum() + x.pow(2).mean()), (x - x.mean() + total / n,)


def make_dropout_mlp(device: torch.device, width: int = 32, batch: int = 8):
    """Linear then Dropout(0.5), as nn.Module returns it: in training mode."""
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Dropout(0.5)).to(device)
    return model, (torch.randn(batch, width, device=device),)


class LayerCache:
    """A cache layer as a library keeps it: tensors among other attributes, no registered structure."""

    def __init__(self, keys, values):
        self.keys, self.values = keys, values
        self.is_initialized = True
        self.device = keys.device


class Cache:
    def __init__(self):
        self.layers = []


class ModelOutputLike(dict):
    """A dict subclass with attribute access, as Hugging Face's ModelOutput is."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(name) from e


class TinyCachingLM(torch.nn.Module):
    """Returns a ModelOutput-like dict holding logits and a cache object of key/value tensors."""

    def __init__(self, vocab: int = 50, width: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.k, self.v = torch.nn.Linear(width, width), torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        cache = Cache()
        cache.layers.append(LayerCache(self.k(h), self.v(h)))
        return ModelOutputLike(logits=self.head(torch.tanh(h)), cache=cache)


def make_caching_lm(device: torch.device, batch: int = 2, seq: int = 8):
    return TinyCachingLM().to(device), (torch.randint(0, 50, (batch, seq), device=device),)


def make_hf_gpt2(device: torch.device, layers: int = 2, width: int = 64, heads: int = 2, seq: int = 16):
    """Hugging Face GPT-2 from a config with random weights (needs ``transformers``; nothing downloaded)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    vocab = 128
    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=seq, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config).to(device)
    return model, (torch.randint(0, vocab, (2, seq), device=device),)


class Opaque:
    """No tensors, no attributes, no __eq__: nothing a check can compare."""

    __slots__ = ()


def make_opaque(device: torch.device):
    return (lambda x: (x * 2, Opaque())), (torch.randn(8, device=device),)


def make_nondeterministic(device: torch.device):
    """Noise from a generator the experiment's seed does not reset: eager differs from itself."""
    generator = torch.Generator(device=device).manual_seed(0)

    def fn(x):
        return x + torch.rand(x.shape, generator=generator, device=x.device)

    return fn, (torch.zeros(8, device=device),)


def make_linear(device: torch.device, width: int = 64, batch: int = 16):
    """A Linear layer: parameters for training, outputs of order 1."""
    return torch.nn.Linear(width, width).to(device), (torch.randn(batch, width, device=device),)


MODES = []


class ModeRecorder(torch.nn.Module):
    """Records the module's mode and the grad mode of every eager forward."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if not torch.compiler.is_compiling():
            MODES.append((self.training, torch.is_grad_enabled()))
        return self.lin(x)


def make_mode_recorder(device: torch.device):
    MODES.clear()
    return ModeRecorder().to(device), (torch.randn(2, 4, device=device),)


def make_classifier(device: torch.device, batch: int = 4):
    """A Workload with its own loss: cross entropy against fixed labels."""
    from tasks.targets import Workload

    labels = torch.randint(0, 3, (batch,), device=device)
    model = torch.nn.Linear(8, 3).to(device)
    return Workload(
        model,
        (torch.randn(batch, 8, device=device),),
        loss_fn=lambda out: torch.nn.functional.cross_entropy(out, labels),
    )


# NaN and Inf: what only the compiled side returns (``torch.compiler.is_compiling()`` is True while Dynamo traces).


def make_overflow(device: torch.device, n: int = 64, overflow: bool = True, spoil: str = "none"):
    """``tanh(x) + (x*x - x*x)``. With ``overflow``, x[0] = 1e20: in float32 x*x overflows there and
    inf - inf gives eager one NaN that float64 (1e40 - 1e40 = 0) does not have. ``spoil`` is what the
    compiled side does besides: ``all`` (NaN everywhere), ``one`` (NaN at index 3), ``inf`` (+Inf at 5)."""
    x = torch.randn(n, device=device)
    if overflow:
        x[0] = 1e20

    def fn(x):
        big = x * x
        out = torch.tanh(x) + (big - big)
        if torch.compiler.is_compiling():
            if spoil == "all":
                out = out * float("nan")
            elif spoil in ("one", "inf"):
                mark = torch.zeros_like(out)
                mark[3 if spoil == "one" else 5] = float("nan") if spoil == "one" else float("inf")
                out = out + mark
        return out

    return fn, (x,)


def make_log(device: torch.device, n: int = 64):
    """``log`` of inputs half of which are negative: NaN at the same places in eager, float64 and compiled."""
    return (lambda x: torch.log(x)), (torch.randn(n, device=device),)


# Shape-traffic replay: a target built at several sizes, and a backend that counts what it compiles.

REPLAY_GRAPHS: list[str] = []  # per graph the counting backend compiled: its input's shape, or "dynamic"


def replay_counting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """Records each graph it is given, then runs it as it is: ``dynamic`` when Dynamo passes it a
    symbolic size (a dynamic dimension), else the shape of its last tensor input (the target's input)."""
    symbolic = any(isinstance(i, torch.SymInt) for i in example_inputs)
    tensors = [i for i in example_inputs if isinstance(i, torch.Tensor)]
    REPLAY_GRAPHS.append("dynamic" if symbolic else str(tuple(tensors[-1].shape)))
    return gm.forward


if "replay_counting_TESTING_ONLY" not in torch._dynamo.backends.registry._COMPILER_FNS:  # imported once more
    torch._dynamo.register_backend(replay_counting_backend, name="replay_counting_TESTING_ONLY")


class SizedLinear(torch.nn.Module):
    """Linear(4, 4) then relu over rows: the row count is the size a replay varies. With
    ``eager_fails``, a call that Dynamo does not trace raises."""

    def __init__(self, eager_fails: bool = False):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.eager_fails = eager_fails

    def forward(self, x):
        if self.eager_fails and not torch.compiler.is_compiling():
            raise RuntimeError("only the eager side fails")
        return torch.relu(self.lin(x))


def make_sized(device: torch.device, rows: int = 8, broken_at: int | None = None, eager_fails: bool = False):
    """``SizedLinear`` on a (rows, 4) input; the factory fails when ``rows == broken_at``."""
    if rows == broken_at:
        raise ValueError(f"cannot build {rows} rows")
    return SizedLinear(eager_fails).to(device), (torch.randn(rows, 4, device=device),)
