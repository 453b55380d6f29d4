"""What every command shares: the consoles it prints on and the one-line failure it exits with.

Imports nothing of compilebench at import time, so that ``--help`` starts at once.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

# In logs and pipes: room for the results table's 14 columns with no number or verdict wrapped.
_WIDTH = None if sys.stdout.isatty() else 200
out_console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)


def fail(message: str, code: int) -> typer.Exit:
    """Print ``error: message`` on stderr, one line, and return the exit to raise with ``code``."""
    err_console.print(f"[bold red]error:[/bold red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)
