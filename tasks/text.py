"""One-line messages, for both sides: the first line of a text or an exception, and pydantic's first error
as ``field.path: problem``. A report cell, a failure note and a CLI error all read one line.

Nothing here imports torch or Ray; ``tasks/`` imports nothing of ``orchestrator/``, so the driver uses
these too.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError


def first_line(text: str, fallback: str = "", limit: int | None = None) -> str:
    """The first line of ``text`` stripped, ``fallback`` when there is none, cut to ``limit`` characters
    (the last one an ellipsis) when given."""
    stripped = text.strip()
    line = stripped.splitlines()[0] if stripped else fallback
    if limit is not None and len(line) > limit:
        return line[: limit - 1] + "…"
    return line


def error_line(e: BaseException, fallback: str | None = None, with_type: bool = False) -> str:
    """The first line of an exception's message. ``with_type``: ``"ValueError: bad shape"``. Without a
    message: ``fallback`` (``"ValueError: <fallback>"`` with the type), or the exception's type name alone."""
    name = type(e).__name__
    line = first_line(str(e))
    if not line and fallback is None:
        return name
    line = line or fallback or ""
    return f"{name}: {line}" if with_type else line


def validation_line(e: ValidationError, prefix: Sequence[object] = (), whole: str = "") -> str:
    """pydantic's first error as ``a.b.0: message`` (``prefix`` before its location). Where it has no
    location (the input as a whole is wrong): ``whole: message``, or the message alone without ``whole``."""
    err = e.errors()[0]
    where = ".".join(str(p) for p in (*prefix, *err["loc"])) or whole
    return f"{where}: {err['msg']}" if where else err["msg"]
