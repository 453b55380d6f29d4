"""What every HTML page of compilebench shares: its styles and palette, escaping, a table of rows
(``cells.Rows``) as HTML, a plotly figure as a div, and the self-contained document around them.

plotly.js is inlined once in a page's head (``document``), so that a page needs no network; each chart
is a div of its own (``figure_html``). The report's page (``html``) and the history's
(``history_html``) are built from these parts. Imports only the cells: nothing here knows a report,
and plotly is imported when a page is written, never on import.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from orchestrator.report.cells import TIE_TEXT, Rows, bad

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974"]
PLOT_CONFIG = {"displaylogo": False, "responsive": True}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1400px;
       padding: 0 16px; color: #1d1d1f; }
h1 { margin: 0 0 4px; } h2 { margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #555; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 8px 0; font-weight: 600; }
.incomplete { background: #fde2e1; border: 1px solid #e5534b; color: #8c1d18; }
.warning { background: #fff4d6; border: 1px solid #e0b400; color: #6b5200; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f4f5f7; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
.bad { color: #c0392b; font-weight: 600; } .tie { color: #8a6d00; }
.notes { color: #555; font-size: 13px; margin: 0 0 8px 0; padding-left: 18px; }
.chart { width: 100%; min-height: 420px; }
details pre { white-space: pre-wrap; font-size: 12px; background: #f6f8fa; padding: 8px; max-height: 300px;
              overflow: auto; }
select { font-size: 14px; padding: 2px 4px; max-width: 100%; }
.scroll { overflow-x: auto; }
"""


def document(title: str, body: list[str]) -> str:
    """The page as one string: ``title``, the styles and plotly.js in its head, the ``body`` parts one a line."""
    from plotly.offline import get_plotlyjs

    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title>"
        f"<style>{CSS}</style><script>{get_plotlyjs()}</script></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def table_html(rows: Rows) -> str:
    """The rows as a titled HTML table, numbers right-aligned, failures in red, ties marked; its notes below."""
    head = "".join(f"<th>{escape(h)}</th>" for h in rows.headers)
    body = []
    for row in rows.rows:
        cells = []
        for h, cell in zip(rows.headers, row, strict=True):
            cls = "num" if h in rows.right else ""
            if bad(h, cell):
                cls = "bad"
            elif cell == TIE_TEXT:
                cls = "tie"
            cells.append(f'<td class="{cls}">{escape(cell)}</td>' if cls else f"<td>{escape(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f"<li>{escape(n)}</li>" for n in rows.notes)
    return (
        f"<h3>{escape(rows.title)}</h3><div class='scroll'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>" + (f"<ul class='notes'>{notes}</ul>" if notes else "")
    )


def figure_html(fig: go.Figure, div_id: str) -> str:
    """The figure as a div of its own; plotly.js is in the page's head (``document``)."""
    return str(
        fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG, default_width="100%")
    )


def escape(text: object) -> str:
    """``text`` as HTML text or an attribute's value."""
    return html.escape(str(text), quote=True)
