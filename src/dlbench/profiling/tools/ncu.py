"""ncu: Nsight Compute on the kernels inside the runner's NVTX range "measure".

The profiled run exports ``report.ncu-rep``; ``ncu --import ... --csv --page raw`` prints
a header row, a unit row and one row per profiled kernel launch, which becomes
``kernels.parquet``: one column per metric with its unit in the field's metadata, plus
``duration_ns`` from ``gpu__time_duration.sum``. The report sums launches per kernel name.
PARAM's ``--ncu`` log (ncu's details page as CSV) becomes a table too (``ncu_details``).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlbench import nvtx_ranges
from dlbench.profiling.base import Job, Profiler, iterations_words, ranked
from dlbench.profiling.commands import Plan, ProfileError, Step
from dlbench.profiling.spec import (
    NUM_BATCHES,
    NUM_WARMUP_BATCHES,
    Choice,
    Int,
    Options,
    Str,
    Strings,
)

# ncu columns that identify a launch; they stay text even when they look like numbers.
TEXT_COLUMNS = {"Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                "Block Size", "Grid Size", "Device", "CC"}
DURATION = "gpu__time_duration.sum"
_TIME_UNITS_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6,
                  "ms": 1e6, "second": 1e9, "s": 1e9}

# The ncu options that extra_args and the args file may not hold (ncu --help): the profile's
# files are ncu's only output, in the profile's folder, and a config names no code for ncu
# to load (a section folder holds the Python rules ncu runs) nor a file of more options.
EXTRA_ARGS = Options(
    "extra_args", [], "More ncu options, before the application.",
    refused={
        **dict.fromkeys(("-o", "--export", "--log-file", "--section-folder-restore",
                         "--rename-kernels-export", "--rename-kernels-path"),
                        "chooses where ncu writes (a profile's files stay in its folder)"),
        **dict.fromkeys(("--section-folder", "--section-folder-recursive",
                         "--injection-path-32", "--injection-path-64", "--preload-library"),
                        "makes ncu load code from a path"),
        **dict.fromkeys(("--config-file", "--config-file-path"),
                        "makes ncu read more options from a file"),
        **dict.fromkeys(("-i", "--import"), "makes ncu read a report instead of profiling"),
    },
    flags="hvf",  # -h, -v and -f take no value
    whole=("--section", "--rename-kernels"))


def ncu_plan(runner: list[str], out_dir: Path, s: Mapping[str, Any]) -> Plan:
    ncu = s["binary"]
    argv = [ncu, "--target-processes", s["target_processes"]]
    env = {}
    if s["nvtx_include"]:  # a process that cannot push the range fails at once
        env[nvtx_ranges.NEEDED] = "profiling.tools.ncu.nvtx_include: []"
    if s["nvtx_include"] or s["nvtx_exclude"]:
        argv.append("--nvtx")
        for expr in s["nvtx_include"]:
            argv += ["--nvtx-include", expr]
        for expr in s["nvtx_exclude"]:
            argv += ["--nvtx-exclude", expr]
    if s["set"]:
        argv += ["--set", s["set"]]
    for section in s["sections"]:
        argv += ["--section", section]
    metrics = list(s["metrics"])
    if (s["set"] or s["sections"] or metrics) and DURATION not in metrics:
        # Chosen sections or metrics replace ncu's default set, and with it the kernel's
        # duration, which kernels.parquet's duration_ns and the report's table are made of.
        # (Without any, the default set has it: a --metrics would replace that set.)
        metrics.append(DURATION)
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    argv += ["--clock-control", s["clock_control"]]
    if s["launch_skip"] is not None:
        argv += ["--launch-skip", str(s["launch_skip"])]
    if s["launch_count"] is not None:
        argv += ["--launch-count", str(s["launch_count"])]
    argv += args_file_words(s["args_file"]) + s["extra_args"]
    report = out_dir / "report"
    argv += ["--export", str(report), "--force-overwrite", *runner]
    export = [ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw",
              "--print-units", "base"]
    return Plan("ncu", [Step("profiled run", argv, env=env, runs_cell=True),
                        Step("raw page export", export, stdout="raw.csv")],
                [(ncu, "binary")],
                {"report": "report.ncu-rep", "raw": "raw.csv", "kernels": "kernels.parquet"})


def args_file_words(path: str | None) -> list[str]:
    """The args file's options as words, the way PARAM's ``--ncu-args-file`` holds them
    (``shlex``, comments allowed; it never reaches a shell)."""
    if not path:
        return []
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ProfileError(f"ncu: args file {path!r} cannot be read ({exc.strerror}) "
                           "(set profiling.tools.ncu.args_file)") from None
    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:
        raise ProfileError(f"ncu: args file {path!r}: {exc}") from None
    # The file is read only now, so its words meet extra_args's check here.
    problem = EXTRA_ARGS.refusal(words)
    if problem:
        raise ProfileError(f"ncu: args file {path!r}: {problem} "
                           "(set profiling.tools.ncu.args_file)")
    return words


def ncu_kernels(source: Path, dest: Path) -> Any:
    """``raw.csv`` -> ``kernels.parquet``; returns the table."""
    import pyarrow as pa

    from dlbench.profiling.tables import TableError, column, read_csv, write_parquet

    rows = read_csv(source, first_header='"ID"')
    if len(rows) < 2:
        raise TableError(f"{source}: ncu raw CSV needs a header row and a unit row")
    header, units, data = rows[0], rows[1], rows[2:]
    if not data:
        raise TableError(f"{source}: no kernel was profiled (check the NVTX filter and "
                         "launch skip/count)")
    fields, arrays = [], []
    for j, name in enumerate(header):
        values = [row[j] if j < len(row) else "" for row in data]
        unit = units[j] if j < len(units) else ""
        field, array = column(name, values, unit, TEXT_COLUMNS | _nvtx_columns(header))
        fields.append(field)
        arrays.append(array)
    fields.append(pa.field("duration_ns", pa.float64()))
    arrays.append(pa.array(_durations_ns(header, units, data), pa.float64()))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    write_parquet(table, dest)
    return table


# The details page's columns a table needs (``ncu --csv`` without ``--page``, PARAM's log):
# one row per kernel launch and metric; the others (Context, Stream, NVTX ranges, rules)
# vary with ncu's version and options and are kept as they come.
DETAILS_COLUMNS = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")


def ncu_details(source: Path, dest: Path) -> Any:
    """ncu's details page as CSV (PARAM's ``--ncu`` log: ncu's own messages around it) ->
    Parquet, a row per launch and metric: every column as text but ``ID`` (int64), plus
    ``value``, the metric's value as a number where it is one (thousands separators
    read). Returns the table, or None where the log holds no table (ncu profiled no kernel:
    it then prints its messages alone)."""
    import pyarrow as pa

    from dlbench.profiling.tables import (
        TableError,
        is_number,
        parse_number,
        read_csv,
        write_parquet,
    )

    rows = read_csv(source)
    starts = [i for i, row in enumerate(rows) if row[:1] == ["ID"]]
    if not starts:
        return None
    header, data = rows[starts[0]], rows[starts[0] + 1:]
    missing = [name for name in DETAILS_COLUMNS if name not in header]
    if missing:
        raise TableError(f"{source}: not ncu's details CSV (no column {', '.join(missing)})")
    # ncu's messages after the table (==PROF== Disconnected ...) are not rows of it
    data = [row for row in data if len(row) == len(header)]
    fields, arrays = [], []
    for j, name in enumerate(header):
        values = [row[j] for row in data]
        if name == "ID":
            if not all(v.isdigit() for v in values):
                raise TableError(f"{source}: an ID that is not a number")
            array = pa.array([int(v) for v in values], pa.int64())
        else:
            array = pa.array(values, pa.string())
        fields.append(pa.field(name, array.type))
        arrays.append(array)
    j = header.index("Metric Value")
    fields.append(pa.field("value", pa.float64()))
    arrays.append(pa.array([parse_number(row[j]) if is_number(row[j]) else None
                            for row in data], pa.float64()))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    write_parquet(table, dest)
    return table


def _nvtx_columns(header: Sequence[str]) -> set[str]:
    return {name for name in header if "Push/Pop_Range" in name or "Start/Stop_Range" in name}


def _durations_ns(header: Sequence[str], units: Sequence[str],
                  data: Sequence[Sequence[str]]) -> list[float | None]:
    from dlbench.profiling.tables import MISSING, TableError, is_number, parse_number

    if DURATION not in header:
        return [None] * len(data)
    j = header.index(DURATION)
    unit = units[j].strip().lower() if j < len(units) else ""
    if unit not in _TIME_UNITS_NS:
        raise TableError(f"ncu raw CSV: unknown time unit {unit!r} of {DURATION}")
    out = []
    for row in data:
        value = row[j] if j < len(row) else ""
        out.append(None if not is_number(value) or value in MISSING
                   else parse_number(value) * _TIME_UNITS_NS[unit])
    return out


class Ncu(Profiler):
    name = "ncu"
    order = 1
    description = "Nsight Compute; kernels inside the NVTX range 'measure' by default."
    settings = (
        Str("binary", "ncu", "The ncu executable (a name on PATH or a path)."),
        dataclasses.replace(NUM_BATCHES, default=1),  # ncu replays every profiled kernel
        NUM_WARMUP_BATCHES,
        # Kernels launched while the runner's NVTX range "measure" is on the push/pop stack.
        Strings("nvtx_include", ["measure/"], "--nvtx-include expressions ([]: every kernel)."),
        # The L2 flush between an operator's measured calls (--cuda-l2-cache off) is
        # inside "measure" but not the operator's work.
        Strings("nvtx_exclude", [f"{nvtx_ranges.L2_FLUSH}/"],
                "--nvtx-exclude expressions ([]: none)."),
        Str("set", None, "--set (a section set).", nullable=True),
        Strings("sections", [], "--section, one per entry."),
        Strings("metrics", [], "--metrics, joined with commas."),
        Str("args_file", None, "Extra ncu options, one file (PARAM's --ncu-args-file).",
            nullable=True),
        Choice("clock_control", "base", "--clock-control.", choices=("base", "none")),
        Int("launch_skip", None, "--launch-skip.", nullable=True, minimum=0),
        Int("launch_count", None, "--launch-count.", nullable=True, minimum=1),
        Choice("target_processes", "all", "--target-processes.",
               choices=("all", "application-only")),
        EXTRA_ARGS,
    )
    run_facts = ("nvtx_include", "nvtx_exclude", "launch_skip", "launch_count")
    colour = "#76b900"
    opens_in = (".ncu-rep", "Nsight Compute")

    def covers(self, settings: Mapping[str, Any], measured: int | None) -> str:
        if not settings.get("nvtx_include"):
            what = "every kernel of the profiled run (warm-up included)"
        else:
            what = f"the profiled run's {iterations_words(measured)}"
        count = settings.get("launch_count")
        return f"summed over {what}" + (f", {count} launches at most" if count else "")

    def check_cell(self, cell: Any) -> str | None:
        # ncu profiles CUDA kernels only: a CPU cell would run whole under it and fail
        # with "no kernel was profiled"
        if cell.params.get("device") == "gpu":
            return None
        return (f"tool ncu profiles CUDA kernels; cell {cell.id} of study '{cell.study}' "
                f"runs on the {cell.params.get('device')} (add device: gpu to match)")

    def plan(self, job: Job) -> Plan:
        return ncu_plan(job.runner, job.out_dir, job.settings)

    def convert(self, folder: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
        ncu_kernels(folder / "raw.csv", folder / "kernels.parquet")
        return {"kernels": "kernels.parquet"}

    def top_entries(self, directory: Path, tables: Mapping[str, str],
                    n: int) -> list[dict[str, Any]]:
        if "kernels" not in tables:
            return []
        import pyarrow.parquet as pq

        kernels: dict[str, dict[str, Any]] = {}
        table = pq.read_table(directory / tables["kernels"], columns=["Kernel Name", "duration_ns"])
        rows = table.to_pylist()
        if all(row["duration_ns"] is None for row in rows):
            return []  # no duration collected: no ranking of zeros (the files stay linked)
        for row in rows:
            entry = kernels.setdefault(row["Kernel Name"], {
                "name": row["Kernel Name"], "calls": 0, "time_s": 0.0, "time_kind": "kernel"})
            entry["calls"] += 1
            entry["time_s"] += (row["duration_ns"] or 0.0) / 1e9
        return ranked(list(kernels.values()), n)


PROFILER = Ncu()
