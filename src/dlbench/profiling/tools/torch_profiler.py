"""torch: torch.profiler over a few measured iterations, inside the PyTorch runner.

The runner's hook (``dlbench.profiling.torch_profiler``, which the runner imports without
this registry) writes ``trace.json`` and ``operators.json``; the driver turns the operator
table into ``operators.parquet``, and the report ranks operators by self time (device time
when the profile has device activity, else CPU time).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench.profiling.base import Job, Profiler, ranked
from dlbench.profiling.commands import Plan, Step
from dlbench.profiling.spec import NUM_WARMUP_BATCHES, Int

# operators.parquet's columns (pyarrow type names): the hook's rows, times in µs.
OPERATOR_COLUMNS = (
    ("name", "string"), ("calls", "int64"),
    ("self_cpu_time_us", "float64"), ("cpu_time_total_us", "float64"),
    ("self_device_time_us", "float64"), ("device_time_total_us", "float64"),
    ("flops", "float64"),
    ("self_cpu_memory_bytes", "int64"), ("cpu_memory_bytes", "int64"),
    ("self_device_memory_bytes", "int64"), ("device_memory_bytes", "int64"),
    ("is_user_annotation", "bool"),
)


def operator_schema() -> Any:
    """``OPERATOR_COLUMNS`` as a pyarrow schema (pyarrow: the driver's only)."""
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(kind)) for name, kind in OPERATOR_COLUMNS])


def torch_operators(source: Path, dest: Path) -> Any:
    """The hook's ``operators.json`` -> Parquet; returns the table."""
    import pyarrow as pa

    from dlbench.profiling.tables import TableError, write_parquet

    try:
        doc = json.loads(source.read_text())
        rows = doc["operators"]
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise ValueError("'operators' is not a list of rows")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TableError(f"{source}: not a torch.profiler operator table ({exc})") from None
    meta = {"schedule": json.dumps(doc.get("schedule")), "device": str(doc.get("device"))}
    try:
        table = pa.Table.from_pylist(rows, schema=operator_schema().with_metadata(meta))
    except (pa.ArrowException, TypeError, AttributeError) as exc:  # a row of other types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TableError(f"{source}: not a torch.profiler operator table ({first})") from None
    write_parquet(table, dest)
    return table


class TorchProfiler(Profiler):
    name = "torch"
    order = 0
    description = "torch.profiler over wait+warmup+active measured iterations."
    settings = (
        Int("wait", 1, "Measured iterations before the profiler records.", minimum=0),
        Int("warmup", 1, "Iterations the profiler warms up over, not recorded.", minimum=0),
        Int("active", 3, "Iterations recorded.", minimum=1),
        NUM_WARMUP_BATCHES,
    )
    run_facts = ("wait", "warmup", "active")
    top_kind = "operators"
    colour = "#ee4c2c"
    opens_in = ("trace.json", "Perfetto or chrome://tracing")

    def check_cell(self, cell: Any) -> str | None:
        # The hook lives in the PyTorch runner; other runners have no such flag.
        framework = cell.params.get("framework")
        if cell.kind == "model" and framework == "pytorch":
            return None
        hint = ("add framework: pytorch to match" if framework != "pytorch" else
                "match its model cells (nsys and hpcrun profile any cell, ncu a GPU one; "
                "python -m dlbench.ops --profile traces an op config by hand)")
        return (f"tool torch profiles PyTorch model cells; cell {cell.id} of study "
                f"'{cell.study}' is a {framework} {cell.kind} cell ({hint})")

    def covers(self, settings: Mapping[str, Any], measured: int | None) -> str:
        active = settings.get("active")
        return (f"summed over the {active} iteration{'' if active == 1 else 's'} the profiler "
                "recorded (its schedule's active steps)")

    def iterations(self, settings: Mapping[str, Any]) -> tuple[int | None, int | None]:
        # Exactly the schedule's iterations: the profiler's last step is the run's last.
        return (settings["wait"] + settings["warmup"] + settings["active"],
                settings.get("num_warmup_batches"))

    def plan(self, job: Job) -> Plan:
        s = job.settings
        argv = [*job.runner, f"--torch_profile_dir={job.out_dir}",
                f"--torch_profile_schedule={s['wait']},{s['warmup']},{s['active']}"]
        return Plan(self.name, [Step("profiled run", argv, runs_cell=True)], [],
                    {"trace": "trace.json", "operators": "operators.parquet"})

    def convert(self, folder: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
        torch_operators(folder / "operators.json", folder / "operators.parquet")
        return {"operators": "operators.parquet"}

    def top_entries(self, directory: Path, tables: Mapping[str, str],
                    n: int) -> list[dict[str, Any]]:
        if "operators" not in tables:
            return []
        import pyarrow.parquet as pq

        table = pq.read_table(directory / tables["operators"])
        rows = [r for r in table.to_pylist() if not r["is_user_annotation"]]
        on_device = any((r["self_device_time_us"] or 0) > 0 for r in rows)
        key = "self_device_time_us" if on_device else "self_cpu_time_us"
        return ranked([{"name": r["name"], "calls": r["calls"],
                        "time_s": (r[key] or 0.0) / 1e6,
                        "time_kind": "self device" if on_device else "self CPU",
                        "flops": r["flops"]} for r in rows], n)


PROFILER = TorchProfiler()
