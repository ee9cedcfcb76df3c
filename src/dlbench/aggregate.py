"""All cell results -> one tidy table (Parquet with an explicit schema, and CSV).

One row per measurement; a cell without measurements (failed, oom, skipped) still gives
one row, with its status and error and empty metrics.

A result file that cannot be trusted (not JSON, against the result schema, another cell's
identity, a value no column can hold) never fails the table: it becomes one ``failed`` row
whose error names the file and the problem, and ``write`` moves the file aside into
``invalid/`` beside it, so that the workflow sees the cell's result missing and measures
the cell again on its next run (nothing is deleted). By hand (``python -m
dlbench.aggregate``) nothing is moved: the files are the user's.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dlbench import (
    atomic,
    axes,
    drift,
    efficiency,
    kinds,
    run_to_run,
    stages,
    systems,
    table_columns,
)
from dlbench import result as R
from dlbench.atomic import writing
from dlbench.stats import SUMMARY_KEYS

# Cell axes that become columns (model cells and operator cells; absent ones are null),
# from the axis table in table order.
_ARROW = {"int64": pa.int64(), "bool": pa.bool_(), "string": pa.string()}
CELL_COLUMNS: list[tuple[str, pa.DataType]] = [(name, _ARROW[kind])
                                               for name, kind in axes.columns()]
ENV_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("hostname", pa.string()), ("cpu_model", pa.string()), ("cpu_capability", pa.string()),
    ("cpu_features", pa.string()), ("cpu_count", pa.int64()), ("cpu_cores", pa.int64()),
    ("cpu_sockets", pa.int64()), ("cpus_usable", pa.int64()), ("gpu_model", pa.string()),
    ("gpu_driver", pa.string()), ("cuda_version", pa.string()), ("cudnn_version", pa.string()),
    ("nccl_version", pa.string()),
    ("framework_version", pa.string()), ("python_version", pa.string()),
    ("dlbench_version", pa.string()), ("dlbench_git_revision", pa.string()),
    ("container", pa.string()), ("container_digest", pa.string()),
    ("slurm_job_id", pa.string()), ("slurm_partition", pa.string()),
]
# The resource monitor's summary (result extra "monitor"), and PyTorch's own peak.
# energy_j is null with energy_note saying why when the host has no energy counter.
MONITOR_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("peak_host_rss_bytes", pa.int64()), ("peak_device_memory_bytes", pa.int64()),
    # The host memory the cell's processes hold: their PSS, pages shared between them
    # (forked loader workers) counted once, where the RSS sum counts them once per process.
    # Null in a result older than the column.
    ("peak_host_pss_bytes", pa.int64()),
    ("max_memory_allocated_bytes", pa.int64()),
    ("power_mean_w", pa.float64()), ("power_max_w", pa.float64()),
    ("energy_j", pa.float64()), ("samples_per_joule", pa.float64()),
    ("energy_note", pa.string()),
    # What energy_j counts: the summary's sources sorted and joined by "+"
    # ("gpu:nvml_total_energy+host:rapl"), null where nothing was counted. Energy of two
    # hosts compares only where they count the same (dlbench.compare).
    ("energy_sources", pa.string()),
    # The cell's GPUs' operating conditions (dlbench.gpu_clocks): the lowest power limit,
    # and the share of samples the most held-back GPU ran below its clock, and why.
    ("gpu_power_limit_w", pa.float64()), ("gpu_clocks_held_back", pa.float64()),
    ("gpu_clock_reasons", pa.string()),
    # CPU time the host took away while the cell measured (dlbench.host_contention): the
    # hypervisor's share of the CPUs (steal), the seconds its cgroup's quota stopped it.
    ("cpu_steal_fraction", pa.float64()), ("cpu_throttled_s", pa.float64()),
]

# Where each cell's time went (result "stages_s", dlbench.stages): wall_<stage>_s.
STAGE_COLUMNS: list[tuple[str, pa.DataType]] = [(f"wall_{name}_s", pa.float64())
                                                for name in stages.NAMES]


# Execution mode and numerical sanity of a model cell (result extra "compile", "accuracy",
# "last_loss"; dlbench.pytorch.execution and .accuracy). inaccurate is null when unchecked.
EXECUTION_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("compile_time_s", pa.float64()), ("graph_breaks", pa.int64()),
    ("recompilations", pa.int64()), ("recompiled_in_measurement", pa.bool_()),
    ("inductor_cache_warm", pa.bool_()),
    ("accuracy_cosine", pa.float64()), ("accuracy_max_rel_error", pa.float64()),
    ("inaccurate", pa.bool_()), ("last_loss", pa.float64()), ("loss_finite", pa.bool_()),
]


def execution_values(extra: dict[str, Any]) -> dict[str, Any]:
    comp = extra.get("compile") or {}
    acc = extra.get("accuracy") or {}
    checked = "ok" in acc
    return {
        "compile_time_s": comp.get("compile_time_s"), "graph_breaks": comp.get("graph_breaks"),
        "recompilations": comp.get("recompilations"),
        "recompiled_in_measurement": (bool(comp.get("recompiled_in_measurement"))
                                      if comp else None),
        "inductor_cache_warm": comp.get("inductor_cache_warm"),
        "accuracy_cosine": acc.get("cosine"), "accuracy_max_rel_error": acc.get("max_rel_error"),
        "inaccurate": (not acc["ok"]) if checked else None,
        "last_loss": extra.get("last_loss"), "loss_finite": extra.get("loss_finite"),
    }


def warmup_values(extra: dict[str, Any]) -> dict[str, Any]:
    """The warm-up columns from a measurement's (or a language-model cell's) extra."""
    warmup = extra.get("warmup") or {}
    return {"warmup_settled": warmup.get("settled"), "warmup_seconds": warmup.get("seconds")}


def link_values(extra: dict[str, Any]) -> dict[str, Any]:
    """A collective size's link columns from its extra (the cell's ceiling, its share)."""
    link = extra.get("link") or {}
    return {"link": link.get("path"), "link_gbps": link.get("gbps"),
            "pct_of_link": extra.get("pct_of_link")}


# When a cell's record started and finished: a timestamp in UTC, to filter and subtract as
# one (the result file's ISO 8601 text, with its offset).
TIMESTAMP = pa.timestamp("ms", tz="UTC")


def utc_time(text: str | None, field: str) -> _dt.datetime | None:
    """A result's ISO 8601 time as an aware datetime (one without an offset is UTC, the
    clock every record is written in); ValueError names the field."""
    if text is None:
        return None
    try:
        moment = _dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueError(f"field {field}: not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.timezone.utc)


def build_schema() -> pa.Schema:
    """The table's columns (a function: its cell columns follow the axis table)."""
    return pa.schema(
        [
            ("system", pa.string()),
            ("study", pa.string()), ("cell_id", pa.string()), ("repeat", pa.int64()),
            ("kind", pa.string()),
            ("status", pa.string()), ("error", pa.string()),
            *CELL_COLUMNS,
            ("model_opts", pa.string()),  # JSON
            ("name", pa.string()), ("op_name", pa.string()), ("pass", pa.string()),
            ("iterations", pa.int64()), ("items_per_iteration", pa.float64()),
            *[(f"time_{k}_s", pa.float64()) for k in SUMMARY_KEYS],
            ("throughput", pa.float64()), ("throughput_unit", pa.string()),
            # Across the cell's repeats (dlbench.run_to_run), the same on each repeat's row.
            ("repeats", pa.int64()), ("cell_time_median_s", pa.float64()),
            ("cell_throughput", pa.float64()), ("cell_time_ci_low_s", pa.float64()),
            ("cell_time_ci_high_s", pa.float64()), ("ci_method", pa.string()),
            ("run_to_run_cv", pa.float64()), ("within_run_cv", pa.float64()),
            ("unstable", pa.bool_()),
            # Within the run (dlbench.drift): the iteration times' steady rise (+) or fall
            # (-) over the measured iterations, as a share of the median; its p-value.
            ("time_drift", pa.float64()), ("time_drift_p", pa.float64()),
            ("drifting", pa.bool_()),
            # A warm-up until steady (warmup_until_steady; null where the warm-up was fixed):
            # whether it settled before its limits, and its seconds.
            ("warmup_settled", pa.bool_()), ("warmup_seconds", pa.float64()),
            ("precision_native", pa.bool_()),
            ("parameters", pa.int64()), ("phi", pa.int64()), ("phi_tflops", pa.float64()),
            ("flops_per_iteration", pa.float64()), ("tflops", pa.float64()),
            # Why a measurement has no FLOPs (a kernel without a formula, no counter).
            ("flops_note", pa.string()),
            ("bytes_per_iteration", pa.float64()), ("gbps", pa.float64()),
            ("bus_gbps", pa.float64()),  # collectives: nccl-tests' bus bandwidth
            # collectives: the link that limits them (dlbench.links), its GB/s, and the
            # bus bandwidth's percentage of it
            ("link", pa.string()), ("link_gbps", pa.float64()), ("pct_of_link", pa.float64()),
            # How close to the hardware (dlbench.efficiency): vendor peaks and measured ceilings.
            ("efficiency_precision", pa.string()),
            *[(name, pa.float64()) for name in efficiency.COLUMNS[1:]],
            ("data_wait_s", pa.float64()), ("compute_s", pa.float64()),
            *EXECUTION_COLUMNS,
            *MONITOR_COLUMNS,
            ("wall_time_s", pa.float64()), *STAGE_COLUMNS,
            ("started_at", TIMESTAMP), ("finished_at", TIMESTAMP),
            *ENV_COLUMNS,
            ("times_s", pa.list_(pa.float64())),
            ("environment", pa.string()),  # JSON
            ("extra", pa.string()),  # JSON: cell extra merged with measurement extra
            ("source", pa.string()),  # result file
        ]
    )


# The table's layout version, in the Parquet's schema metadata: a reader (dlbench compare,
# the report) can tell a table of another layout from a damaged one.
TABLE_VERSION = 1
TABLE_VERSION_KEY = b"dlbench.table_version"


def described(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each field's unit and description in its metadata
    (dlbench.table_columns, also docs/columns.md)."""
    return pa.schema([field.with_metadata(table_columns.field_metadata(field.name))
                      for field in schema])


SCHEMA = described(build_schema()).with_metadata(
    {TABLE_VERSION_KEY: str(TABLE_VERSION).encode()})
UNSTABLE_CV_KEY = b"dlbench.unstable_cv"


class TableError(ValueError):
    """An aggregate table that cannot be read, in one line naming the file."""


def read_table(path: str | Path, required: Iterable[str]) -> pa.Table:
    """An aggregate Parquet (the report's and dlbench compare's input), checked: readable,
    of this layout version (a table without the key is an older one of the same layout),
    with the ``required`` columns. TableError names the file and the problem."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TableError(f"{path}: not a readable Parquet file ({first})") from None
    version = (table.schema.metadata or {}).get(TABLE_VERSION_KEY)
    if version is not None and version != str(TABLE_VERSION).encode():
        raise TableError(f"{path}: an aggregate table of layout version "
                         f"{version.decode(errors='replace')}, but this dlbench reads version "
                         f"{TABLE_VERSION} (field {TABLE_VERSION_KEY.decode()})")
    missing = [name for name in required if name not in table.column_names]
    if missing:
        raise TableError(f"{path}: column '{missing[0]}' is missing (not a dlbench aggregate "
                         "table)")
    return with_timestamps(table)


TIME_COLUMNS = ("started_at", "finished_at")


def with_timestamps(table: pa.Table) -> pa.Table:
    """A table whose times are ISO 8601 text (written before they were timestamps) with
    them as TIMESTAMP, as a table of this release has them; a time that is no ISO 8601
    text is null (the row keeps its figures)."""
    for name in TIME_COLUMNS:
        index = table.schema.get_field_index(name)
        if index < 0 or not pa.types.is_string(table.schema.field(index).type):
            continue
        times = [_time_or_none(text) for text in table.column(index).to_pylist()]
        field = table.schema.field(index).with_type(TIMESTAMP)
        table = table.set_column(index, field, pa.array(times, type=TIMESTAMP))
    return table


def _time_or_none(text: str | None) -> _dt.datetime | None:
    try:
        return utc_time(text, "")
    except ValueError:
        return None


def with_every_column(frame: Any) -> list[str]:
    """Add the columns of the current layout that ``frame`` (a pandas frame of an older
    table) lacks, as empty; return their names."""
    missing = [name for name in SCHEMA.names if name not in frame]
    for name in missing:
        frame[name] = None
    return missing


def _json(value: Any) -> str | None:
    return json.dumps(value, sort_keys=True) if value not in (None, {}, []) else None


# The energy_sources column, and what a run with energy but no sources (a result older
# than the column) reads as where runs' sources are compared (dlbench.compare, the report).
ENERGY_SOURCES = "energy_sources"
SOURCES_UNRECORDED = "not recorded"


def energy_sources_text(sources: Any) -> str | None:
    """The monitor's ``energy_sources`` (a list) as one column value: sorted, joined by
    "+"; None where nothing was counted or the result predates the key."""
    if sources is None:
        return None
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise ValueError("field extra.monitor.energy_sources: expected a list of source "
                         f"names, got {sources!r}")
    return "+".join(sorted(set(sources))) or None


def monitor_values(extra: dict[str, Any]) -> dict[str, Any]:
    summary = extra.get("monitor") or {}
    values = {name: summary.get(name) for name, _ in MONITOR_COLUMNS}
    values["max_memory_allocated_bytes"] = extra.get("max_memory_allocated_bytes")
    values["energy_sources"] = energy_sources_text(summary.get("energy_sources"))
    return values


def gpu_model(env: dict[str, Any], cell: dict[str, Any]) -> str | None:
    """The GPU a cell ran on, as its runner's framework named it (``device_name``: a MIG
    instance says so), else the machine's GPU models joined with ", " (NVML's list, of a
    node whose GPUs may differ). Efficiency columns take their peaks from it."""
    name = env.get("device_name")
    if cell.get("device") == "gpu" and isinstance(name, str) and name:
        return name
    return ", ".join(sorted(set(env.get("gpu_models") or []))) or None


def rows_of(res: dict[str, Any], source: str) -> list[dict[str, Any]]:
    cell = res.get("cell", {})
    kind = kinds.of_result(res["kind"])
    if kind is not None:  # a result older than some axes: those at their defaults
        cell = axes.with_later_axes(kind.name, cell)
    env = res.get("environment", {})
    base: dict[str, Any] = {
        # The folder names the system (a tree copied in from elsewhere may be relabelled).
        "system": systems.system_of(Path(source)) or res.get("system"),
        "study": res.get("study"), "cell_id": res.get("cell_id"),
        "repeat": res.get("repeat", systems.repeat_of(Path(source))), "kind": res["kind"],
        "status": res["status"], "error": res.get("error"),
        **{name: cell.get(name) for name, _ in CELL_COLUMNS},
        "model_opts": _json(cell.get("model_opts")),
        "wall_time_s": res.get("wall_time_s"),
        **{f"wall_{name}_s": (res.get("stages_s") or {}).get(name) for name in stages.NAMES},
        "started_at": utc_time(res.get("started_at"), "started_at"),
        "finished_at": utc_time(res.get("finished_at"), "finished_at"),
        **{name: env.get(name) for name, _ in ENV_COLUMNS},
        "gpu_model": gpu_model(env, cell),
        # The ISA features as one comma-separated string: easy to filter on in a table.
        "cpu_features": ",".join(env.get("cpu_features") or []) or None,
        "precision_native": (res.get("extra") or {}).get("precision_native"),
        "environment": _json(env), "source": source,
    }
    # Not a column: what the label stands for, checked across files (systems.conflict).
    base["_fingerprint"] = res.get("fingerprint") or systems.fingerprint(env)
    if not res["measurements"]:
        return [{**base, **monitor_values(res.get("extra") or {}),
                 "extra": _json(res.get("extra"))}]
    rows = []
    for m in res["measurements"]:
        extra = {**(res.get("extra") or {}), **(m.get("extra") or {})}
        rows.append({
            **base,
            "name": m["name"], "op_name": m.get("op_name"), "pass": m["pass"],
            "iterations": m["iterations"], "items_per_iteration": m["items_per_iteration"],
            **{f"time_{k}_s": m["time_s"][k] for k in SUMMARY_KEYS},
            "throughput": m["throughput"], "throughput_unit": m["throughput_unit"],
            "parameters": m.get("parameters"), "phi": extra.get("phi"),
            "phi_tflops": extra.get("phi_tflops"),
            "flops_per_iteration": m.get("flops_per_iteration"), "tflops": m.get("tflops"),
            "flops_note": extra.get("flops_note"),
            "bytes_per_iteration": m.get("bytes_per_iteration"), "gbps": m.get("gbps"),
            "bus_gbps": extra.get("bus_gbps"),
            **link_values(extra),
            "data_wait_s": m.get("data_wait_s"), "compute_s": m.get("compute_s"),
            **execution_values(extra),
            **monitor_values(extra),
            **drift.values(m["times_s"]),
            **warmup_values(extra),
            "times_s": m["times_s"], "extra": _json(extra),
        })
    return rows + failed_input_rows(res, base)


def failed_input_rows(res: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per operator input that failed in a cell that measured others (the runner's
    ``extra.errors``; the cell itself stays ok, as PARAM goes on past a failed input), so
    that a status filter finds it. An error before any input (an unknown operator, a bad
    config entry) has no input id: ``name`` is null there. After the cell's measurements:
    a per-cell view keeping a cell's last row (the report's) sees the failure."""
    if res["kind"] != "op":
        return []
    return [{**base, "status": "oom" if error.get("oom") else "failed",
             "error": error.get("error"), "op_name": error.get("op_name"),
             "name": error.get("id"), "extra": _json({"failed_input": error})}
            for error in (res.get("extra") or {}).get("errors") or []]


# An invalid result is moved here, beside the cell results (results/<system>/<study>/cells/invalid/).
INVALID_DIR = "invalid"
# A problem is said on one line; a schema message quoting a whole document is cut here.
MAX_PROBLEM_CHARS = 300
_INT64 = (-(2**63), 2**63 - 1)


class InvalidResult(ValueError):
    """Why one result file cannot become rows, in one line (the caller names the file)."""


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_PROBLEM_CHARS else text[:MAX_PROBLEM_CHARS - 1] + "…"


def expected_identity(path: str | Path) -> dict[str, str] | None:
    """study and cell_id that a result at
    results/[<system>/]<study>/cells/<cell_id>[_r<repeat>].json must carry; None for a
    file elsewhere (its identity is whatever it says)."""
    path = Path(path)
    if path.suffix != ".json" or path.parent.name != "cells" or not path.parent.parent.name:
        return None
    return {"study": path.parent.parent.name, "cell_id": systems.cell_id_of(path)}


def load(path: str | Path) -> dict[str, Any]:
    """The result document at ``path``, checked against the result schema and against the
    identity its path gives; InvalidResult says what is wrong."""
    try:
        res = R.read(path)
    except UnicodeDecodeError as exc:  # random bytes: a ValueError, but not a JSON one
        raise InvalidResult(f"not a JSON result file (not UTF-8 text at byte {exc.start})") from None
    except OSError as exc:  # its own words, not Python's repeating the path
        raise InvalidResult(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    except (ValueError, RecursionError) as exc:
        # R.read's messages start with the path, which the caller says anyway.
        raise InvalidResult(_one_line(str(exc).removeprefix(f"{path}: "))) from None
    try:
        R.validate(res)
    except ValueError as exc:
        raise InvalidResult(_one_line(str(exc))) from None
    for key, expected in (expected_identity(path) or {}).items():
        if res.get(key) != expected:
            raise InvalidResult(_one_line(f"{key} is {res.get(key)!r} but its path says "
                                          f"{expected!r}"))
    profiled = (res.get("extra") or {}).get("profiled")
    if profiled:  # a profile's own run, given by hand: its times carry the tool's cost
        tool = profiled.get("tool") if isinstance(profiled, dict) else None
        raise InvalidResult(_one_line(f"a profiled run's result (extra.profiled, tool "
                                      f"{tool!r}): its times carry the profiler's cost, so "
                                      "it is no measurement"))
    return res


def _column_problem(values: list[Any], dtype: pa.DataType, exc: Exception) -> str:
    if pa.types.is_integer(dtype):
        for value in values:
            if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
                return f"{value} is outside int64"
    return _one_line(str(exc) or type(exc).__name__)


def table_of_rows(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as a table of SCHEMA, column by column, so that a value no column can hold
    (an integer beyond int64, text where a number belongs) is named by its field."""
    arrays = []
    for field in SCHEMA:
        values = [row.get(field.name) for row in rows]
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowException, OverflowError) as exc:
            raise InvalidResult(f"field {field.name}: {_column_problem(values, field.type, exc)}"
                                ) from None
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def rows_of_file(path: str | Path) -> list[dict[str, Any]]:
    """The rows of one result file; InvalidResult when it cannot give them."""
    res = load(path)
    try:
        return rows_of(res, str(path))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        # The schema leaves extra and most of environment open: a value of another shape.
        raise InvalidResult(_one_line(f"cannot be tabulated ({type(exc).__name__}: {exc})")
                            ) from None


def move_aside(path: str | Path) -> Path:
    """Move an invalid result into invalid/ beside it (``atomic.set_aside``)."""
    return atomic.set_aside(path, INVALID_DIR)


def invalid_row(path: str | Path, problem: str, move: bool,
                later: list[str] | None = None, left_for: str | None = None
                ) -> dict[str, Any]:
    """The failed row that stands for an invalid result file, said in the log too; with
    ``move`` the file is moved aside so that the next run measures its cell again; with
    ``later`` (the workflow's: a file moved now would be missing from the run that is
    going on) its path is added there instead, for the next run to move; ``left_for``:
    the runs that measure its cell (another system's, another config's), where it is left
    for them."""
    message = f"invalid result file {path}: {problem}"
    moved = None
    if left_for is not None:
        message += f"; left in place: {left_for} measures the cell again"
    elif later is not None:
        later.append(str(path))
        message += "; the next run moves it aside and measures the cell again"
    elif move:
        try:
            moved = move_aside(path)
            message += f"; moved to {moved} so that the next run measures the cell again"
        except OSError as exc:
            message += f"; it could not be moved aside ({exc}): remove it to measure the cell again"
    print(f"dlbench.aggregate: {message}", file=sys.stderr)
    identity = expected_identity(path) or {}
    return {"system": systems.system_of(Path(path)),
            "study": identity.get("study"), "cell_id": identity.get("cell_id"),
            "repeat": systems.repeat_of(Path(path)) if identity else None,
            "status": "failed", "error": message, "source": str(path),
            "extra": _json({"invalid_result": problem,
                            "moved_to": None if moved is None else str(moved)})}


def build_table(paths: Iterable[str | Path], *, move_invalid: bool = False,
                check: bool = True, invalid_later: list[str] | None = None,
                unstable_cv: float = run_to_run.DEFAULT_UNSTABLE_CV,
                own_system: str | None = None,
                own_files: Collection[str] | None = None) -> pa.Table:
    """One table of every result file; an invalid one gives a failed row (``invalid_row``).
    With ``check``, two machines or software stacks under one label raise SystemConflict.
    Each measurement's statistics across its cell's repeats: dlbench.run_to_run. With
    ``own_system`` (and ``own_files``, the run's result files), only the invalid files of
    that system (and among those files) are moved aside or listed for later."""
    owned = None if own_files is None else {str(path) for path in own_files}

    def invalid(path: str | Path, problem: str) -> dict[str, Any]:
        # Another system's cells are measured by its own runs only, and a cell this run
        # does not plan by a run of a config that does: moved aside here, the file would
        # leave the table with nothing to measure its cell again.
        owner, study = systems.system_of(Path(path)), systems.study_of(Path(path))
        if own_system is not None and owner is not None and owner != own_system:
            return invalid_row(path, problem, False, None,
                               left_for=f"the next run of system {owner!r}")
        if owned is not None and str(path) not in owned:
            return invalid_row(path, problem, False, None,
                               left_for=f"a run of a config with this cell (study {study!r})")
        return invalid_row(path, problem, move_invalid, invalid_later)

    files: list[tuple[str | Path, list[dict[str, Any]]]] = []
    for path in unique_paths(paths):
        try:
            files.append((path, rows_of_file(path)))
        except InvalidResult as exc:
            files.append((path, [invalid(path, str(exc))]))
    check_one_file_per_run(files)
    if check:
        check_systems(files)
    every_row = [row for _, rows in files for row in rows]
    run_to_run.add_columns(every_row, unstable_cv)
    efficiency.add_columns(every_row)
    try:  # all rows at once: a table per file would cost some 2 ms a file
        table = table_of_rows([row for _, rows in files for row in rows])
    except InvalidResult:  # a value no column can hold: find the files that hold one
        tables = []
        for path, rows in files:
            try:
                tables.append(table_of_rows(rows))
            except InvalidResult as exc:
                tables.append(table_of_rows([invalid(path, str(exc))]))
        table = pa.concat_tables(tables).combine_chunks()
    # The threshold the unstable column was judged by, for a reader to judge other spreads
    # by the same (the report's calibration table).
    return table.replace_schema_metadata(
        {**(table.schema.metadata or {}), UNSTABLE_CV_KEY: repr(unstable_cv).encode()})


def unstable_cv_of(table: pa.Table) -> float:
    """The unstable_cv a table was written with; the default for a table older than that."""
    try:
        return float((table.schema.metadata or {})[UNSTABLE_CV_KEY])
    except (KeyError, ValueError):
        return run_to_run.DEFAULT_UNSTABLE_CV


class FilesRefused(ValueError):
    """Result files no one table can be made of, in one line naming them: the user's to
    settle, no traceback helps."""


class SystemConflict(FilesRefused):
    """Two machines or software stacks under one system label (one line)."""


class DuplicateResult(FilesRefused):
    """Two result files of one run of a cell (one line): counted twice, they would make a
    repeat that never ran, and a run-to-run spread of 0."""


def unique_paths(paths: Iterable[str | Path]) -> list[str | Path]:
    """``paths`` in order, each file once however it is written (overlapping globs by hand,
    ``cells/x.json ./cells/x.json``)."""
    seen: set[Path] = set()
    unique = []
    for path in paths:
        resolved = Path(path).resolve()
        if resolved not in seen:
            seen.add(resolved)
            unique.append(path)
    return unique


def check_one_file_per_run(files: list[tuple[str | Path, list[dict[str, Any]]]]) -> None:
    """One file per run of a cell (system, study, cell, repeat and start time), else
    DuplicateResult naming both: a copy of a result beside its original."""
    first: dict[tuple, str] = {}
    for path, rows in files:
        # An unreadable file's row has no start time: it is no run to count twice. Two runs
        # of a cell made apart (two checkouts, each a repeat 0) started at other times.
        if not rows or rows[0].get("started_at") is None:
            continue
        row = rows[0]
        key = (row.get("system"), row.get("study"), row.get("cell_id"), row.get("repeat"),
               row["started_at"])
        if key in first:
            system = f", system {row['system']}" if row.get("system") else ""
            started = row["started_at"].isoformat(timespec="milliseconds")
            raise DuplicateResult(" ".join(  # one line, whatever the names hold
                f"{first[key]} and {path} are both the result of one run of cell "
                f"{row.get('cell_id')} (repeat {row.get('repeat')}, study {row.get('study')}"
                f"{system}, started {started}): give one of them".split()))
        first[key] = str(path)


def check_systems(files: list[tuple[str | Path, list[dict[str, Any]]]]) -> None:
    firsts = [{"system": rows[0].get("system"), "fingerprint": rows[0].get("_fingerprint"),
               "source": str(path)} for path, rows in files if rows]
    problem = systems.conflict(firsts)
    if problem:
        raise SystemConflict(problem)


def _nullable_integers(dtype: pa.DataType) -> Any:
    """to_pandas' types_mapper: integer columns as pandas' Int64 (None: the default)."""
    import pandas as pd

    return pd.Int64Dtype() if pa.types.is_integer(dtype) else None


def write(paths: Iterable[str | Path], parquet: str | Path, csv: str | Path | None = None,
          *, move_invalid: bool = True, invalid_later: list[str] | None = None,
          unstable_cv: float = run_to_run.DEFAULT_UNSTABLE_CV,
          own_system: str | None = None,
          own_files: Collection[str] | None = None) -> pa.Table:
    """Write the table of ``paths`` to ``parquet`` (and ``csv``), each file whole or not at
    all; invalid result files (of ``own_system`` and ``own_files`` only, where given)
    are moved aside (``move_invalid``, see the module) or listed in ``invalid_later``. Two
    machines or software stacks under one system label stop it (SystemConflict), as do two
    files of one run of a cell (DuplicateResult)."""
    table = build_table(paths, move_invalid=move_invalid, invalid_later=invalid_later,
                        unstable_cv=unstable_cv, own_system=own_system,
                        own_files=own_files)
    kept = "the previous table is left as it was"
    # Both files are written before either replaces its previous version, so that a full
    # disk leaves the pair as it was, not a new Parquet beside an old CSV.
    targets = [parquet] if csv is None else [parquet, csv]
    with writing(parquet, kept), atomic.temp_paths(*targets, kept=kept) as temps:
        pq.write_table(table, temps[0])
        if csv is not None:
            with writing(csv, kept):
                # CSV has no list type: per-iteration times stay in the Parquet file.
                # Integer columns as pandas' nullable integers: a null among them (a cell
                # kind without the axis) would make a plain column float, and batch_size 8
                # read "8.0".
                frame = table.drop_columns(["times_s"]).to_pandas(
                    types_mapper=_nullable_integers)
                frame.to_csv(temps[1], index=False)
    return table


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m dlbench.aggregate",
        description="Aggregate cell result files into Parquet/CSV. A file that is not a "
                    "valid result (missing, not a result: PARAM's JSON-lines output) becomes "
                    "a failed row naming it, said in one line; no file is moved.")
    parser.add_argument("results", nargs="+", help="cell result JSON files")
    parser.add_argument("--parquet", required=True)
    parser.add_argument("--csv")
    parser.add_argument("--unstable_cv", type=float, default=run_to_run.DEFAULT_UNSTABLE_CV,
                        help="run-to-run CV above which a cell is flagged unstable "
                             "(default %(default)s)")
    args = parser.parse_args(argv)
    try:
        run_to_run.check_threshold(args.unstable_cv)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        # By hand the files are the user's, not a workflow's cells: nothing is moved (the
        # workflow moves an invalid result aside so that its next run measures the cell).
        table = write(args.results, args.parquet, args.csv, move_invalid=False,
                      unstable_cv=args.unstable_cv)
    except (OSError, FilesRefused) as exc:
        print(f"dlbench.aggregate: {exc}", file=sys.stderr)
        return 1
    print(f"{table.num_rows} rows -> {args.parquet}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
