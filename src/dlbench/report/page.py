"""The report page: one self-contained HTML file, charts drawn in the browser by vega-embed.

Scripts and styles are inline; the only links are to the chart images beside the page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from typing import Any

from dlbench.report.datasets import UNPACK_SCRIPT
from dlbench.report.style import Figure, NumbersTable, nouns

# The page's generator tag, by which a later report knows that the page it would replace
# is a report's (dlbench.report.output.check_replaceable).
GENERATOR = '<meta name="generator" content="dlbench report">'

CSS = """
:root { --ink:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bg:#f5f7fa; --accent:#4c78a8; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font:15px/1.5 "Helvetica Neue", Helvetica, Arial, sans-serif; }
header { background:linear-gradient(120deg,#1f3a5f,#4c78a8); color:#fff; padding:28px 0 22px; }
.wrap { max-width:1320px; margin:0 auto; padding:0 28px; }
h1 { margin:0 0 6px; font-size:28px; font-weight:600; letter-spacing:.2px; }
header .meta { margin:0 0 18px; color:#dbe6f3; font-size:13px; }
.chip { display:inline-block; background:rgba(255,255,255,.16); border-radius:12px;
  padding:1px 10px; margin:0 4px 4px 0; font-size:13px; color:#fff; }
.cards { display:flex; gap:12px; flex-wrap:wrap; }
.card { background:#fff; color:var(--ink); border-radius:10px; padding:10px 18px; min-width:96px;
  box-shadow:0 1px 3px rgba(0,0,0,.18); border-top:4px solid #9aa5b1; }
.card .num { font-size:26px; font-weight:600; line-height:1.1; }
.card .lbl { font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.6px; }
.card.status-ok { border-top-color:#3b9c57; } .card.status-oom { border-top-color:#e39b1b; }
.card.status-failed { border-top-color:#d64545; } .card.status-skipped { border-top-color:#9aa5b1; }
.card.status-missing { border-top-color:#7b5ea7; }
nav { background:#fff; border-bottom:1px solid var(--line); position:sticky; top:0; z-index:5; }
nav a { display:inline-block; padding:10px 12px; color:var(--accent); text-decoration:none;
  font-size:14px; }
nav a:hover { background:var(--bg); }
main { padding:8px 0 40px; }
section { background:#fff; border-radius:10px; margin:22px 0; padding:18px 24px 10px;
  box-shadow:0 1px 2px rgba(0,0,0,.06); border:1px solid var(--line); }
h2 { margin:0 0 4px; font-size:20px; font-weight:600; }
section > p.intro { margin:0 0 12px; color:var(--muted); }
.figures { display:flex; flex-wrap:wrap; column-gap:40px; }
figure.chart { margin:18px 0 22px; flex:0 1 auto; max-width:100%; min-width:0; }
figure.chart h3 { margin:0; font-size:16px; font-weight:600; }
figure.chart figcaption p { margin:2px 0 8px; color:var(--muted); font-size:13px; }
.vega-chart { overflow-x:auto; }
/* A chart's dropdowns (report.encodings) above it, side by side. */
.vega-chart.vega-embed { display:flex; flex-direction:column; }
.vega-chart .vega-bindings { order:-1; display:flex; flex-wrap:wrap; gap:4px 18px;
  margin:0 0 8px; font-size:13px; color:var(--muted); }
.vega-chart .vega-bindings select { font-size:13px; margin-left:4px; }
.vega-chart.chart-error { color:#d64545; font-family:monospace; }
.downloads { font-size:12px; color:var(--muted); }
.downloads a { color:var(--accent); }
table { border-collapse:collapse; width:100%; margin:8px 0 16px; font-size:13px; }
th { text-align:left; font-weight:600; color:var(--muted); border-bottom:2px solid var(--line);
  padding:6px 10px; white-space:nowrap; }
td { border-bottom:1px solid var(--line); padding:6px 10px; vertical-align:top; }
tbody tr:nth-child(even) { background:#fafbfc; }
table.numeric-tail td:nth-child(n+3), table.numeric-tail th:nth-child(n+3) { text-align:right; font-variant-numeric:tabular-nums; }
code { font-family:"SFMono-Regular", Menlo, Consolas, monospace; font-size:12px; }
.error { font-family:"SFMono-Regular", Menlo, Consolas, monospace; font-size:12px; color:#8a1c1c;
  word-break:break-word; }
.badge { display:inline-block; border-radius:10px; padding:0 8px; font-size:12px; color:#fff;
  background:#9aa5b1; }
.badge.status-oom { background:#e39b1b; } .badge.status-failed { background:#d64545; }
.badge.status-ok { background:#3b9c57; }
section > h3 { margin:22px 0 4px; font-size:16px; font-weight:600; }
.links, .note { margin:2px 0 8px; font-size:13px; color:var(--muted); }
.links a, table.profiles a { color:var(--accent); text-decoration:none; }
table.profiles .badge { margin:0 4px 2px 0; }
table.profile-top td code { word-break:break-all; }
details.numbers { margin:4px 0 10px; font-size:13px; }
details.numbers > summary { cursor:pointer; color:var(--accent); }
.table-host { max-height:480px; overflow:auto; margin-top:6px; }
table.numbers th { cursor:pointer; position:sticky; top:0; background:#fff; }
table.numbers th[aria-sort=ascending]::after { content:" ▲"; }
table.numbers th[aria-sort=descending]::after { content:" ▼"; }
table.numbers .num { text-align:right; font-variant-numeric:tabular-nums; }
footer { color:var(--muted); font-size:12px; padding:0 0 30px; }
"""

EMBED_SCRIPT = """
for (const [id, spec] of Object.entries(DLBENCH_SPECS)) {
  spec.datasets = {};
  for (const name of DLBENCH_USES[id] || []) spec.datasets[name] = dlbenchRows(name);
  vegaEmbed("#" + id, spec, {actions: false, renderer: "svg"}).catch((err) => {
    const box = document.getElementById(id);
    box.textContent = "This chart could not be drawn: " + err;
    box.classList.add("chart-error");
  });
}
"""

# Numbers tables: built from the page's data when first opened; a click on a heading
# sorts by that column (again: the other way), numbers by value, empty cells last.
TABLE_SCRIPT = """
function dlbenchFormat(value, format) {
  if (value === null || value === undefined) return "";
  if (typeof value !== "number" || !format) return String(value);
  const m = /^(,)?(?:\\.(\\d+))?([dfg%])$/.exec(format);
  if (!m) return String(value);
  const digits = m[3] === "d" ? 0 : Number(m[2] || 0);
  const options = m[3] === "g" ? {maximumSignificantDigits: digits || 6}
    : {minimumFractionDigits: digits, maximumFractionDigits: digits};
  const text = (m[3] === "%" ? value * 100 : value).toLocaleString("en-US", {
    useGrouping: Boolean(m[1]), ...options});
  return m[3] === "%" ? text + " %" : text;
}
function dlbenchCompare(a, b) {
  if (a === b) return 0;
  if (a === null || a === undefined) return 1;
  if (b === null || b === undefined) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), "en", {numeric: true});
}
function dlbenchTable(host, conf) {
  const rows = dlbenchRows(conf.data).filter((r) => conf.required === null ||
    (r[conf.required] !== null && r[conf.required] !== undefined));
  const table = document.createElement("table");
  table.className = "numbers";
  const head = table.createTHead().insertRow();
  const body = table.createTBody();
  const fill = () => {
    const frag = document.createDocumentFragment();
    for (const row of rows) {
      const tr = document.createElement("tr");
      for (const [field, , format] of conf.columns) {
        const td = document.createElement("td");
        td.textContent = dlbenchFormat(row[field], format);
        if (format) td.className = "num";
        tr.appendChild(td);
      }
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
  };
  conf.columns.forEach(([field, title, format]) => {
    const th = document.createElement("th");
    th.textContent = title;
    th.title = "sort by " + title;
    if (format) th.className = "num";
    th.addEventListener("click", () => {
      const down = th.getAttribute("aria-sort") === "ascending";
      for (const other of head.cells) other.removeAttribute("aria-sort");
      th.setAttribute("aria-sort", down ? "descending" : "ascending");
      rows.sort((a, b) => (down ? -1 : 1) * dlbenchCompare(a[field], b[field]));
      fill();
    });
    head.appendChild(th);
  });
  fill();
  host.replaceChildren(table);
}
for (const [id, conf] of Object.entries(DLBENCH_TABLES)) {
  const box = document.getElementById(id);
  const details = box.closest("details");
  const build = () => { if (!box.firstChild) dlbenchTable(box, conf); };
  if (details.open) build(); else details.addEventListener("toggle", build, {once: true});
}
"""
# The formats the page's script can write (style.Column.format).
TABLE_FORMAT = r"^(,)?(?:\.(\d+))?([dfg%])$"


@dataclass
class Section:
    """A titled part of the page: figures and trusted HTML blocks (tables built escaped)."""

    id: str
    title: str
    intro: str = ""
    blocks: list[Figure | NumbersTable | str] = field(default_factory=list)


def script_json(value: Any) -> str:
    """JSON that is safe inside an inline <script>: no '<', '>' or '&' left to end it."""
    text = json.dumps(value, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def chart_id(figure: Figure) -> str:
    return f"chart-{figure.name}"


def table_id(name: str) -> str:
    return f"table-{name}"


def numbers_html(name: str, rows: int, summary: str = "The numbers") -> str:
    """The place of a numbers table (built by the page's script when opened)."""
    return (f'<details class="numbers"><summary>{escape(summary)}: {nouns(rows, "row")} '
            f'(click a heading to sort)</summary>'
            f'<div class="table-host" id="{escape(table_id(name))}"></div></details>')


@dataclass
class PageTable:
    """A numbers table as the page holds it: its dataset, columns and row count."""

    data: str
    table: NumbersTable
    rows: int

    def config(self) -> dict[str, Any]:
        return {"data": self.data, "required": self.table.required,
                "columns": [[c.field, c.title, c.format] for c in self.table.columns]}


def figure_html(figure: Figure, tables: dict[str, PageTable] | None = None) -> str:
    name = escape(figure.name)
    numbers = (numbers_html(figure.name, tables[figure.name].rows)
               if tables and figure.name in tables else "")
    return (
        f'<figure class="chart" id="fig-{name}"><figcaption><h3>{escape(figure.title)}</h3>'
        f"<p>{escape(figure.caption)}</p></figcaption>"
        f'<div class="vega-chart" id="{escape(chart_id(figure))}"></div>'
        f'<noscript><img src="charts/{name}.svg" alt="{escape(figure.title)}"></noscript>'
        f'<div class="downloads">Image: <a href="charts/{name}.png">PNG</a> · '
        f'<a href="charts/{name}.svg">SVG</a></div>{numbers}</figure>'
    )


def section_html(section: Section, tables: dict[str, PageTable] | None = None) -> str:
    parts = [f'<section id="{escape(section.id)}"><h2>{escape(section.title)}</h2>']
    if section.intro:
        parts.append(f'<p class="intro">{escape(section.intro)}</p>')
    figures: list[str] = []  # consecutive figures share a row when they fit side by side
    for block in [*section.blocks, None]:
        if isinstance(block, Figure):
            figures.append(figure_html(block, tables))
            continue
        if figures:
            parts.append(f'<div class="figures">{"".join(figures)}</div>')
            figures = []
        if isinstance(block, NumbersTable):
            if tables and block.name in tables:
                parts.append(f"<h3>{escape(block.title)}</h3>"
                             + numbers_html(block.name, tables[block.name].rows, "The table"))
        elif block is not None:
            parts.append(block)
    parts.append("</section>")
    return "".join(parts)


def data_script(data: dict[str, Any], uses: dict[str, list[str]], specs: dict[str, Any],
                tables: dict[str, PageTable]) -> str:
    """The page's script: its data (datasets.pack), the charts and the numbers tables."""
    parts = [f"const DLBENCH_DATA = {script_json(data)};", UNPACK_SCRIPT]
    if specs:
        parts += [f"const DLBENCH_SPECS = {script_json(specs)};",
                  f"const DLBENCH_USES = {script_json(uses)};", EMBED_SCRIPT]
    if tables:
        configs = {table_id(name): t.config() for name, t in tables.items()}
        parts += [f"const DLBENCH_TABLES = {script_json(configs)};", TABLE_SCRIPT]
    return f"<script>{''.join(parts)}</script>"


def page_html(*, title: str, studies: list[str], meta: str, cards: str,
              sections: list[Section], specs: dict[str, dict[str, Any]], bundle: str,
              data: dict[str, Any] | None = None, uses: dict[str, list[str]] | None = None,
              tables: dict[str, PageTable] | None = None) -> str:
    chips = "".join(f'<span class="chip">{escape(s)}</span>' for s in studies)
    nav = "".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in sections)
    body = "".join(section_html(s, tables) for s in sections)
    script = (data_script(data or {}, uses or {}, specs, tables or {})
              if specs or tables else "")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"{GENERATOR}"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style>"
        f"{f'<script>{bundle}</script>' if bundle else ''}</head><body>"
        f'<header><div class="wrap"><h1>{escape(title)}</h1>'
        f'<p class="meta">{chips}<br>{escape(meta)}</p>{cards}</div></header>'
        f'<nav><div class="wrap">{nav}</div></nav>'
        f'<main><div class="wrap">{body}</div></main>'
        f'<footer><div class="wrap">{escape(meta)}</div></footer>'
        f"{script}</body></html>\n"
    )
