"""Vega-Lite through vl-convert: the offline JavaScript bundle and each chart as PNG and SVG.

No step fetches anything: the bundle holds Vega, Vega-Lite and vega-embed, the data is
inline in every spec, and conversions are denied any base URL.
"""

from __future__ import annotations

import functools
from typing import Any

import altair as alt
import vl_convert

PNG_SCALE = 2.0  # sharp on high-density screens and in slides


def vegalite_version() -> str | None:
    """The Vega-Lite version Altair writes specs for, if vl-convert carries it."""
    major_minor = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return major_minor if major_minor in vl_convert.get_vegalite_versions() else None


@functools.cache  # the same for every report of this process; building it takes seconds
def javascript_bundle() -> str:
    """vega-embed, Vega-Lite and Vega as one script that defines ``window.vegaEmbed``."""
    bundle = vl_convert.javascript_bundle(vl_version=vegalite_version())
    # Inside an inline <script>, '</script' would end the element early.
    return bundle.replace("</script", "<\\/script")


def images(spec: dict[str, Any]) -> dict[str, bytes]:
    """The chart as image files' contents by extension: ``png`` and ``svg``."""
    svg = vl_convert.vegalite_to_svg(spec, vl_version=vegalite_version(), allowed_base_urls=[])
    # The PNG is the SVG rasterised (what vegalite_to_png does inside, without drawing the
    # chart a second time).
    png = vl_convert.svg_to_png(svg, scale=PNG_SCALE)
    return {"png": png, "svg": svg.encode("utf-8")}
