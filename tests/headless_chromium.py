"""Pages drawn by Debian's headless Chromium: what the tests of the report and of
``dlbench compare`` run to see that every chart of a page really draws."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs headless Chromium at /usr/bin/chromium (apt-get install chromium)")


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
               *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def chart_names(html: str) -> list[str]:
    return re.findall(r'<div class="vega-chart" id="chart-([^"]+)"', html)


# A container of a chart's data marks (bars, lines, points, rules) holding at least one:
# a chart given no rows still draws its axes and an empty container.
_DATA_MARK = re.compile(r'<g class="mark-(?!group)[a-z]+ role-mark[^"]*"[^>]*><(?!/g>)')


def drawn_charts(page: Path, profile: Path) -> tuple[list[str], list[str]]:
    """The page's charts, and those of them that drew data marks (none an error) once its
    scripts ran."""
    names = chart_names(page.read_text())
    done = chromium("--dump-dom", page.as_uri(), profile=profile)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    drawn = []
    for name in names:
        start = dom.index(f'id="chart-{name}"')
        container = dom[dom.rindex("<div", 0, start):dom.index("</figure>", start)]
        assert "chart-error" not in container, container[:300]
        if re.search(r'<svg[^>]*class="marks"', container) and _DATA_MARK.search(container):
            drawn.append(name)
    return names, drawn
