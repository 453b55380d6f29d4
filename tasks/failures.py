"""What went wrong, as data: out-of-memory detection through wrapped exceptions, a death of an
experiment's own process (one-line messages: ``tasks.text``)."""

from __future__ import annotations

DIED = "died"  # key of what ``Worker.run`` returns when the experiment's process died: {DIED: ErrorInfo as dict}
MAX_CAUSES = 16  # links of __cause__/__context__ followed before giving up


def out_of_memory(error: BaseException | None) -> bool:
    """Whether ``error``, or an exception it was raised from, is ``torch.OutOfMemoryError``
    (Dynamo and inductor wrap what a compiled call raises)."""
    import torch

    seen = 0
    while error is not None and seen < MAX_CAUSES:
        if isinstance(error, torch.OutOfMemoryError):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False
