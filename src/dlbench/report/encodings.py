"""Where each axis of a study goes in a chart, chosen from the axes that actually vary.

A chart has fixed roles (for throughput: batch size on x, precision as colour, one panel
per model and phase). Every other axis that takes more than one value among the chart's
rows must be shown too, or a line would join points that differ in it: two num_batches at
one batch size drawn as one line zig-zag. ``choose`` gives each varying axis a place:

- a line style (``series``), while the lines in a panel stay few enough to tell apart;
- more panels (``panels``), for charts without line styles (bars), while they stay few;
- otherwise a dropdown above the chart (``filters``) that shows one value at a time.

An axis that does not vary takes no place at all, so a small study's charts look as they
always did. The dropdowns are Vega-Lite parameters bound to a select input: they work in
the offline page, and the images beside it show each dropdown's first value (the caption
says which).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import altair as alt
import pandas as pd

from dlbench import axes
from dlbench.comms.pt2pt import TESTS as PT2PT_TESTS
from dlbench.comms.sizes import COLLECTIVES, measured_label
from dlbench.efficiency import device_per_process
from dlbench.report.data import PHASE_ORDER, PRECISION_ORDER, as_text, joined, ordered, varying
from dlbench.report.style import COUNTED, counted, nouns

# Model-cell axes besides model/phase/precision/batch that tell two cells apart, in the
# order they take a line style: the derived ``mode`` stands for compile and memory_format.
SERIES_FIRST = ("system", "framework", "mode", "device", "num_gpus", "data")
DERIVED = {"compile": "mode", "memory_format": "mode"}
# Axes that are a chart's own roles or named inside another column (model_opts: the model
# label), never placed here.
ROLES = ("model", "phase", "precision", "batch_size", "model_opts")
MAX_SERIES = 4  # line styles told apart at a glance
MAX_LINES = 12  # colours x line styles in one panel
MAX_PANELS = 12
TITLES = {"num_gpus": "GPUs", "num_batches": "measured iterations",
          "num_warmup_batches": "warm-up iterations", "mode": "execution mode",
          "num_loader_threads": "loader threads", "batch_size": "batch size",
          "fixed_batch": "batch held fixed", "num_nodes": "nodes"}


def model_axes() -> list[str]:
    """Every axis a model cell can differ in, besides the chart roles: SERIES_FIRST, then
    the rest of the axis table's model columns (so a new axis is covered without an edit)."""
    rest = [DERIVED.get(name, name) for name, _ in axes.columns()
            if name in {a.name for a in axes.of_kind("model")}]
    return list(dict.fromkeys(
        [*SERIES_FIRST, *(a for a in rest if a not in ROLES and a not in SERIES_FIRST)]))


# How a value of a numeric axis reads in a legend or a panel title ("pytorch · 2 GPUs"):
# a count of what it counts (singular, plural), or a text to put it in.
VALUE_NOUNS = {"num_gpus": COUNTED[True], "num_batches": ("iteration", "iterations"),
               "num_loader_threads": ("loader thread", "loader threads")}
VALUE_LABELS = {"num_warmup_batches": "{} warm-up"}
# Text values that say nothing without their axis ("0,1" of src_ranks): with its name.
TEXT_LABELS = {"src_ranks": "src {}", "dst_ranks": "dst {}", "mm_shape": "shape {}",
               "in_split": "in split {}", "out_split": "out split {}",
               "message_sizes": "sizes {}"}


def title(axis: str) -> str:
    return TITLES.get(axis, axis.replace("_", " "))


# A legend title longer than this many characters goes on several lines (one per axis):
# on one line it would widen the chart past the page or end in an ellipsis.
LEGEND_TITLE_CHARS = 32


def series_title(series: Iterable[str], titles: Mapping[str, str] | None = None
                 ) -> str | list[str]:
    """The legend title of a line style standing for ``series`` ("framework · GPUs"), with
    ``titles`` for axes whose title depends on the rows; a long one as lines, each but the
    last ending in the separator."""
    names = [(titles or {}).get(a) or title(a) for a in series]
    text = " · ".join(names)
    if len(text) <= LEGEND_TITLE_CHARS or len(names) < 2:
        return text
    return [f"{name} ·" for name in names[:-1]] + [names[-1]]


def value_label(axis: str, value: object,
                counts: Mapping[str, tuple[str, str]] | None = None) -> str:
    """One value of ``axis`` in words: numbers with what they count (``counts`` over
    VALUE_NOUNS: a kind's own nouns, such as generations), booleans with their axis
    ("cudnn benchmark off"), text as it is (with its axis where the text alone says
    nothing: "src 0,1"); empty for null."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if pd.api.types.is_bool(value):
        return f"{title(axis)} {'on' if value else 'off'}"
    if pd.api.types.is_number(value):
        number = int(value) if float(value).is_integer() else value
        counted_as = {**VALUE_NOUNS, **(counts or {})}
        if axis in counted_as and isinstance(number, int):
            return nouns(number, *counted_as[axis])
        return VALUE_LABELS.get(axis, f"{title(axis)} {{}}").format(number)
    return TEXT_LABELS.get(axis, "{}").format(value)


NONE = "(none)"


def axis_titles(frame: pd.DataFrame) -> dict[str, str]:
    """Titles of axes that depend on the rows: num_gpus counts GPUs, processes sharing a
    CPU, or both (``style.counted``)."""
    if "num_gpus" not in frame or "device" not in frame:
        return {}
    return {"num_gpus": counted(frame.loc[frame["num_gpus"].notna(), "device"])[1]}


def _processes(frame: pd.DataFrame) -> pd.Series:
    """Rows whose num_gpus counts processes sharing one CPU, not GPUs
    (``efficiency.device_per_process``)."""
    return frame["num_gpus"].notna() & ~frame["device"].map(
        lambda d: device_per_process({"device": d})).astype(bool)


def _process_words(frame: pd.DataFrame) -> pd.Series:
    """num_gpus in words as processes ("2 processes")."""
    return frame["num_gpus"].map(
        lambda n: "" if pd.isna(n) else nouns(int(n), *COUNTED[False])).astype(object)


def labels(frame: pd.DataFrame, columns: Iterable[str],
           counts: Mapping[str, tuple[str, str]] | None = None) -> pd.Series:
    """Each row's values of ``columns`` in words, joined ("pytorch · 5 iterations"; what a
    number counts as ``value_label`` says, ``counts`` included); each distinct value is
    put in words once."""
    columns = list(columns)
    if not columns:
        return pd.Series("", index=frame.index, dtype=object)
    words = pd.DataFrame({c: frame[c].map({v: value_label(c, v, counts) for v in
                                           pd.unique(frame[c].dropna())})
                          .astype(object).fillna("")
                          for c in columns}, index=frame.index)
    if "num_gpus" in columns and "device" in frame:
        words["num_gpus"] = words["num_gpus"].mask(_processes(frame), _process_words(frame))
    text = joined(words, skip_empty=True)
    # Rows without any of the axes (a point-to-point cell has no blocking mode) beside rows
    # with them: "(none)", not a legend entry or panel title without words.
    empty = text == ""
    return text.mask(empty, NONE) if empty.any() and not empty.all() else text


# Collectives as dlbench.comms lists them, then a point-to-point cell's tests in the order
# they run (the collectives chart's panels: "pt2pt latency", ...).
COLLECTIVE_ORDER = (*(c for c in COLLECTIVES if c != "pt2pt"),
                    *(measured_label("pt2pt", test) for test in PT2PT_TESTS))
PREFERRED = {"precision": PRECISION_ORDER, "phase": PHASE_ORDER,
             "collective": COLLECTIVE_ORDER}


def values(frame: pd.DataFrame, axis: str) -> list:
    """Distinct values of ``axis`` in display order (data.ordered: precisions and phases in
    their preferred order, numbers by size, the rest alphabetically; nulls left out)."""
    return ordered(frame[axis], PREFERRED.get(axis, ()))


def count(frame: pd.DataFrame, columns: Iterable[str]) -> int:
    """How many distinct combinations of ``columns`` the rows hold (1 for none)."""
    columns = list(columns)
    if not columns or frame.empty:
        return 1
    return len(as_text(frame[columns]).drop_duplicates())


@dataclass(frozen=True)
class Encoding:
    """A chart's places for the axes: ``panels`` name a panel each, ``series`` are told
    apart by line style (the ``variant`` column), ``filters`` by a dropdown each."""

    panels: list[str]
    series: list[str] = field(default_factory=list)
    filters: list[str] = field(default_factory=list)
    # First value shown by each filter (what the images show).
    defaults: dict[str, object] = field(default_factory=dict)
    # Axis titles that depend on the rows (``axis_titles``: num_gpus counts processes on a
    # CPU); the rest are ``title``'s.
    titles: dict[str, str] = field(default_factory=dict, compare=False)

    def title(self, axis: str) -> str:
        return self.titles.get(axis) or title(axis)

    def series_title(self) -> str | list[str]:
        """The legend title of the line style standing for this encoding's series."""
        return series_title(self.series, self.titles)

    def params(self, frame: pd.DataFrame) -> list[alt.Parameter]:
        """A dropdown per filter axis, its first value shown first."""
        out = []
        for axis in self.filters:
            options = [_json_value(v) for v in values(frame, axis)]
            out.append(alt.param(name=param_name(axis), value=self.defaults[axis],
                                 bind=alt.binding_select(options=options,
                                                         name=f"{self.title(axis)}: ")))
        return out

    def filter_expression(self) -> str | None:
        """The Vega expression keeping the rows each dropdown shows; None without filters."""
        if not self.filters:
            return None
        return " && ".join(f"datum[{_js_string(a)}] == {param_name(a)}" for a in self.filters)

    def placed(self, leave_out: Iterable[str] = (), *, panels: bool = False) -> list[str]:
        """The axes this encoding placed (the panels' too with ``panels``), dropdowns before
        line styles, but those in ``leave_out`` (the ones a table or tooltip names anyway)."""
        chosen = [*(self.panels if panels else ()), *self.filters, *self.series]
        return [a for a in chosen if a not in set(leave_out)]

    def note(self) -> str:
        """What a caption says of the dropdowns (empty without any)."""
        if not self.filters:
            return ""
        firsts = ", ".join(f"{self.title(a)} {self.defaults[a]}" for a in self.filters)
        chosen = ", ".join(self.title(a) for a in self.filters)
        return f" Choose {chosen} above the chart; the images show {firsts}."


def param_name(axis: str) -> str:
    return "pick_" + "".join(c if c.isalnum() else "_" for c in axis)


def _js_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _json_value(value: object) -> object:
    """A value as JSON gives it to the page (numpy integers as int)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def choose(frame: pd.DataFrame, *, panels: Iterable[str] = ("model", "phase"),
           colour: str | None = "precision", candidates: Iterable[str] | None = None,
           lines: bool = True, max_panels: int = MAX_PANELS,
           titles: Mapping[str, str] | None = None) -> Encoding:
    """Places for the axes of ``frame``'s rows. ``panels``: the chart's panel columns
    (the first is moved to a dropdown while there would be more than ``max_panels``);
    ``colour``: the column coloured; ``candidates``: the other axes the rows may differ in
    (default: every model-cell axis); ``lines``: the chart draws lines, so an axis may take
    a line style; bar charts take more panels instead; ``titles``: a kind's own axis titles
    over TITLES ("measured generations")."""
    panels = [p for p in panels if p in frame]
    candidates = model_axes() if candidates is None else list(candidates)
    filters: list[str] = []
    while len(panels) > 1 and count(frame, panels) > max_panels:
        # The panel axis with most values becomes a dropdown (10 models x 2 phases: a
        # dropdown of models over a training and an inference panel).
        widest = max(panels, key=lambda p: frame[p].nunique())
        panels.remove(widest)
        filters.append(widest)
    colours = frame[colour].nunique() if colour in frame else 1
    series: list[str] = []
    for axis in varying(frame, [c for c in candidates if c not in panels and c != colour]):
        if lines:
            combos = count(frame, [*series, axis])
            if combos <= MAX_SERIES and combos * colours <= MAX_LINES:
                series.append(axis)
                continue
        elif count(frame, [*panels, axis]) <= max_panels:
            panels.append(axis)
            continue
        filters.append(axis)
    defaults = {a: _json_value(values(frame, a)[0]) for a in filters}
    return Encoding(panels=panels, series=series, filters=filters, defaults=defaults,
                    titles={**(titles or {}), **axis_titles(frame)})
