"""Where a study's time went: its cells' wall time by stage (dlbench.stages), summed.

A study of short cells spends most of its time outside the measured iterations (starting
Python and the framework, building models, warming up, checking accuracy); this chart says
how much, per study and system, so that a team can shorten a study (fewer warm-up
iterations, fewer processes) or see why one system's run took longer than another's.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from dlbench import stages
from dlbench.report.data import joined, numeric, varying
from dlbench.report.style import Column, Figure, NumbersTable, colour_scale, nouns, styled

COLUMNS = [f"wall_{name}_s" for name in stages.NAMES]
# The wall time of a run that recorded no stages: a row the launcher wrote for a runner
# that left none (timed out, killed, not started), or a result older than stages_s. Left
# out, a study of timed-out cells would read as quick, one of failed cells not at all.
UNSTAGED = "unstaged"
LABELS = {"startup": "start-up", "environment": "environment", "build": "build",
          "flop_count": "FLOP count", "compile": "compile", "warmup": "warm-up",
          "measure": "measured", "accuracy": "accuracy check", "other": "other",
          UNSTAGED: "not broken down"}
# The measured iterations stand out; the stages around them in greys and light hues, the
# time no stage says anything of in a dark grey.
COLOURS = {"start-up": "#9aa5b1", "environment": "#c1c7cd", "build": "#72b7b2",
           "FLOP count": "#b279a2", "compile": "#eeca3b", "warm-up": "#f58518",
           "measured": "#3b9c57", "accuracy check": "#ff9da6", "other": "#d8dde3",
           "not broken down": "#52606d"}


def stage_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (system, study, stage): seconds summed over the study's runs (each
    result file once, whatever its rows), the cells and their runs counted (a cell of
    ``repeats: 3`` is one cell of three runs) and the stage's share; a run without stages
    its wall time as a stage of its own (UNSTAGED), its cells counted in ``unstaged``."""
    if frame.empty or not set(COLUMNS) <= set(frame.columns):
        return pd.DataFrame()
    runs = frame.drop_duplicates("source")
    runs = runs.assign(**{c: pd.to_numeric(runs[c], errors="coerce") for c in COLUMNS})
    bare = runs[COLUMNS].isna().all(axis=1)
    unstaged = f"wall_{UNSTAGED}_s"
    columns = [*COLUMNS, unstaged]
    runs = runs.assign(**{unstaged: numeric(runs, "wall_time_s").where(bare)})
    runs = runs[runs[columns].notna().any(axis=1)]
    if runs.empty:
        return pd.DataFrame()
    runs = runs.assign(study=runs["study"].fillna(""), system=runs["system"].fillna(""))
    groups = runs.groupby(["system", "study"], sort=False)
    totals = groups[columns].sum(min_count=1).reset_index()
    totals["cells"] = groups["cell"].nunique().to_numpy()
    totals["runs"] = groups.size().to_numpy()
    totals["unstaged"] = (runs["cell"].where(runs[unstaged].notna())
                          .groupby([runs["system"], runs["study"]], sort=False).nunique()
                          .to_numpy())
    long = totals.melt(id_vars=["system", "study", "cells", "runs", "unstaged"],
                       value_vars=columns, var_name="stage",
                       value_name="seconds").dropna(subset=["seconds"])
    long["stage"] = long["stage"].str.removeprefix("wall_").str.removesuffix("_s").map(LABELS)
    long["share"] = long["seconds"] / long.groupby(["system", "study"])["seconds"].transform("sum")
    label_columns = ["system", "study"] if len(varying(long, ["system"])) else ["study"]
    # Each bar says its cells and the share they spent measuring.
    measured = (long["share"].where(long["stage"] == LABELS["measure"], 0.0)
                .groupby([long["system"], long["study"]]).transform("sum"))
    counted = pd.Series([_counted(c, r) for c, r in zip(long["cells"], long["runs"],
                                                         strict=True)], index=long.index)
    long["label"] = (joined(long[label_columns]) + " · " + counted + ", "
                     + (measured * 100).round().astype(int).astype(str) + "% measured")
    long["stage_order"] = long["stage"].map({label: i for i, label in enumerate(LABELS.values())})
    return long.sort_values(["label", "stage_order"]).reset_index(drop=True)


def _counted(cells: int, runs: int) -> str:
    """'2 cells', or where cells ran more than once (repeats) '2 cells in 6 runs'."""
    return nouns(cells, "cell") + (f" in {runs} runs" if runs != cells else "")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def summary_line(long: pd.DataFrame) -> str:
    """The whole run in words: its time, the measured share, the largest other stage."""
    by_stage = long.groupby("stage")["seconds"].sum()
    total = float(by_stage.sum())
    measured = float(by_stage.get(LABELS["measure"], 0.0))
    counts = long.drop_duplicates(["system", "study"])[["cells", "runs"]].sum()
    counted = _counted(int(counts["cells"]), int(counts["runs"]))
    line = (f"The cells' own time: {_minutes(total)} in {counted}, of which the "
            f"measured iterations took {_minutes(measured)} ({measured / total:.0%}).")
    # The time without stages is said apart, below.
    others = by_stage.drop([LABELS["measure"], LABELS[UNSTAGED]], errors="ignore")
    if not others.empty and total > 0:
        most = str(others.idxmax())
        line += f" The largest other part: {most}, {_minutes(float(others.max()))}."
    unstaged = float(by_stage.get(LABELS[UNSTAGED], 0.0))
    if unstaged > 0:
        bare = int(long.drop_duplicates(["system", "study"])["unstaged"].sum())
        line += (f" {_minutes(unstaged)} of it is the wall time of "
                 f"{nouns(bare, 'cell')} that recorded no stages ({LABELS[UNSTAGED]}): "
                 "a runner that timed out, was killed or did not start (the launcher's time "
                 "to its row, for a timed-out or killed cell a lower bound of its cost), or "
                 "a result older than stage times.")
    return line


def time_figure(frame: pd.DataFrame) -> Figure | None:
    long = stage_frame(frame)
    if long.empty or long["seconds"].sum() <= 0:
        return None
    stages_present = [label for label in LABELS.values() if label in set(long["stage"])]
    # Where some run recorded no stages, how many cells of each bar did not.
    unstaged = ([alt.Tooltip("unstaged:Q", title="cells without stages")]
                if long["unstaged"].gt(0).any() else [])
    chart = alt.Chart(long).mark_bar().encode(
        x=alt.X("seconds:Q", title="seconds, summed over the study's cells", stack="zero"),
        y=alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=400)),
        color=alt.Color("stage:N", title="stage",
                        scale=colour_scale(stages_present, COLOURS),
                        sort=stages_present),
        order=alt.Order("stage_order:Q"),
        tooltip=[alt.Tooltip("label:N", title="study"), alt.Tooltip("stage:N"),
                 alt.Tooltip("seconds:Q", format=",.1f"), alt.Tooltip("share:Q", format=".0%"),
                 alt.Tooltip("cells:Q"), alt.Tooltip("runs:Q"), *unstaged],
    ).properties(width=560, height=alt.Step(22))
    caption = (summary_line(long) + " Start-up is the runner's process starting (Python, "
               "the framework's import) before its cell's record; other is what no stage "
               "covers (process groups, data set-up, writing). A PyTorch cell's first FLOP "
               "count or optimizer imports torch._dynamo (over a second on a CPU), charged to "
               "that stage. Each stage is in each result's stages_s and the table's "
               "wall_<stage>_s columns.")
    return Figure("wall-time", "Where the time went", caption, styled(chart),
                  table=NumbersTable([Column("label", "study"), Column("stage", "stage"),
                                      Column("seconds", "seconds", ",.1f"),
                                      Column("share", "share", ".0%"),
                                      Column("cells", "cells", "d"),
                                      Column("runs", "runs", "d"),
                                      *([Column("unstaged", "cells without stages", "d")]
                                        if unstaged else [])], required="seconds"))
