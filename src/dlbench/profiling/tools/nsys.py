"""nsys: Nsight Systems, the capture limited to the runner's NVTX range "measure".

``nsys stats --format csv`` writes one CSV per report (``stats_<report>.csv``), none for a
report without data; each becomes ``<report>.parquet`` with nsys's column names. A profile
where no report has data fails: nothing was captured. The report ranks kernels by total
time (``cuda_gpu_kern_sum``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import nvtx_ranges
from dlbench.profiling.base import Job, Profiler, iterations_words, ranked
from dlbench.profiling.commands import Plan, ProfileError, Step
from dlbench.profiling.spec import (
    NUM_BATCHES,
    NUM_WARMUP_BATCHES,
    Choice,
    Names,
    Options,
    Str,
    Strings,
)

KERNELS = "cuda_gpu_kern_sum"  # the report the summary's top kernels come from
_TEXT_COLUMNS = {"Name", "Range", "Style", "Operation"}

# The nsys profile options that extra_args may not hold (the user guide's profile switches):
# the report goes in the profile's folder, a config names no code or library for nsys to run
# nor a file of more switches, and the profiled process's environment is the job's (its
# GPUs). --export and --stats stay: they write beside --output, in the profile's folder.
EXTRA_ARGS = Options(
    "extra_args", [], "More nsys profile options, before the application.",
    refused={
        **dict.fromkeys(("-o", "--output", "--auto-report-name", "--ib-net-info-output"),
                        "chooses where nsys writes (a profile's files stay in its folder)"),
        **dict.fromkeys(("--after-collection-start", "--after-report-ready",
                         "--gds-libs-path"), "makes nsys run or load code from a path"),
        "--command-file": "makes nsys read more switches from a file",
        **dict.fromkeys(("-e", "--env-var", "-n", "--inherit-environment"),
                        "sets the profiled process's environment"),
    })


def nsys_plan(runner: list[str], out_dir: Path, s: Mapping[str, Any]) -> Plan:
    nsys = s["binary"]
    report = out_dir / "report"
    argv = [nsys, "profile", f"--trace={','.join(s['trace'])}"]
    env = {}
    if s["capture_range"] != "none":
        argv += [f"--capture-range={s['capture_range']}",
                 f"--capture-range-end={s['capture_range_end']}"]
    if s["capture_range"] == "nvtx":
        argv.append(f"--nvtx-capture={s['nvtx_capture']}")
        # torch.cuda.nvtx pushes plain (unregistered) strings; nsys matches only registered
        # ones unless told otherwise.
        env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
        # A process that cannot push the range fails at once rather than run uncaptured.
        env[nvtx_ranges.NEEDED] = "profiling.tools.nsys.capture_range: none"
    # Ours last: where a later option wins, it is dlbench's.
    argv += [*s["extra_args"], f"--output={report}", "--force-overwrite=true", *runner]
    stats = [nsys, "stats", "--report", ",".join(s["reports"]), "--format", "csv",
             "--output", str(out_dir / "stats"), "--force-export=true", f"{report}.nsys-rep"]
    artifacts = {"report": "report.nsys-rep"}
    artifacts.update({name: f"{name}.parquet" for name in s["reports"]})
    return Plan("nsys", [Step("profiled run", argv, env=env, runs_cell=True),
                         Step("stats export", stats)],
                [(nsys, "binary")], artifacts)


def nsys_report(source: Path, dest: Path) -> Any:
    """One ``nsys stats`` CSV -> Parquet; returns the table."""
    import pyarrow as pa

    from dlbench.profiling.tables import TableError, column, read_csv, write_parquet

    rows = read_csv(source)
    if not rows:
        raise TableError(f"{source}: empty nsys stats report")
    header, data = rows[0], rows[1:]
    fields, arrays = [], []
    for j, name in enumerate(header):
        field, array = column(name, [row[j] if j < len(row) else "" for row in data], None,
                              _TEXT_COLUMNS)
        fields.append(field)
        arrays.append(array)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    write_parquet(table, dest)
    return table


class Nsys(Profiler):
    name = "nsys"
    order = 2
    description = "Nsight Systems; capture limited to the NVTX range 'measure' by default."
    settings = (
        Str("binary", "nsys", "The nsys executable (a name on PATH or a path)."),
        NUM_BATCHES,
        NUM_WARMUP_BATCHES,
        Strings("trace", ["cuda", "nvtx"], "--trace, joined with commas.", required=True),
        # Not cudaProfilerApi: no runner calls cudaProfilerStart, so that capture would
        # never open.
        Choice("capture_range", "nvtx", "--capture-range (none: the whole run).",
               choices=("nvtx", "none")),
        Str("nvtx_capture", "measure", "--nvtx-capture: the NVTX range captured."),
        Str("capture_range_end", "stop", "--capture-range-end."),
        Names("reports", ["cuda_gpu_kern_sum", "nvtx_sum"],
              "nsys stats reports, each a Parquet table.", required=True),
        EXTRA_ARGS,
    )
    run_facts = ("capture_range", "nvtx_capture", "capture_range_end")
    colour = "#4c78a8"
    opens_in = (".nsys-rep", "Nsight Systems")

    def covers(self, settings: Mapping[str, Any], measured: int | None) -> str:
        if settings.get("capture_range") == "none":
            return "summed over the whole profiled run (start-up and warm-up included)"
        return (f"summed over the first NVTX range {settings.get('nvtx_capture')!r}: a model "
                f"cell's {iterations_words(measured)}, the first piece of a cell timed in "
                "pieces (an operator input, a message size)")

    def plan(self, job: Job) -> Plan:
        return nsys_plan(job.runner, job.out_dir, job.settings)

    def convert(self, folder: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = {}
        for report in settings.get("reports", ()):
            source = folder / f"stats_{report}.csv"
            if source.is_file():  # nsys writes no file for a report without data
                nsys_report(source, folder / f"{report}.parquet")
                made[report] = f"{report}.parquet"
        return made

    def finish(self, folder: Path, settings: Mapping[str, Any], tables: dict[str, Any]) -> None:
        if not tables:
            raise ProfileError(f"nsys: no report has data ({', '.join(settings['reports'])}): "
                               "nothing was captured (is the NVTX range "
                               f"'{settings['nvtx_capture']}' pushed?)")

    def top_entries(self, directory: Path, tables: Mapping[str, str],
                    n: int) -> list[dict[str, Any]]:
        if KERNELS not in tables:
            return []
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        table = pq.read_table(directory / tables[KERNELS])
        names = table.column("Name").to_pylist()
        calls = table.column("Instances").to_pylist()
        totals = pc.cast(table.column("Total Time (ns)"), "float64").to_pylist()
        return ranked([{"name": name, "calls": count, "time_s": (total or 0.0) / 1e9,
                        "time_kind": "kernel"}
                       for name, count, total in zip(names, calls, totals, strict=True)], n)


PROFILER = Nsys()
