"""Locations: a local path, or any fsspec URL (``s3://``, ``gs://``, ``memory://``...) for an object store.

A location given as a string is a URL when it starts with ``scheme://``; anything else is a
local path. ``file://`` URLs are local paths too (``location`` turns them into a ``Path``), so
everything local keeps the guarantees of a file system: locks, appends, atomic renames.

Object stores are reached through fsspec and the package of each scheme (``s3fs`` for
``s3://``, ``gcsfs`` for ``gs://``). Credentials and endpoints come from each store's own
standard settings, never from compilebench: for S3, botocore's chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and ``~/.aws/``, an instance role) and
``AWS_ENDPOINT_URL`` for an S3-compatible store (MinIO, Ceph), which botocore (since 1.31)
reads by itself under s3fs. Every failure of a store reaches the caller as ``StorageError``,
one line meant for the user.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tasks.files import PROBE_PREFIX, URL_SCHEME, local_path
from tasks.text import error_line

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

Location = Path | str  # a local path, or the URL of an object in a store (never a file:// URL)

CREDENTIALS_HINT = "the store's standard credentials (for S3: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"


class StorageError(OSError):
    """A location that cannot be used as asked; the message is one line meant for the user."""


def scheme(url: str) -> str:
    """``s3://bucket/key`` → ``s3``; ``""`` for a local path."""
    match = URL_SCHEME.match(url)
    return match.group(1).lower() if match else ""


def location(where: str | Path) -> Location:
    """``where`` as a ``Path`` when local (a path, ``~`` expanded, or a ``file://`` URL:
    ``tasks.files.local_path``), else the URL as given."""
    path = local_path(where)
    return path if path is not None else where


def open_location(url: str) -> tuple[AbstractFileSystem, str]:
    """The file system of ``url`` and the path within it, as fsspec resolves them.

    An unknown scheme, or a scheme whose package is not installed, is a ``StorageError``.
    """
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except ValueError as e:
        if "Protocol not known" in str(e):
            raise StorageError(
                f"{url}: unknown URL scheme '{scheme(url)}://'; give a local path or an fsspec URL "
                "such as s3://bucket/key, gs://bucket/key or file:///path"
            ) from None
        raise StorageError(f"{url}: {error_line(e)}") from None
    except ImportError as e:
        raise StorageError(f"{url}: {scheme(url)}:// needs a package that is not installed: {error_line(e)}") from None


def join(url: str, name: str) -> str:
    """``s3://b/run`` + ``r.json`` → ``s3://b/run/r.json``."""
    return url.rstrip("/") + "/" + name


def parent(url: str) -> str:
    """``s3://b/run/r.json`` → ``s3://b/run``; a bucket's root stays itself."""
    head, sep, _ = url.rstrip("/").rpartition("/")
    return head if sep and not head.endswith(":/") else url


def name_of(url: str) -> str:
    """The last part of ``url``: ``s3://b/run/r.json`` → ``r.json``."""
    return url.rstrip("/").rpartition("/")[2]


def bucket_of(url: str) -> str:
    """The bucket (or container) of an object-store URL: its host part."""
    return urlsplit(url).netloc


def problem(e: BaseException, url: str) -> str:
    """One line saying why ``url`` failed with ``e``, in the store's terms.

    A store says ``FileNotFoundError`` for a missing bucket when writing, ``PermissionError``
    for credentials it refuses (s3fs translates botocore's error codes to these).
    """
    if isinstance(e, StorageError):
        return str(e)
    if type(e).__name__ == "NoCredentialsError":  # botocore's, without importing botocore
        return f"{url}: no credentials found; set {CREDENTIALS_HINT}"
    if isinstance(e, PermissionError):
        return f"{url}: access denied ({error_line(e)}); check {CREDENTIALS_HINT}"
    if isinstance(e, FileNotFoundError) and "bucket" in str(e).lower():
        return f"{url}: bucket '{bucket_of(url)}' does not exist"
    if isinstance(e, FileNotFoundError):
        return f"{url}: No such file"
    return f"{url}: {error_line(e)}"


def probe_writable(folder: str, shown: str | None = None) -> None:
    """Write a small object in ``folder`` (a URL) and delete it, or raise ``StorageError`` saying why not.

    This is the first call a run makes to its store: it fails at once on an unknown scheme, a
    missing bucket or refused credentials, before anything else has started. ``shown``: the
    location the message names (default ``folder``), e.g. the report whose folder is probed.
    """
    shown = shown or folder
    try:
        fs, path = open_location(folder)
    except StorageError as e:
        raise StorageError(str(e).replace(folder, shown, 1)) from None
    probe = join(path, f"{PROBE_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        fs.pipe_file(probe, b"probe\n")
        fs.rm_file(probe)
    except Exception as e:
        raise StorageError(problem(e, shown)) from None


def read_bytes(url: str) -> bytes:
    """The bytes of the object at ``url``; ``StorageError`` saying why not."""
    fs, path = open_location(url)
    try:
        return bytes(fs.cat_file(path))
    except Exception as e:
        raise StorageError(problem(e, url)) from None


def write_bytes(url: str, data: bytes) -> None:
    """Store ``data`` at ``url`` in one PUT: readers see the old object or the new one, never a part."""
    fs, path = open_location(url)
    try:
        fs.pipe_file(path, data)
    except Exception as e:
        raise StorageError(problem(e, url)) from None


def glob(pattern: str) -> list[str]:
    """The URLs of the objects matching ``pattern`` (``*``, ``?``, ``[...]``, ``**``), sorted."""
    fs, path = open_location(pattern)
    try:
        return sorted(fs.unstrip_protocol(p) for p in fs.glob(path))
    except Exception as e:
        raise StorageError(problem(e, pattern)) from None
