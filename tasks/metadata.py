"""What it takes to reproduce a number: the worker's software versions, the inductor settings
in effect, and the resources the experiment asked for.

Versions do not change while a process runs, so they are read once per process
(``functools.cache``); inductor's settings can, so they are read for each experiment.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import subprocess
from pathlib import Path
from typing import Any

from tasks.models import CompileConfig, Experiment

ROOT = Path(__file__).resolve().parents[1]
NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")  # "NVRM version: NVIDIA UNIX ... Kernel Module  550.54.15 ..."
GIT_TIMEOUT_S = 5


@functools.cache
def versions() -> dict[str, str]:
    """torch, CUDA (the toolkit torch was built with), cuDNN, Triton, the NVIDIA driver,
    Python, compilebench and its git commit; each only where this machine has it."""
    import platform

    import torch

    found: dict[str, str | None] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": _cudnn(),
        "triton": _distribution_version("triton") or _distribution_version("pytorch-triton"),
        "driver": driver_version(),
        "python": platform.python_version(),
        "compilebench": _distribution_version("compilebench"),
        "git": git_commit(),
    }
    return {name: value for name, value in found.items() if value}


def result_metadata(exp: Experiment) -> dict[str, Any]:
    """The ``Result`` fields this module fills: ``requested`` and ``inductor_options``."""
    return {"requested": exp.resources, "inductor_options": inductor_options(exp.compile)}


def inductor_options(cfg: CompileConfig) -> dict[str, Any]:
    """Inductor settings that differ from its defaults for this compile, by dotted name: those
    changed in this process (environment variables, code, the compile pool size isolation sets),
    then those of ``compile.mode``, then ``compile.options`` (later ones win). Empty when the
    backend is not inductor. Values that are not JSON are kept as their ``repr``."""
    if cfg.backend != "inductor":
        return {}
    import torch._inductor
    import torch._inductor.config as inductor_config

    options: dict[str, Any] = {}
    entries = getattr(inductor_config, "_config", {})
    is_default = getattr(inductor_config, "_is_default", None)
    if is_default is not None:
        for name in sorted(entries):
            try:
                # inductor patches settings during a compile and puts them back: _is_default alone then
                # reports a setting as changed though its value is the default again, so compare values too
                value = getattr(inductor_config, name)
                if not is_default(name) and value != getattr(entries[name], "default", object()):
                    options[name] = value
            except Exception:  # an alias or a setting that cannot be read: skip it
                continue
    if cfg.mode is not None:
        options.update(torch._inductor.list_mode_options(cfg.mode))
    options.update(cfg.options)
    return {name: _plain(value) for name, value in options.items()}


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version, from NVML or ``/proc``; None without a driver."""
    try:
        import pynvml  # from nvidia-ml-py

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        pass
    try:
        words = NVIDIA_DRIVER_FILE.read_text().split()
    except OSError:
        return None
    return next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), None)


@functools.cache
def git_commit(root: Path = ROOT) -> str | None:
    """The commit of the compilebench checkout this runs from, with ``-dirty`` when files differ
    from it; None when it is not a git checkout (an installed wheel) or git is missing."""
    if not (root / ".git").exists():
        return None
    try:
        head = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True
    )
    return done.stdout.strip()


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cudnn() -> str | None:
    import torch

    try:
        version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        return None
    return str(version) if version else None


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def cpu_model() -> str | None:
    """The CPU's model name, as ``/proc/cpuinfo`` gives it; None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
