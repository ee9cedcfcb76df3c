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

__all__ = ["CHARTS_DIR", "INDEX", "WriteError", "publish", "write_file"]

INDEX = "index.html"
CHARTS_DIR = "charts"
KEPT = "the previous report is left as it was"


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
