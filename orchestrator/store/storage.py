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

Conditional writes (``read_version``, ``create_only``, ``replace_version``, ``delete_version``): an
object read with its version tag, then created only if absent, replaced or deleted only if it is still
that version. On S3 they are the store's own conditions, sent through s3fs's botocore client (fsspec's
interface carries none of them but the create): ``If-None-Match: *`` on PutObject to create, ``If-Match:
<ETag>`` on PutObject to replace and on DeleteObject to delete, each answered 412 when it does not
hold, so of two writers only one wins. Elsewhere (``conditional`` is False) they are emulated by a read,
a comparison and a write: not atomic, the caller says so.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tasks.files import PROBE_PREFIX, URL_SCHEME, local_path
from tasks.text import error_line

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

Location = Path | str  # a local path, or the URL of an object in a store (never a file:// URL)

CREDENTIALS_HINT = "the store's standard credentials (for S3: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"


# Where fsspec's ``info()`` puts an object's modification time: s3fs, adlfs, local files and gcsfs,
# gcsfs's raw field; ``created`` (the memory store) where the store rewrites an object as a new one.
_MODIFIED_KEYS = ("LastModified", "last_modified", "mtime", "updated", "created")

# S3's answers to a condition that does not hold: 412 PreconditionFailed; 409 ConditionalRequestConflict
# when another conditional write to the key is in flight; 404 NoSuchKey to If-Match on an absent key.
_CONDITION_CODES = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404")


class StorageError(OSError):
    """A location that cannot be used as asked; the message is one line meant for the user."""


class ConditionFailed(StorageError):
    """A conditional write or delete found the object other than as read: another version, or gone."""


@dataclass(frozen=True)
class Version:
    """An object as read: its bytes, the tag a conditional write names this version by (S3's ETag;
    elsewhere a digest of the bytes), and when the store wrote it (epoch seconds, the store's clock;
    None where the store does not say)."""

    data: bytes
    tag: str
    modified: float | None


def scheme(url: str) -> str:
    """``s3://bucket/key`` → ``s3``; ``""`` for a local path."""
    match = URL_SCHEME.match(url)
    return match.group(1).lower() if match else ""


def location(where: str | Path) -> Location:
    """``where`` as a ``Path`` when local (a path, ``~`` expanded, or a ``file://`` URL:
    ``tasks.files.local_path``), else the URL as given."""
    path = local_path(where)
    return path if path is not None else where


def _package_of(fs: AbstractFileSystem) -> str:
    """The package whose file system ``fs`` is (``s3fs``, ``gcsfs``, ``adlfs``, ``fsspec`` for its own): what a
    store can do, conditional or streamed writes, buckets, depends on it."""
    return type(fs).__module__.split(".")[0]


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


def missing_bucket(url: str) -> str | None:
    """One line saying that the bucket of ``url`` does not exist, where it does not; None where it does, or the
    store has no buckets or cannot tell. A store lists a missing bucket as empty: this tells the two apart
    where a listing found nothing."""
    fs, _ = open_location(url)
    if _package_of(fs) not in ("s3fs", "gcsfs", "adlfs"):
        return None
    bucket = bucket_of(url)
    try:
        there = fs.exists(bucket)
    except Exception:
        return None
    return None if there else f"{url}: bucket '{bucket}' does not exist"


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


def write_pieces(url: str, pieces: Iterable[bytes]) -> None:
    """Store ``pieces``, written in turn, as the one object at ``url``: readers see the old object or the new one,
    never a part. On S3 (s3fs) they are streamed, never all held: each ``default_block_size`` (50 MB) goes up as a
    part of a multipart upload, which S3 completes, making the object, only once the last piece is written; where
    the pieces stop (an error, Ctrl-C) it is aborted and nothing is made. A v3 export of 100,000 results (1 GB)
    joined first took 2.2 GB at its peak. Elsewhere the pieces are joined and stored in one PUT (``write_bytes``):
    not every store's streamed file is made whole at once. An error of the pieces themselves is raised as it is;
    the store's, as ``StorageError``."""
    fs, path = open_location(url)
    if _package_of(fs) != "s3fs":
        write_bytes(url, b"".join(pieces))
        return
    try:
        f = fs.open(path, "wb")
    except Exception as e:
        raise StorageError(problem(e, url)) from None
    try:
        for piece in pieces:
            try:
                f.write(piece)
            except Exception as e:
                raise StorageError(problem(e, url)) from None
    except BaseException:
        _abandon(f)
        raise
    try:
        f.close()
    except Exception as e:
        raise StorageError(problem(e, url)) from None


def _abandon(f: Any) -> None:
    """An upload that must make nothing: its multipart upload aborted (where one was begun), and the file marked
    closed so that neither ``close`` nor its finalizer completes it."""
    with contextlib.suppress(Exception):  # the store unreachable too: an unfinished upload makes no object
        f.discard()
    f.closed = True


def glob(pattern: str) -> list[str]:
    """The URLs of the objects matching ``pattern`` (``*``, ``?``, ``[...]``, ``**``), sorted."""
    fs, path = open_location(pattern)
    try:
        return sorted(fs.unstrip_protocol(p) for p in fs.glob(path))
    except Exception as e:
        raise StorageError(problem(e, pattern)) from None


def conditional(fs: AbstractFileSystem) -> bool:
    """Whether writes to ``fs`` can be made conditional by the store itself: S3 through s3fs, with a
    botocore that sends ``IfNoneMatch`` and ``IfMatch`` (s3fs drops parameters botocore does not know)."""
    return _package_of(fs) == "s3fs" and _botocore_sends_conditions()


def without_conditions(fs: AbstractFileSystem, url: str) -> str | None:
    """Why writes to ``fs`` (that of ``url``) cannot be conditional, as a clause for people; None when they can."""
    if conditional(fs):
        return None
    if _package_of(fs) == "s3fs":
        import botocore

        return f"botocore {botocore.__version__} cannot send S3's conditional writes (a newer one can)"
    return f"{scheme(url)}:// gives compilebench no conditional writes (S3 does)"


@functools.cache
def _botocore_sends_conditions() -> bool:
    """PutObject takes ``IfNoneMatch`` and ``IfMatch``, DeleteObject ``IfMatch``, in this botocore's S3 model."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("s3")
    put = model.operation_model("PutObject").input_shape.members
    delete = model.operation_model("DeleteObject").input_shape.members
    return "IfNoneMatch" in put and "IfMatch" in put and "IfMatch" in delete


def read_version(fs: AbstractFileSystem, path: str) -> Version:
    """The object at ``path`` with its version tag and time, read at once (S3: one GetObject);
    ``FileNotFoundError`` when there is none."""
    if conditional(fs):
        answer = _s3_call(fs, "get_object", path, read_body=True)
        return Version(answer["Body"], str(answer["ETag"]), modified_time(answer))
    fs.invalidate_cache(path)  # info() may answer from a listing made before the last write
    data = bytes(fs.cat_file(path))
    return Version(data, _digest(data), modified_time(fs.info(path)))


def create_only(fs: AbstractFileSystem, path: str, data: bytes) -> str:
    """Write ``path`` only if it does not exist (S3: ``If-None-Match: *``); its new version tag.
    ``FileExistsError`` when it does. Elsewhere fsspec's exclusive create, where the store's
    package has one, else a check then a write."""
    if conditional(fs):
        try:
            return str(_s3_call(fs, "put_object", path, Body=data, IfNoneMatch="*")["ETag"])
        except ConditionFailed:
            raise FileExistsError(path) from None
    try:
        fs.pipe_file(path, data, mode="create")
    except TypeError:  # a package that predates fsspec's exclusive writes
        if fs.exists(path):
            raise FileExistsError(path) from None
        fs.pipe_file(path, data)
    return _digest(data)


def replace_version(fs: AbstractFileSystem, path: str, data: bytes, tag: str) -> str:
    """Replace ``path`` with ``data`` only if it is still the version ``tag`` (S3: ``If-Match``); its
    new version tag. ``ConditionFailed`` when it is another version, or gone."""
    if conditional(fs):
        return str(_s3_call(fs, "put_object", path, Body=data, IfMatch=tag)["ETag"])
    _check_version(fs, path, tag)
    fs.pipe_file(path, data)
    return _digest(data)


def delete_version(fs: AbstractFileSystem, path: str, tag: str) -> None:
    """Delete ``path`` only if it is still the version ``tag`` (S3: ``If-Match`` on DeleteObject);
    ``ConditionFailed`` when it is another version, or gone."""
    if conditional(fs):
        _s3_call(fs, "delete_object", path, IfMatch=tag)
        return
    _check_version(fs, path, tag)
    fs.rm_file(path)


def _check_version(fs: AbstractFileSystem, path: str, tag: str) -> None:
    try:
        current = read_version(fs, path)
    except FileNotFoundError:
        raise ConditionFailed(f"{path}: gone") from None
    if current.tag != tag:
        raise ConditionFailed(f"{path}: another version")


def _digest(data: bytes) -> str:
    """The version tag of an object on a store without one of its own: a digest of its bytes."""
    return hashlib.sha256(data).hexdigest()


def _s3_call(fs: Any, method: str, path: str, *, read_body: bool = False, **params: Any) -> dict[str, Any]:
    """One S3 request through s3fs's own botocore client (its credentials, endpoint and retries), on
    s3fs's event loop; ``ConditionFailed`` when a condition it sent does not hold, ``FileNotFoundError``
    for a missing object of a request that sent none."""
    from fsspec.asyn import sync

    bucket, key, _ = fs.split_path(path)

    async def call() -> dict[str, Any]:
        answer: dict[str, Any] = await fs._call_s3(method, Bucket=bucket, Key=key, **params)
        if read_body:
            body = answer["Body"]
            try:
                answer["Body"] = await body.read()
            finally:
                body.close()
        return answer

    try:
        return sync(fs.loop, call)
    except Exception as e:
        code = _s3_code(e)
        conditions = "IfMatch" in params or "IfNoneMatch" in params
        if conditions and code in _CONDITION_CODES:
            raise ConditionFailed(f"{path}: {code}") from None
        if code == "NoSuchKey":
            raise FileNotFoundError(path) from None
        raise
    finally:
        fs.invalidate_cache(path)


def _s3_code(e: BaseException) -> str | None:
    """The S3 error code of ``e``: botocore's ``ClientError``, or the one s3fs translated it from."""
    for error in (e, e.__cause__):
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            return str(code) if code is not None else None
    return None


def modified_time(info: dict[str, Any]) -> float | None:
    """An object's modification time in fsspec's ``info()`` (or S3's answer), as epoch seconds: a
    ``datetime`` (one without a zone is UTC), a number, or an ISO 8601 string; None where there is none."""
    for key in _MODIFIED_KEYS:
        value = info.get(key)
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None
