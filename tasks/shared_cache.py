"""A compile cache shared across the cluster (``compile.cache: shared``, ``run --compile-cache LOCATION``).

A shared compile runs like a cold one (a fresh process, empty local cache directories:
``tasks.worker``, ``tasks.isolation``), with two steps around it, in torch's own portable format,
the "mega-cache" (``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``):

1. **Load**, before anything compiles: the artifacts stored at ``LOCATION/<key>.bin``, if any, go
   through ``torch.compiler.load_cache_artifacts``, which writes each entry into this process's
   (empty) local caches: inductor's FX graph cache (with the Triton kernels it bundles, on GPUs),
   AOTAutograd's cache, the autotuner's results and Dynamo's profile-guided shapes. The measured
   compile then looks them up as usual, and torch's counters say what hit (``CompileCache``).
2. **Store**, after the experiment: ``torch.compiler.save_cache_artifacts()`` returns every entry this
   process's compiles wrote or read (the measured compile's, and the check's own compile's), which
   is stored at the same place in one write (a single PUT on an object store, temporary file and
   rename on a file system), unless every entry came from the load: then nothing is new.

What the mega-cache does not carry, on a CPU: inductor's C++ kernels are stored as source in the FX
graph entry and built again (``g++``) in the new process, and inductor's probe of the CPU's vector
instructions (a few small C++ builds, once per cache directory) runs again; a fresh process pays both.

**The key** is a digest of what makes artifacts invalid elsewhere, or belong to another compile
(``key_fields``): torch, Triton and CUDA versions and Python's major.minor; the device type and
model (the GPU's name and compute capability, or the CPU's model name and torch's thread count,
which inductor's C++ kernels are specialised on: ``FxGraphHashDetails``); the compile options
(``compile`` without ``cache``); and what the compiled graphs depend on: target, params, phase,
precision, optimizer and replayed traffic. The seed, timing, checking, resources and the requested
GPU model are left out: they change neither the graphs nor the code generated for them. Torch keys
every entry again by the graph and its own environment, so a blob that does not fit (a user target
whose code changed under the same name) only misses, never serves wrong code, and the run's store
replaces it.

Nothing here raises: a location that cannot be read, a missing or corrupt blob, or a store that
fails become a note on the result (``CompileCache.shared_note``) and a compile like a cold one.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks.experiment import Experiment
from tasks.files import local_path, write_atomic
from tasks.ids import digest
from tasks.result import CompileCache
from tasks.text import error_line

KEY_FORMAT = 1  # what goes into the key; raise it when that changes, so that older blobs are not looked up
KEY_LENGTH = 32  # hex digits of sha256 kept: 128 bits
BLOB_SUFFIX = ".bin"  # LOCATION/<key>.bin: the bytes save_cache_artifacts returned
ABOUT_SUFFIX = ".json"  # LOCATION/<key>.json: the key's fields, for a person looking at the store
BLOB_MODE = 0o644  # rw-r--r--: a directory shared by every node's workers reads them


def key_fields(
    exp: Experiment, device: str, device_model: str | None, threads: int | None, versions: Mapping[str, str]
) -> dict[str, Any]:
    """What the shared key is a digest of (see the module's docstring for why each is in or out).
    ``threads`` counts on the CPU only: inductor's C++ kernels are built for torch's thread count."""
    python = versions.get("python")
    return {
        "format": KEY_FORMAT,
        "torch": versions.get("torch"),
        "triton": versions.get("triton"),
        "cuda": versions.get("cuda"),
        "python": ".".join(python.split(".")[:2]) if python else None,
        "device": device,
        "device_model": device_model,
        "threads": threads if device == "cpu" else None,
        "compile": exp.compile.model_dump(mode="json", exclude={"cache"}),
        "target": exp.target,
        "params": exp.params,
        "phase": exp.phase,
        "precision": exp.precision,
        "optimizer": exp.optimizer,
        "replay": exp.replay.model_dump(mode="json") if exp.replay is not None else None,
    }


def shared_key(fields: Mapping[str, Any]) -> str:
    """The key of ``key_fields``: sha256 of their canonical JSON, ``KEY_LENGTH`` hex digits."""
    return digest(fields, KEY_LENGTH)


def device_model(device: Any) -> str | None:
    """The device's model as the key names it: ``<GPU name> (sm_<major><minor>)``, or the CPU's model name."""
    import torch

    from tasks.metadata import cpu_model

    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (sm_{major}{minor})"
    return cpu_model() or platform.machine() or None


@dataclass
class SharedCache:
    """One experiment's use of the shared cache: its key, what the load took, what the store put back."""

    location: str | None  # a directory or an fsspec URL; None: the run gave none
    key: str
    fields: dict[str, Any]
    loaded: bool = False
    loaded_bytes: int = 0
    loaded_keys: set[tuple[str, str]] = field(default_factory=set)  # (cache, entry key) the load wrote
    load_s: float | None = None
    stored_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, exp: Experiment, device: Any, location: str | None) -> SharedCache:
        """The experiment's key, and the artifacts stored under it loaded into this process's local caches."""
        import torch

        from tasks.metadata import versions

        fields = key_fields(exp, device.type, device_model(device), torch.get_num_threads(), versions())
        shared = cls(location, shared_key(fields), fields)
        if location is None:
            shared.notes.append("no shared cache location given (run --compile-cache): compiled as cold, not stored")
            return shared
        started = time.perf_counter()
        shared._load(location)
        shared.load_s = time.perf_counter() - started
        return shared

    def _load(self, location: str) -> None:
        import torch

        try:
            data = read_blob(location, self.key + BLOB_SUFFIX)
        except Exception as e:
            self.notes.append(f"the shared cache could not be read ({error_line(e, with_type=True)}): nothing loaded")
            return
        if data is None:
            self.notes.append("nothing stored for this key yet")
            return
        try:
            info = torch.compiler.load_cache_artifacts(data)
        except Exception as e:
            info = None
            self.notes.append(f"the stored artifacts did not load ({error_line(e, with_type=True)}): compiled anew")
        else:
            if info is None:
                self.notes.append(
                    f"the stored artifacts ({len(data)} bytes) are not torch cache artifacts this torch reads "
                    "(corrupt or truncated): compiled anew"
                )
        if info is not None:
            self.loaded, self.loaded_bytes = True, len(data)
            self.loaded_keys = {(kind, key) for kind, keys in info.artifacts.items() for key in keys}

    def store(self) -> None:
        """Store what this process's compiles wrote or read, unless all of it came from the load."""
        import torch

        if self.location is None:
            return
        try:
            saved = torch.compiler.save_cache_artifacts()
        except Exception as e:
            self.notes.append(
                f"the artifacts could not be serialised ({error_line(e, with_type=True)}): nothing stored"
            )
            return
        if saved is None:
            self.notes.append("nothing to store: the compile left no cache artifacts (a backend without caches?)")
            return
        data, info = saved
        produced = {(kind, key) for kind, keys in info.artifacts.items() for key in keys}
        if produced <= self.loaded_keys:
            return  # every entry came from the load: the stored blob already holds them
        try:
            write_blob(self.location, self.key + ABOUT_SUFFIX, json.dumps(self.fields, indent=1).encode())
            write_blob(self.location, self.key + BLOB_SUFFIX, data)
        except Exception as e:
            self.notes.append(f"the artifacts could not be stored ({error_line(e, with_type=True)})")
            return
        self.stored_bytes = len(data)

    def recorded(self, cache: CompileCache | None) -> CompileCache:
        """``cache`` (the measured compile's counts; a bare one when there were none) with what the
        shared cache did."""
        base = cache if cache is not None else CompileCache(state="shared")
        return base.model_copy(
            update={
                "shared_key": self.key,
                "loaded": self.loaded,
                "loaded_bytes": self.loaded_bytes,
                "loaded_artifacts": len(self.loaded_keys),
                "load_s": self.load_s,
                "stored_bytes": self.stored_bytes,
                "shared_note": "; ".join(self.notes) or None,
            }
        )


def read_blob(location: str, name: str) -> bytes | None:
    """The object ``name`` under ``location`` (a directory or an fsspec URL); None when there is none."""
    folder = local_path(location)
    if folder is not None:
        path = folder / name
        return path.read_bytes() if path.is_file() else None
    import fsspec

    fs, root = fsspec.core.url_to_fs(location)
    path = root.rstrip("/") + "/" + name
    return bytes(fs.cat_file(path)) if fs.exists(path) else None


def write_blob(location: str, name: str, data: bytes) -> None:
    """Write ``name`` under ``location`` so that a reader sees the old object or the new one, never a part:
    one PUT on an object store; on a file system a temporary file, synced, renamed over the old one
    (``tasks.files.write_atomic``)."""
    folder = local_path(location)
    if folder is not None:
        write_atomic(folder / name, data, mode=BLOB_MODE)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(location)
    fs.pipe_file(root.rstrip("/") + "/" + name, data)
