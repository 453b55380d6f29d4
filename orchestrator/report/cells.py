"""Text cells: the numbers of a report rounded for people, and a titled table of them (``Rows``) drawn
for a terminal (rich) or as Markdown.

Every view is built once as ``Rows`` and then drawn by whichever format asks; numbers are rounded
here and only here. The lowest floor of the report's rendering: this module imports nothing of
``orchestrator`` (only rich), so that every view, format and page may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final

from rich.table import Table
from rich.text import Text

TIE_TEXT = "tie within noise"


@dataclass
class Rows:
    """A titled table of text cells; ``right`` names the columns to right-align; ``notes`` follow it.
    ``total``: how many rows the whole table has, where ``rows`` was made with its first ones alone (a
    terminal's screenful of a big sweep's table, for ``clipped``, which says so); None where ``rows`` is all."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    right: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    total: int | None = None


SCREENFUL: Final = 40  # rows of one table on a terminal; past it the table shows its first rows and says the rest


def clipped(rows: Rows, limit: int = SCREENFUL, rest: str = "every row with --format markdown") -> Rows:
    """``rows`` cut to its first ``limit`` rows, a note first saying how many more there are (of its ``total``
    where it was made with its first rows alone) and where they are."""
    count = len(rows.rows) if rows.total is None else rows.total
    if count <= limit:
        return rows
    more = f"first {limit} of {count:,} rows; {rest}"
    return replace(rows, rows=rows.rows[:limit], notes=[more, *rows.notes])


# ------------------------------------------------------------------------------ number formatting


def ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 0.1 else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def times(value: float | None) -> str:
    return "-" if not value else f"{value:.2f}x"


def interval(ci: tuple[float, float] | None) -> str:
    return "-" if not ci else f"{ci[0]:.2f}-{ci[1]:.2f}"


def figure(value: float) -> str:
    """A calibration figure: 3 significant digits, whole numbers from 100 up (``51.2``, ``2890``)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def rate(value: float | None) -> str:
    """An achieved rate (TFLOP/s, GB/s) to 3 significant digits; what is below 0.001 says so."""
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3g}"


# ------------------------------------------------------------------------------------------ tables


def bad(header: str, cell: str) -> bool:
    """A cell shown in red: a status other than ok, a regression, a slow device."""
    return (header == "status" and cell != "ok") or cell == "REGRESSION" or (header == "slow" and cell == "slow")


def rich_table(rows: Rows) -> Table:
    """The rows as a rich table; cells are plain text (never markup), failures and regressions in red."""
    table = Table(title=Text(rows.title, style="table.title"))
    for name in rows.headers:  # long words (configuration labels) wrap rather than lose their end
        table.add_column(name, justify="right" if name in rows.right else "left", overflow="fold")
    for row in rows.rows:
        cells = [
            Text(cell, style="red" if bad(header, cell) else "") for header, cell in zip(rows.headers, row, strict=True)
        ]
        table.add_row(*cells)
    return table


def markdown_table(rows: Rows) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ") or " "

    lines = [f"**{rows.title}**", "", "| " + " | ".join(rows.headers) + " |"]
    lines.append("| " + " | ".join("---:" if h in rows.right else "---" for h in rows.headers) + " |")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows.rows]
    return "\n".join(lines)
