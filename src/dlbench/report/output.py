"""Putting a report in place so that a failure at any point leaves the previous one whole.

The new page and every chart are first written beside the old ones: the page to a
temporary file, the charts to a temporary folder, both in the report's folder. Only when
everything is written are they swapped in, the charts folder as a whole and then the page
(``dlbench.atomic``). A failure to write (a full disk) removes the temporaries, keeps the
previous report and raises ``WriteError`` naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench import atomic
from dlbench.atomic import WriteError, writing
from dlbench.report import export
from dlbench.report.data import ReportError
from dlbench.report.page import GENERATOR

__all__ = ["CHARTS_DIR", "INDEX", "WriteError", "check_replaceable", "publish",
           "write_file"]

INDEX = "index.html"
CHARTS_DIR = "charts"
KEPT = "the previous report is left as it was"
# What pages of releases before the tag always held (dlbench.report.page).
EARLIER_PAGE = ('<header><div class="wrap"><h1>', '<footer><div class="wrap">')
CHART_SUFFIXES = (".png", ".svg")
# What Snakemake itself puts in a directory() output: the workflow's charts/ holds it.
SNAKEMAKE_MARKER = ".snakemake_timestamp"


def _is_report_page(page: Path) -> bool:
    """Whether ``page`` is a report's: the generator tag near its start, or what every
    earlier report's page held (the header after a bundle of megabytes: read whole)."""
    try:
        text = page.read_bytes().decode("utf-8", "replace")
    except OSError:
        return False
    return GENERATOR in text[:4096] or all(mark in text for mark in EARLIER_PAGE)


def check_replaceable(outdir: str | Path) -> None:
    """Refuse, in one line, a folder whose index.html or charts/ a report did not write:
    a report replaces both whole, so a user's own page or files there would be lost."""
    outdir = Path(outdir)
    index, charts_dir = outdir / INDEX, outdir / CHARTS_DIR
    if index.is_symlink() or index.is_dir() or (index.exists() and not _is_report_page(index)):
        raise ReportError(f"{index}: not a page of a dlbench report, and a report would "
                          "replace it; give another --outdir")
    if charts_dir.is_symlink() or (charts_dir.exists() and not charts_dir.is_dir()):
        raise ReportError(f"{charts_dir}: not a folder of a dlbench report's charts, and a "
                          "report would replace it; give another --outdir")
    if charts_dir.is_dir():
        foreign = sorted(p.name for p in charts_dir.iterdir()
                         if p.name != SNAKEMAKE_MARKER and (
                             p.is_symlink() or not p.is_file()
                             or p.suffix not in CHART_SUFFIXES))
        if foreign:
            raise ReportError(f"{charts_dir}: holds {foreign[0]!r}"
                              f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}"
                              ", not a chart of a dlbench report, and a report replaces the "
                              "folder whole; give another --outdir")


def write_file(path: Path, data: bytes) -> None:
    """Write one file of the new report (into a temporary place: see the module)."""
    path.write_bytes(data)


def publish(outdir: str | Path, html: str, charts: dict[str, dict[str, Any]]) -> list[Path]:
    """Put ``html`` at ``outdir``/index.html and each chart (name -> Vega-Lite spec) at
    ``outdir``/charts/<name>.png and .svg, replacing the previous report whole; charts of
    the previous report that this one lacks go with it. Return the files, page first."""
    outdir = Path(outdir)
    index, charts_dir = outdir / INDEX, outdir / CHARTS_DIR
    images: list[Path] = []
    # Contexts exit last first: the charts folder is swapped in, then the page.
    with (writing(index, KEPT), atomic.temp_path(index) as new_index,
          writing(charts_dir, KEPT), atomic.prepared_dir(charts_dir) as new_charts):
        for name, spec in charts.items():
            for suffix, data in export.images(spec).items():
                image = charts_dir / f"{name}.{suffix}"
                with writing(image, KEPT):
                    write_file(new_charts / image.name, data)
                images.append(image)
        # Still inside: a page that cannot be written keeps the old charts too.
        with writing(index, KEPT):
            write_file(new_index, html.encode("utf-8"))
    return [index, *images]
