"""The report page: `report/index.html`, with Vega-Lite's JavaScript (from `vl-convert-python`) in
`vega-bundle.js` beside it, so the page opens from disk with no network (docs/outputs.md#reports). It
records how its panels rendered in <pre id="render-status"> (JSON), which the browser test reads.
"""

from __future__ import annotations

import html
import json
import math
import shutil
from pathlib import Path

from leaklab.report.section import Panel, Section, Table
from leaklab.rundir import cache_root, write_atomic

BUNDLE = "vega-bundle.js"

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1380px;
       padding: 16px 28px; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 4px; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
nav a { margin-right: 14px; } .intro { color: #444; max-width: 1000px; }
.notes { background: #fff8e1; border-left: 4px solid #f0b400; padding: 6px 12px; margin: 8px 0; }
.notes li { margin: 2px 0; } .items { display: flex; flex-wrap: wrap; gap: 18px 26px; }
.panel { border: 1px solid #e5e5e5; border-radius: 6px; padding: 8px 12px; }
.panel h3 { font-size: 1em; margin: 2px 0 6px; } .caption { font-size: 0.85em; color: #555; max-width: 560px; }
table.facts td:first-child { color: #555; padding-right: 16px; } table { border-collapse: collapse; }
table.data th, table.data td { border: 1px solid #ddd; padding: 3px 8px; font-size: 0.9em; text-align: left; }
table.data th { background: #f4f4f4; } footer { margin-top: 36px; font-size: 0.85em; color: #666; }
.vega-bind { margin: 4px 0; font-size: 0.9em; }
"""

SCRIPT = """
const status = {errors: [], warnings: [], panels: {}, done: false};
window.addEventListener('error', e => status.errors.push(String(e.message)));
window.addEventListener('unhandledrejection', e => status.errors.push(String(e.reason)));
const consoleError = console.error, consoleWarn = console.warn;
console.error = (...a) => { status.errors.push(a.map(String).join(' ')); consoleError(...a); };
console.warn = (...a) => { status.warnings.push(a.map(String).join(' ')); consoleWarn(...a); };
function report() { document.getElementById('render-status').textContent = JSON.stringify(status); }
async function draw() {
  const specs = JSON.parse(document.getElementById('specs').textContent);
  if (typeof vegaEmbed === 'undefined') {
    status.errors.push('the plotting library (BUNDLE) did not load');
  } else {
    for (const [id, spec] of Object.entries(specs)) {
      const el = document.getElementById(id);
      try {
        await vegaEmbed(el, spec, {renderer: 'svg', actions: false, tooltip: true});
        status.panels[id] = el.querySelectorAll(
          'g.mark-line > path, g.mark-symbol > path, g.mark-rect > path, g.mark-area > path').length;
      } catch (err) {
        status.errors.push(id + ': ' + err);
        el.textContent = 'this panel could not be drawn: ' + err;
      }
    }
  }
  status.done = true;
  report();
}
draw();
""".replace("BUNDLE", BUNDLE)


def write_bundle(report_dir: Path) -> None:
    """Put the plotting library beside the page (bundling takes a couple of seconds, so a copy per
    vl-convert version is kept in leaklab's cache)."""
    import vl_convert

    path = report_dir / BUNDLE
    stamp = f"/* vega bundle from vl-convert-python {vl_convert.__version__} */\n"
    if path.exists():
        with path.open() as f:
            if f.readline() == stamp:
                return
    cached = cache_root() / "report" / f"vega-bundle-{vl_convert.__version__}.js"
    try:
        if not cached.exists():
            write_atomic(cached, stamp + vl_convert.javascript_bundle())
        report_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cached, path)
    except OSError:  # an unwritable cache: bundle straight into the report
        write_atomic(path, stamp + vl_convert.javascript_bundle())


def _clean(obj):
    """NaN and infinities become null (JSON has neither); floats keep 6 significant digits (a third
    of the page's size, and no panel shows more than 3)."""
    if isinstance(obj, float):
        return float(f"{obj:.6g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _table_html(table: Table, facts: bool = False) -> str:
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in table.rows
    )
    head = "" if facts else "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in table.header) + "</tr>"
    cls = "facts" if facts else "data"
    out = f'<table class="{cls}">{head}{rows}</table>'
    if table.title:
        out = f"<h3>{html.escape(table.title)}</h3>" + out
    if table.caption:
        out += f'<div class="caption">{html.escape(table.caption)}</div>'
    return f'<div class="panel">{out}</div>' if not facts else out


def render_page(title: str, sections: list[Section], footer: str = "") -> str:
    specs: dict[str, dict] = {}
    body = [f"<h1>{html.escape(title)}</h1>"]
    nav = " ".join(f'<a href="#{html.escape(s.key)}">{html.escape(s.title)}</a>' for s in sections)
    body.append(f"<nav>{nav}</nav>")
    for section in sections:
        body.append(f'<section id="{html.escape(section.key)}"><h2>{html.escape(section.title)}</h2>')
        if section.intro:
            body.append(f'<p class="intro">{html.escape(section.intro)}</p>')
        if section.notes:
            notes = "".join(f"<li>{html.escape(n)}</li>" for n in section.notes)
            body.append(f'<div class="notes"><b>Missing or partial:</b><ul>{notes}</ul></div>')
        body.append('<div class="items">')
        for item in section.items:
            if isinstance(item, Panel):
                pid = f"panel-{len(specs)}"
                specs[pid] = item.spec
                body.append(
                    f'<div class="panel"><h3>{html.escape(item.title)}</h3><div id="{pid}" class="chart"></div>'
                    f'<div class="caption">{html.escape(item.caption)}</div></div>'
                )
            else:
                body.append(_table_html(item, facts=section.key == "run"))
        body.append("</div></section>")
    if footer:
        body.append(f"<footer>{footer}</footer>")
    # JSON inside <script>: "</" would end the element early.
    data = json.dumps(_clean(specs), separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<style>{CSS}</style><script src="{BUNDLE}"></script></head><body>\n'
        + "\n".join(body)
        + f'\n<pre id="render-status" hidden></pre>'
        f'<script type="application/json" id="specs">{data}</script><script>{SCRIPT}</script></body></html>\n'
    )


def write_page(report_dir: Path, title: str, sections: list[Section], footer: str = "") -> Path:
    write_bundle(report_dir)
    path = report_dir / "index.html"
    write_atomic(path, render_page(title, sections, footer))
    return path
