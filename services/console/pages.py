"""The console's HTML: Jinja2 templates (`templates/`, autoescaped), the stylesheet, the one
small script and the SVG charts, all server-rendered; no front-end build step.

Every page works from a plain link (filters live in the URL) and from the keyboard: a skip
link, native links, buttons and form fields in reading order, a visible focus ring. The script
only continues a running bulk action batch after batch (and stops when asked); without it a
"Next batch" button does the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import jinja2
import markupsafe

from services.jobs.plan import format_duration

STYLE = """
:root { font-family: system-ui, sans-serif; color: #1b1b1b; background: #fafafa; }
body { margin: 0; }
a { color: #0b57d0; }
a:focus, button:focus, input:focus, select:focus, summary:focus {
  outline: 3px solid #f29900; outline-offset: 2px; }
.skip { position: absolute; left: -9999px; }
.skip:focus { left: 1rem; top: 1rem; background: #fff; padding: .5rem; z-index: 2; }
header { background: #202124; color: #fff; padding: .5rem 1rem; display: flex;
  flex-wrap: wrap; gap: 1rem; align-items: center; }
header a { color: #fff; }
header nav ul { list-style: none; display: flex; gap: 1rem; margin: 0; padding: 0; }
.who { margin-left: auto; font-size: .9rem; }
.standin { background: #fce8b2; color: #3c2a00; padding: .5rem 1rem; font-weight: 600;
  border-bottom: 2px solid #f29900; }
main { padding: 1rem; max-width: 80rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: .25rem .5rem; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.over { background: #fad2cf; font-weight: 700; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(12rem, 1fr));
  gap: .5rem; padding: 0; list-style: none; }
.figures li { background: #fff; border: 1px solid #ddd; padding: .5rem; }
.figures b { display: block; font-size: 1.4rem; }
.error { background: #fad2cf; padding: .5rem 1rem; border-left: 4px solid #b3261e; }
.note { color: #444; font-size: .9rem; }
form.inline { display: inline; }
fieldset { border: 1px solid #ccc; margin: 0 0 1rem; }
label { display: inline-block; margin: .25rem .5rem .25rem 0; }
svg { background: #fff; border: 1px solid #ddd; }
"""

# Continue a bulk action batch after batch unless the operator pressed Stop (remembered for
# this operation in sessionStorage, so a batch already in flight does not restart it).
SCRIPT = """
(function () {
  var next = document.getElementById("next-batch");
  var stop = document.getElementById("stop-bulk");
  if (!next) { return; }
  var key = "stop-" + next.dataset.operation;
  if (stop) {
    stop.addEventListener("click", function () { sessionStorage.setItem(key, "1"); });
  }
  if (sessionStorage.getItem(key)) { return; }
  window.setTimeout(function () {
    if (!sessionStorage.getItem(key)) { next.requestSubmit(); }
  }, 100);
})();
"""

NAV = (
    ("/", "Overview"),
    ("/calendar", "Calendar"),
    ("/jobs", "Jobs"),
    ("/dead-letters", "Dead letters"),
    ("/control", "Control"),
)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("services.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
    )
    env.globals.update(when=when, age=age, rate=rate, nav=NAV)
    return env


def when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if value else "-"


def age(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def rate(per_s: float | None) -> str:
    return "-" if per_s is None else f"{per_s:,.2f}/s"


def line_chart(
    values: Sequence[float], *, width: int = 600, height: int = 120, reference: float | None = None
) -> Any:
    """A small SVG line of `values` (oldest first), with an optional dashed reference line."""
    if not values:
        return _markup('<p class="note">No data yet.</p>')
    top = max([*values, reference or 0.0, 1e-9]) * 1.1
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - v / top * height:.1f}" for i, v in enumerate(values)
    )
    parts = [
        f'<svg role="img" aria-label="chart, peak {max(values):,.1f}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">',
        f'<polyline fill="none" stroke="#0b57d0" stroke-width="2" points="{points}"/>',
    ]
    if reference is not None:
        y = height - reference / top * height
        parts.append(
            f'<line x1="0" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#b3261e" '
            'stroke-dasharray="6 4"/>'
        )
    parts.append("</svg>")
    return _markup("".join(parts))


def bar_chart(values: Sequence[int], over: Sequence[bool], *, height: int = 140) -> Any:
    """An SVG bar per window (red where a budget is exceeded)."""
    if not values or max(values) == 0:
        return _markup('<p class="note">No job falls due in this horizon.</p>')
    bar = max(1, min(12, 960 // len(values)))
    width = bar * len(values)
    top = max(values)
    bars = []
    for i, v in enumerate(values):
        h = v / top * height
        colour = "#b3261e" if over[i] else "#0b57d0"
        bars.append(
            f'<rect x="{i * bar}" y="{height - h:.1f}" width="{max(bar - 1, 1)}" '
            f'height="{h:.1f}" fill="{colour}"/>'
        )
    return _markup(
        f'<svg role="img" aria-label="jobs due per window, peak {top:,}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">{"".join(bars)}</svg>'
    )


def _markup(html: str) -> markupsafe.Markup:
    # Built here from numbers and fixed text only: nothing a user typed reaches it.
    return markupsafe.Markup(html)
