"""What every HTML page of compilebench shares: its styles and palette, escaping, a table of rows
(``cells.Rows``) as HTML, a plotly figure as a div, and the self-contained document around them.

plotly.js is inlined once in a page's head (``document``), so that a page needs no network; each chart
is a div of its own (``figure_html``). The report's page (``html``) and the history's
(``history_html``) are built from these parts. Imports only the cells: nothing here knows a report,
and plotly is imported when a page is written, never on import.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Final

import orjson

from orchestrator.report.cells import TIE_TEXT, Rows, bad

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974"]
PAGE_ROWS: Final = 100  # rows of a table in the page's DOM at once; a longer table is paged and filtered in the browser
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
.pager { font-size: 13px; margin: 4px 0; } .pager input { width: 24em; }
"""
# A long table's rows travel as JSON (``paged_table_html``) and are drawn PAGE_ROWS at a time, those whose text holds
# every word of the filter box: a page of 100,000 results stays as quick as one of 100.
PAGED_JS = """
(function () {
  const box = document.currentScript.parentElement;
  const data = JSON.parse(box.querySelector('script[type="application/json"]').textContent);
  const body = box.querySelector('tbody'), said = box.querySelector('.shown'), filter = box.querySelector('input');
  let rows = data.rows.map((r, i) => i), page = 0;
  function cell(i, j) {
    const td = document.createElement('td'), cls = (data.marks[i] || {})[j] || (data.num.includes(j) ? 'num' : '');
    if (cls) td.className = cls;
    td.textContent = data.rows[i][j];
    return td;
  }
  function draw() {
    const pages = Math.max(1, Math.ceil(rows.length / data.page));
    page = Math.min(Math.max(page, 0), pages - 1);
    body.replaceChildren(...rows.slice(page * data.page, (page + 1) * data.page).map(i => {
      const tr = document.createElement('tr');
      data.rows[i].forEach((_, j) => tr.appendChild(cell(i, j)));
      return tr;
    }));
    const first = rows.length ? page * data.page + 1 : 0, last = Math.min((page + 1) * data.page, rows.length);
    said.textContent = `rows ${first}-${last} of ${rows.length.toLocaleString()}`
      + ` (${data.rows.length.toLocaleString()} in all), page ${page + 1} of ${pages}`;
  }
  filter.addEventListener('input', () => {
    const words = filter.value.toLowerCase().split(/\\s+/).filter(Boolean);
    rows = data.rows.map((r, i) => i).filter(i => {
      const text = data.rows[i].join(' ').toLowerCase();
      return words.every(w => text.includes(w));
    });
    page = 0;
    draw();
  });
  box.querySelector('.prev').addEventListener('click', () => { page -= 1; draw(); });
  box.querySelector('.next').addEventListener('click', () => { page += 1; draw(); });
  draw();
})();
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
    """The rows as a titled HTML table, numbers right-aligned, failures in red, ties marked; its notes below.
    Past ``PAGE_ROWS`` rows: ``paged_table_html``."""
    if len(rows.rows) > PAGE_ROWS:
        return paged_table_html(rows)
    head = "".join(f"<th>{escape(h)}</th>" for h in rows.headers)
    body = []
    for row in rows.rows:
        cells = []
        for h, cell in zip(rows.headers, row, strict=True):
            cls = _cell_class(h, cell) or ("num" if h in rows.right else "")
            cells.append(f'<td class="{cls}">{escape(cell)}</td>' if cls else f"<td>{escape(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f"<h3>{escape(rows.title)}</h3><div class='scroll'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>" + _notes_html(rows)
    )


def paged_table_html(rows: Rows, page: int = PAGE_ROWS) -> str:
    """A long table: its cells as compact JSON (with the columns to right-align and the cells to mark) and an
    empty body that a script fills ``page`` rows at a time, with a filter box and previous/next buttons."""
    marks = {}
    status = [j for j, h in enumerate(rows.headers) if h == "status"]
    slow = [j for j, h in enumerate(rows.headers) if h == "slow"]
    for i, row in enumerate(rows.rows):
        if _MARKED.isdisjoint(row) and all(row[j] == "ok" for j in status) and all(row[j] != "slow" for j in slow):
            continue  # no cell of it is marked (``_cell_class``), told at C speed for most of 100,000 rows
        marked = {
            j: cls for j, (h, cell) in enumerate(zip(rows.headers, row, strict=True)) if (cls := _cell_class(h, cell))
        }
        if marked:
            marks[i] = marked
    num = [j for j, h in enumerate(rows.headers) if h in rows.right]
    data = {"page": page, "num": num, "marks": marks, "rows": rows.rows}
    # orjson: a fourth of ``json.dumps``'s time for 100,000 rows; UTF-8 as it is (the page is UTF-8), row marks'
    # indices as the strings JSON keys are
    payload = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode().replace("</", "<\\/")
    head = "".join(f"<th>{escape(h)}</th>" for h in rows.headers)
    return (
        f"<h3>{escape(rows.title)}</h3><div class='paged'><p class='pager'>"
        "<input type='search' placeholder='filter: words every row shown must hold'> "
        "<button class='prev'>previous</button> <button class='next'>next</button> <span class='shown'></span></p>"
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody></tbody></table></div>"
        f'<script type="application/json">{payload}</script><script>{PAGED_JS}</script></div>' + _notes_html(rows)
    )


_MARKED: Final = frozenset({"REGRESSION", TIE_TEXT})  # cells marked in any column (``bad``, ``_cell_class``)


def _cell_class(header: str, cell: str) -> str:
    return "bad" if bad(header, cell) else "tie" if cell == TIE_TEXT else ""


def _notes_html(rows: Rows) -> str:
    notes = "".join(f"<li>{escape(n)}</li>" for n in rows.notes)
    return f"<ul class='notes'>{notes}</ul>" if notes else ""


def figure_html(fig: go.Figure, div_id: str) -> str:
    """The figure as a div of its own; plotly.js is in the page's head (``document``)."""
    return str(
        fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG, default_width="100%")
    )


def escape(text: object) -> str:
    """``text`` as HTML text or an attribute's value."""
    return html.escape(str(text), quote=True)
