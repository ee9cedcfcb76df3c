"""HTML tables of the report: cells by status, cells that did not finish, environments.

Every value from the data goes through ``html.escape``.
"""

from __future__ import annotations

import json
from collections import Counter
from html import escape
from types import SimpleNamespace
from typing import Any

import pandas as pd

from dlbench import gpu_clocks, host_contention
from dlbench.profiling.summary import of_row
from dlbench.report import encodings
from dlbench.report.data import (
    STATUS_ORDER,
    cell_rows,
    cells,
    has_ok_run,
    measurement_names,
    names_runs,
    numeric,
    ordered,
    run_counts,
    time_title,
    varying,
)
from dlbench.report.model_charts import PARADNN_PREFIX
from dlbench.report.style import nouns


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    return escape(str(value))


class Markup(str):
    """A string that is already HTML (built here from escaped parts)."""


def table(headers: list[str], rows: list[list[Any]], *, css: str = "") -> str:
    """An HTML table; cells are escaped, except those given as ``Markup`` (already HTML)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if isinstance(c, Markup) else _text(c)}</td>" for c in row) + "</tr>"
        for row in rows)
    return f'<table class="{escape(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def status_badge(status: str) -> Markup:
    return Markup(f'<span class="badge status-{escape(status)}">{escape(status)}</span>')


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    counts = cells(frame)["status"].value_counts()
    return {s: int(counts[s]) for s in ordered(list(counts.index), STATUS_ORDER)}


def status_cards(frame: pd.DataFrame, missing: int = 0) -> str:
    """The header's counts: cells in the table by status, and ``missing``: cells the run
    that wrote the report planned but got no result for (dlbench.incomplete_run)."""
    counts = status_counts(frame)
    if missing:
        counts["missing"] = missing
    total = sum(counts.values())
    cards = [f'<div class="card"><div class="num">{total}</div><div class="lbl">cells</div></div>']
    cards += [f'<div class="card status-{escape(s)}"><div class="num">{n}</div>'
              f'<div class="lbl">{escape(s)}</div></div>' for s, n in counts.items()]
    return f'<div class="cards">{"".join(cards)}</div>'


def study_table(frame: pd.DataFrame) -> str:
    """Cells of each study by kind and status."""
    per_cell = cells(frame)
    statuses = ordered(per_cell["status"], STATUS_ORDER)
    rows = []
    for study in ordered(per_cell["study"]):
        group = per_cell[per_cell["study"] == study]
        counts = group["status"].value_counts()
        kinds = ", ".join(f"{n} {k}" for k, n in group["kind"].value_counts().sort_index().items())
        rows.append([study, kinds, len(group), *[int(counts.get(s, 0)) or "" for s in statuses]])
    return table(["study", "kinds", "cells", *statuses], rows, css="numeric-tail")


def _failed_input(row: Any) -> str:
    """An operator input's name (op and input id) for a failed row of an op cell."""
    op, name = getattr(row, "op_name", None), getattr(row, "name", None)
    parts = [str(v) for v in (op, name) if isinstance(v, str) and v]
    return " ".join(dict.fromkeys(parts))


def failed_runs_of_ok_cells(frame: pd.DataFrame) -> pd.Series:
    """Whether each row is of a run that failed whole (no row of its result file is ok) in
    a cell whose other runs are ok: the cell counts as ok (data.cells), the run did not
    finish. An operator cell's failed inputs beside its ok ones are rows of an ok run."""
    run_ok = frame["status"].eq("ok").groupby(frame["source"], dropna=False).transform("any")
    return has_ok_run(frame) & ~run_ok


def _run_labels(frame: pd.DataFrame, failed_run: pd.Series) -> pd.Series:
    """Which run each row is, for the failures table: "run 2 of 3; the cell is ok" for a
    failed run of an ok cell, "all 3 runs" for a cell none of whose runs is ok, else empty.
    A cell's runs: its result files in the table, or its highest repeat's count if more
    (a run left without a result)."""
    repeat = numeric(frame, "repeat")
    runs = run_counts(frame)
    total = runs.astype(int).astype(str)
    number = (repeat + 1).astype("Int64").astype(str)
    which = ("run " + number + " of " + total).where(repeat.notna(),
                                                      "one of " + total + " runs")
    every = ("all " + total + " runs").where((runs > 1) & ~has_ok_run(frame), "")
    return (which + "; the cell is ok").where(failed_run, every)


# How many cells a note on the charts names (the failures list names every one).
UNFINISHED_NAMED = 6
STATUS_WORDS = {"oom": "out of memory", "failed": "failed", "skipped": "skipped"}


def unfinished_note(frame: pd.DataFrame) -> str | None:
    """Model cells that did not finish (out of memory, failed, skipped), which the charts
    against batch size leave out: counted by status, the first named, with a link to the
    list of them all; None without any. A reader looking for how large a batch fits
    would otherwise take a missing point for one not measured."""
    per_cell = cells(frame)
    if per_cell.empty or "model" not in per_cell or "batch_size" not in per_cell:
        return None
    rows = per_cell[per_cell["kind"].eq("model") & per_cell["status"].ne("ok")
                    & per_cell["batch_size"].notna()
                    & ~per_cell["model"].fillna("").astype(str).str.startswith(PARADNN_PREFIX)]
    if rows.empty:
        return None
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    rows = rows.sort_values(["status", "model", "phase", "precision", "batch_size"],
                            key=lambda c: c.map(rank) if c.name == "status" else c,
                            kind="stable")
    systems = frame["system"].nunique() > 1 if "system" in frame else False
    counts = rows["status"].value_counts()
    by_status = ", ".join(f"{nouns(int(counts[s]), 'cell')} {STATUS_WORDS.get(s, s)}"
                          for s in ordered(list(counts.index), STATUS_ORDER))
    if len(counts) > 1:
        by_status = f"{nouns(len(rows), 'cell')} that did not finish ({by_status})"
    named = [" · ".join(v for v in (
        r.model, r.phase, r.precision, f"batch {int(r.batch_size)}",
        *([r.system] if systems else [])) if isinstance(v, str) and v)
        + (f", {STATUS_WORDS.get(r.status, r.status)}" if len(counts) > 1 else "")
        for r in rows.head(UNFINISHED_NAMED).itertuples()]
    more = len(rows) - len(named)
    text = (f"Not drawn in the charts against batch size: {by_status}: "
            + "; ".join(named) + (f"; and {more} more" if more else "") + ". ")
    return (f'<p class="note unfinished">{escape(text)}Why each stopped: '
            '<a href="#failures">Cells that did not finish</a>.</p>')


# How many cells of each reason uncounted_note names.
UNCOUNTED_NAMED = 3


def uncounted_note(models: pd.DataFrame) -> str | None:
    """The model cells the TFLOP/s chart leaves out because their FLOPs were not counted
    (an MXNet cell, a kernel the counter has no formula for), by reason, the first few
    named; None where every cell has its TFLOP/s, or where none has and none says why (a
    table without FLOPs at all has no TFLOP/s section). A reader comparing frameworks would
    otherwise take a missing line for a missing run, and an MXNet study's reader a missing
    section for a missing feature."""
    if models.empty:
        return None
    told = varying(models, encodings.model_axes())
    rows = models[models["tflops"].isna()].drop_duplicates(["study", "cell"]).sort_values(
        ["model", "config", "framework", "phase", "precision", "batch_size",
         *(a for a in told if a != "framework")], kind="stable")
    if rows.empty or (len(rows) == len(models.drop_duplicates(["study", "cell"]))
                      and rows["flops_note"].isna().all()):
        return None
    front, rest = _telling_apart(models, rows, told)
    # A note's closing parenthesis is its cell's own figure ("it counted 6.1e9 FLOPs
    # without them"): the reason is what precedes it, shared by the cells it stopped.
    reasons = (rows["flops_note"].fillna("no FLOP count recorded").astype(str)
               .str.removeprefix("not available: ")
               .str.replace(r"\s*\([^()]*\)$", "", regex=True))
    parts = []
    groups = sorted(rows.groupby(reasons, sort=True), key=lambda g: -len(g[1]))  # most first
    for reason, group in groups:
        named = [" · ".join(str(v) for v in (r.model, r.config, front[r.Index], r.phase,
                                              r.precision, f"batch {r.batch_size}",
                                              rest[r.Index]) if v)
                 for r in group.head(UNCOUNTED_NAMED).itertuples()]
        more = len(group) - len(named)
        parts.append(f"{nouns(len(group), 'cell')} ({reason}): " + ", ".join(named)
                     + (f" and {more} more" if more else ""))
    return ('<p class="note uncounted">'
            + escape("Without TFLOP/s, their FLOPs not counted: " + "; ".join(parts) + ".")
            + "</p>")


def _telling_apart(models: pd.DataFrame, rows: pd.DataFrame, told: list[str]
                   ) -> tuple[pd.Series, pd.Series]:
    """Words for what tells each of ``rows`` apart from the chart's other cells of its
    model, options, phase, precision and batch size: the framework where frameworks vary
    (said after the model), and each other axis (GPUs, device, data, execution mode,
    system, ...) that takes more than one value among such cells. An axis that varies only
    between models (their iteration counts) says nothing about which point is missing."""
    base = ["model", "config", "phase", "precision", "batch_size"]
    front = encodings.labels(rows, [a for a in told if a == "framework"])
    words = pd.Series("", index=rows.index, dtype=object)
    keys = models[base].astype(str).agg("|".join, axis=1)
    row_keys = rows[base].astype(str).agg("|".join, axis=1)
    for axis in (a for a in told if a != "framework"):
        spread = models[axis].astype(str).groupby(keys).nunique()
        telling = row_keys.map(spread).fillna(0) > 1
        label = encodings.labels(rows, [axis]).where(telling, "")
        words = words.str.cat(label, sep=" · ").str.strip(" ·")
    return front, words


def _cell_count(rows: pd.DataFrame) -> int:
    return len(rows[["study", "cell"]].drop_duplicates())


def _failed_runs_note(bad: pd.DataFrame) -> str:
    """The list's word on how it agrees with the header's counts of cells by status,
    where it names failed runs of ok cells; empty otherwise."""
    of_ok = bad["_of_ok"].astype(bool)
    if not of_ok.any():
        return ""
    # an ok cell's failed operator inputs are listed too, but the cell counts as ok
    not_ok = _cell_count(bad[~of_ok & ~bad["_cell_ok"].astype(bool)])
    lead = (f"{nouns(not_ok, 'cell')} did not finish (counted at the top)" if not_ok
            else "Every cell has a run that finished")
    text = (f"{lead}; {nouns(int(of_ok.sum()), 'run')} failed in "
            f"{nouns(_cell_count(bad[of_ok]), 'cell')} whose other runs finished: such a "
            "cell counts as ok, with the figures of its ok runs.")
    return f'<p class="note">{escape(text)}</p>'


def failures_table(frame: pd.DataFrame,
                   profile_links: dict[tuple[str, str, str], Markup] | None = None
                   ) -> str | None:
    """Cells that are not ok, the runs that failed in cells with ok runs (each, named as
    such: the header counts their cells as ok), and the operator inputs that failed in
    cells that measured others (rows of their own, dlbench.aggregate.failed_input_rows),
    with their one-line error; None when there are none. ``profile_links``: (system,
    study, cell) -> links to the cell's profiles, a column of its own when a listed cell
    has one."""
    failed_run = failed_runs_of_ok_cells(frame)
    keys = [k for k in ("study", "cell", "op_name", "name") if k in frame]
    # A failed run of an ok cell is a row of its own; a cell without an ok run one row.
    bad = frame.assign(_of_ok=failed_run, _run=frame["source"].where(failed_run, ""),
                       _label=_run_labels(frame, failed_run), _cell_ok=has_ok_run(frame))
    bad = bad[bad["status"] != "ok"].drop_duplicates(subset=[*keys, "_run"], keep="last")
    if bad.empty:
        return None
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    # The cells counted at the top first, then the failed runs of ok cells.
    bad = bad.assign(_r=bad["status"].map(rank).fillna(9)).sort_values(
        ["_of_ok", "_r", "study", "cell"], kind="stable")
    links = profile_links or {}
    found = [of_row(links, r.system, r.study, r.cell_id) for r in bad.itertuples()]
    with_links = any(found)
    inputs = [_failed_input(r) for r in bad.itertuples()]
    with_inputs = any(inputs)
    with_runs = bool(bad["_label"].ne("").any())
    rows = [[status_badge(r.status), r.study, Markup(f"<code>{_text(r.cell)}</code>"),
             *([run] if with_runs else []), *([input_] if with_inputs else []),
             Markup(f'<span class="error">{_text(r.error) or "(no error recorded)"}</span>'),
             *([link or ""] if with_links else [])]
            for r, run, input_, link in zip(bad.itertuples(), bad["_label"], inputs, found,
                                            strict=True)]
    headers = ["status", "study", "cell", *(["run"] if with_runs else []),
               *(["input"] if with_inputs else []), "error",
               *(["profiles"] if with_links else [])]
    return _failed_runs_note(bad) + table(headers, rows, css="failures")


# Columns of the table that repeat a field of a cell's environment: a row whose
# environment lacks one (an older result) takes the column's.
_ENVIRONMENT_COLUMNS = ("hostname", "cpu_model", "gpu_driver", "cuda_version",
                        "cudnn_version", "nccl_version", "framework_version",
                        "python_version", "dlbench_version", "dlbench_git_revision",
                        "container")


def _environment(row: Any) -> dict[str, Any]:
    env = json.loads(row.environment) if isinstance(row.environment, str) and row.environment else {}
    for key in _ENVIRONMENT_COLUMNS:
        if env.get(key) in (None, "") and isinstance(getattr(row, key, None), str):
            env[key] = getattr(row, key)
    return env


def _gpus(env: dict[str, Any], fallback: Any) -> str:
    models = env.get("gpu_models") or []
    if not models:
        return fallback if isinstance(fallback, str) else ""
    return ", ".join(f"{n} × {m}" for m, n in sorted(Counter(models).items()))


def _cpu(env: dict[str, Any]) -> str:
    text = env.get("cpu_model") or ""
    extras = []
    if env.get("cpu_count"):
        extras.append(f"{env['cpu_count']} cores")
    if env.get("memory_gib"):
        extras.append(f"{env['memory_gib']:g} GiB")
    return f"{text} ({', '.join(extras)})" if extras else text


def _revision(env: dict[str, Any]) -> str:
    version = env.get("dlbench_version") or ""
    revision = env.get("dlbench_git_revision") or ""
    if revision:
        commit, dirty = revision.split("-", 1) if "-" in revision else (revision, "")
        revision = commit[:12] + (f"-{dirty}" if dirty else "")
    return " @ ".join(p for p in (version, revision) if p)


# The system label every chart names a run's machine by, beside its host name.
_ENVIRONMENT_HEADERS = ["system", "host", "CPU", "GPUs", "driver", "CUDA", "cuDNN", "NCCL",
                        "framework", "Python", "dlbench", "container"]
# A GPU library version read on a host without a GPU: the one the framework was built with
# (a PyTorch wheel's CUDA, cuDNN and NCCL), installed but never run there.
BUILD_ONLY = " (build)"


def cudnn_text(version: object) -> str:
    """cuDNN's version as it is released ("9.1.0"), from the number torch gives (91000:
    major × 10000 + minor × 100 + patch since cuDNN 9, major × 1000 + ... before); any
    other text as it is."""
    text = "" if version is None else str(version)
    if not text.isdigit():
        return text
    number = int(text)
    major, rest = divmod(number, 10000) if number >= 90000 else divmod(number, 1000)
    return f"{major}.{rest // 100}.{rest % 100}" if major else text


def _environment_key(row: Any) -> tuple[str, ...]:
    """A run's environment as the table's columns (empty where it recorded none)."""
    env = _environment(row)
    framework = env.get("framework") or (row.framework if isinstance(row.framework, str) else "")
    framework = " ".join(p for p in (framework, env.get("framework_version") or "") if p)
    gpus = _gpus(env, row.gpu_model)
    libraries = [env.get("cuda_version") or "", cudnn_text(env.get("cudnn_version")),
                 env.get("nccl_version") or ""]
    if not gpus:
        libraries = [f"{v}{BUILD_ONLY}" if v else "" for v in libraries]
    system = getattr(row, "system", None)
    key = (system if isinstance(system, str) else "", env.get("hostname") or "", _cpu(env),
           gpus, env.get("gpu_driver") or "", *libraries, framework,
           env.get("python_version") or "", _revision(env), env.get("container") or "")
    return tuple(str(v) for v in key)


def environment_rows(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Distinct environments with the number of cells that ran in each: each run of the
    runs a cell's figures come from (data.cell_rows) counts its cell under its own
    environment, so that a cell whose runs differ (a driver updated between two runs, runs
    on two nodes of a cluster) counts under each, not as the last run's alone (nor as an
    environment of its own per cell: a study spread over a cluster's nodes would list
    thousands)."""
    headers = _ENVIRONMENT_HEADERS
    fields = [c for c in ("environment", "framework", "gpu_model", "system",
                          *_ENVIRONMENT_COLUMNS) if c in frame]
    runs = cell_rows(frame).drop_duplicates(
        subset=[c for c in ("study", "cell", "source") if c in frame], keep="last")
    values = runs[fields].astype(object)
    values = values.where(values.notna(), None)
    # Runs share their environment: read each distinct one once (10,000 cells, a few hosts).
    described: dict[tuple, tuple[str, ...]] = {}
    for distinct in values.drop_duplicates().itertuples(index=False, name=None):
        row = SimpleNamespace(**dict(zip(fields, distinct, strict=True)))
        described[distinct] = _environment_key(row)
    environments = [described[v] for v in values.itertuples(index=False, name=None)]
    cells_in = pd.DataFrame({"environment": environments, "study": runs["study"].to_numpy(),
                             "cell": runs["cell"].to_numpy()}).drop_duplicates()
    counts: Counter[tuple[str, ...]] = Counter(cells_in["environment"])
    keep = [i for i in range(len(headers)) if any(key[i] for key in counts)]
    rows = [[key[i] for i in keep] + [n] for key, n in sorted(counts.items())]
    return [headers[i] for i in keep] + ["cells"], rows


def environment_table(frame: pd.DataFrame) -> str | None:
    headers, rows = environment_rows(frame)
    if len(headers) <= 1:
        return None
    built = any(str(v).endswith(BUILD_ONLY) for row in rows for v in row)
    note = (f'<p class="note">{escape(BUILD_ONLY.strip())}: on a host without a GPU, the '
            "version the framework was built with, not a library its cells ran.</p>"
            if built else "")
    return table(headers, rows, css="environment") + note


def held_back_table(frame: pd.DataFrame) -> str | None:
    """Runs of cells whose GPU clocks were held back (power cap, thermal, hardware
    slowdown) for part of their measurement, most first, each run's own figures (a run
    held back is a fact of that run: which one is said where a cell ran more than once);
    None when there are none."""
    if "gpu_clocks_held_back" not in frame:
        return None
    with_held = frame.assign(held=pd.to_numeric(frame["gpu_clocks_held_back"], errors="coerce"))
    rows = with_held[with_held["held"] >= gpu_clocks.NOTABLE]
    if rows.empty:
        return None
    rows = rows.drop_duplicates(subset=["source"]).sort_values("held", ascending=False)
    runs = names_runs(rows)
    body = [[r.study, r.system, r.get("cell") or r.cell_id,
             *([_run(r.get("repeat"))] if runs else []),
             f"{r.held:.0%}", r.gpu_clock_reasons or "",
             f"{r.gpu_power_limit_w:,.0f}" if pd.notna(r.gpu_power_limit_w) else ""]
            for _, r in rows.iterrows()]
    return table(["study", "system", "cell", *(["run"] if runs else []), "samples held back",
                  "why", "power limit (W)"], body, css="numeric-tail")


def contended_table(frame: pd.DataFrame) -> str | None:
    """Runs from which the host took CPU time while they measured (the hypervisor's steal
    of NOTABLE_STEAL or more, any throttling by the cgroup's quota), most first; None when
    there are none (or the table predates the columns)."""
    if "cpu_steal_fraction" not in frame or "cpu_throttled_s" not in frame:
        return None
    steal = pd.to_numeric(frame["cpu_steal_fraction"], errors="coerce")
    throttled = pd.to_numeric(frame["cpu_throttled_s"], errors="coerce")
    rows = frame.assign(steal=steal, throttled=throttled)[
        (steal >= host_contention.NOTABLE_STEAL) | (throttled > 0)]
    if rows.empty:
        return None
    rows = rows.drop_duplicates(subset=["source"]).sort_values(
        ["steal", "throttled"], ascending=False, na_position="last")
    runs = names_runs(rows)
    body = [[r.study, r.system, r.get("cell") or r.cell_id,
             *([_run(r.get("repeat"))] if runs else []),
             f"{r.steal:.1%}" if pd.notna(r.steal) else "",
             f"{r.throttled:,.2f}" if pd.notna(r.throttled) else ""]
            for _, r in rows.iterrows()]
    return table(["study", "system", "cell", *(["run"] if runs else []),
                  "CPU time stolen (hypervisor)", "throttled (s, cgroup quota)"], body,
                 css="numeric-tail")


def _run(repeat: Any) -> str:
    """A run's number, from 1 as the failures listing numbers a cell's runs (the result's
    ``repeat`` is 0 for the first); empty if unknown."""
    return str(int(repeat) + 1) if repeat is not None and pd.notna(repeat) else ""


def unstable_table(frame: pd.DataFrame) -> str | None:
    """Measurements whose runs disagree beyond the unstable_cv threshold, worst first;
    None when there are none (or no cell ran more than once)."""
    if "unstable" not in frame:
        return None
    rows = frame[frame["unstable"].astype("boolean").fillna(False).astype(bool)]
    if rows.empty:
        return None
    # per study: two studies that ran one cell have a run-to-run CV each
    keys = [k for k in ("study", "cell", "name", "pass", "op_name") if k in rows]
    rows = rows.drop_duplicates(subset=keys, keep="last").sort_values(
        "run_to_run_cv", ascending=False)
    names = measurement_names(rows)
    body = [[r.study, r.system, r.get("cell") or r.cell_id, names[i], r["pass"],
             int(r.repeats),
             f"{r.run_to_run_cv:.1%}", f"{r.cell_time_median_s * 1e3:,.3f}",
             f"{r.cell_time_ci_low_s * 1e3:,.3f} – {r.cell_time_ci_high_s * 1e3:,.3f}"
             if pd.notna(r.cell_time_ci_low_s) else ""]
            for i, r in rows.iterrows()]
    return table(["study", "system", "cell", "measurement", "pass", "runs", "run-to-run CV",
                  time_title(rows["repeats"], "ms"), "95 % CI (ms)"], body, css="numeric-tail")
