"""The command lines of a profile job, as argument lists (nothing goes through a shell).

A plan is the ordered steps of one tool on one cell: the profiled run of the cell's runner
(the launcher's own command line, with the profile's iteration counts) under the tool,
then the tool's exports. Settings come from ``config.settings``; values are passed as
single arguments, never split or interpreted, except the ncu args file, which holds
command-line options the way PARAM's ``--ncu-args-file`` does and is split into words
(``shlex``) without ever reaching a shell.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench import launch

RESULT = "result.json"  # the profiled run's own result, beside the profile
# Events beyond plain GPU tracing that make GVProf's two-pass flow worth it.
_PLAIN_EVENTS = {"gpu=nvidia"}


class ProfileError(RuntimeError):
    """A profile job's failure, said in one line that starts with the tool's name."""


@dataclass
class Step:
    name: str  # what the step does, for messages
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the job's environment
    stdout: str | None = None  # file in the profile folder that receives stdout
    remove_first: list[str] = field(default_factory=list)  # globs deleted before the step
    runs_cell: bool = False  # the step that runs the cell (its result is checked)


@dataclass
class Plan:
    tool: str
    steps: list[Step]
    binaries: list[tuple[str, str]]  # (binary, config key that sets it)
    artifacts: dict[str, str]  # name -> path in the profile folder


def profiled_params(cell: dict[str, Any], tool: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The cell's parameters with the profile's iteration counts."""
    params = dict(cell["params"])
    measured, warmup = (("num_batches", "num_warmup_batches") if cell["kind"] == "model"
                        else ("iterations", "warmup"))
    if tool == "torch":
        params[measured] = settings["wait"] + settings["warmup"] + settings["active"]
    elif settings.get("num_batches") is not None:
        params[measured] = settings["num_batches"]
    if settings.get("num_warmup_batches") is not None:
        params[warmup] = settings["num_warmup_batches"]
    return params


def runner_argv(cell: dict[str, Any], out_dir: Path, python: str, tool: str,
                settings: dict[str, Any], data_dir: str | None = None) -> list[str]:
    """The launcher's command line of the cell, writing its result into the profile folder."""
    profiled = {**cell, "params": profiled_params(cell, tool, settings)}
    # Every runner has a resource monitor; it stays off while a tool profiles.
    return [*launch.runner_command(profiled, out_dir / RESULT, python, data_dir),
            "--monitor_interval_ms=0"]


def torch_plan(runner: list[str], out_dir: Path, s: dict[str, Any]) -> Plan:
    argv = [*runner, f"--torch_profile_dir={out_dir}",
            f"--torch_profile_schedule={s['wait']},{s['warmup']},{s['active']}"]
    return Plan("torch", [Step("profiled run", argv, runs_cell=True)], [],
                {"trace": "trace.json", "operators": "operators.parquet"})


def ncu_plan(runner: list[str], out_dir: Path, s: dict[str, Any]) -> Plan:
    ncu = s["binary"]
    argv = [ncu, "--target-processes", s["target_processes"]]
    if s["nvtx_include"]:
        argv.append("--nvtx")
        for expr in s["nvtx_include"]:
            argv += ["--nvtx-include", expr]
    if s["set"]:
        argv += ["--set", s["set"]]
    for section in s["sections"]:
        argv += ["--section", section]
    if s["metrics"]:
        argv += ["--metrics", ",".join(s["metrics"])]
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
    return Plan("ncu", [Step("profiled run", argv, runs_cell=True),
                        Step("raw page export", export, stdout="raw.csv")],
                [(ncu, "binary")],
                {"report": "report.ncu-rep", "raw": "raw.csv", "kernels": "kernels.parquet"})


def args_file_words(path: str | None) -> list[str]:
    if not path:
        return []
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ProfileError(f"ncu: args file {path!r} cannot be read ({exc.strerror}) "
                           "(set profiling.tools.ncu.args_file)") from None
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise ProfileError(f"ncu: args file {path!r}: {exc}") from None


def nsys_plan(runner: list[str], out_dir: Path, s: dict[str, Any]) -> Plan:
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
    argv += [f"--output={report}", "--force-overwrite=true", *s["extra_args"], *runner]
    stats = [nsys, "stats", "--report", ",".join(s["reports"]), "--format", "csv",
             "--output", str(out_dir / "stats"), "--force-export=true", f"{report}.nsys-rep"]
    artifacts = {"report": "report.nsys-rep"}
    artifacts.update({name: f"{name}.parquet" for name in s["reports"]})
    return Plan("nsys", [Step("profiled run", argv, env=env, runs_cell=True),
                         Step("stats export", stats)],
                [(nsys, "binary")], artifacts)


def hpcrun_plan(runner: list[str], out_dir: Path, s: dict[str, Any], *,
                library_dir: str | None, python_binary: str,
                ld_library_path: str = "") -> Plan:
    """GVProf's flow: (first pass: hpcrun -e gpu=nvidia, drop its samples, hpcstruct
    --gpucfg on the measurements), the measured hpcrun, hpcstruct of the interpreter, and
    hpcprof into a database."""
    hpcrun, hpcstruct, hpcprof = s["binary"], s["hpcstruct"], s["hpcprof"]
    measurements, database = out_dir / "measurements", out_dir / "database"
    struct = out_dir / f"{Path(python_binary).name}.hpcstruct"
    env = {}
    if library_dir:
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (library_dir, ld_library_path) if p)
    jobs = ["-j", str(s["jobs"])]
    gpu_struct = [hpcstruct, "--gpucfg", "yes" if s["gpucfg"] else "no", *jobs, str(measurements)]
    prepass = s["prepass"]
    if prepass is None:
        prepass = any(event not in _PLAIN_EVENTS for event in s["events"])
    steps = []
    if prepass:
        steps += [
            Step("first pass (GPU binaries)",
                 [hpcrun, "-e", "gpu=nvidia", "-o", str(measurements), *runner], env=env),
            Step("hpcstruct of the GPU binaries", gpu_struct,
                 remove_first=["measurements/*.hpcrun"]),
        ]
    measure = [hpcrun]
    for event in s["events"]:
        measure += ["-e", event]
    for name, value in s["knobs"].items():
        measure += ["-ck", f"{name}={value}"]
    steps.append(Step("profiled run", [*measure, "-o", str(measurements), *runner], env=env,
                      runs_cell=True))
    if not prepass:
        steps.append(Step("hpcstruct of the GPU binaries", gpu_struct))
    steps += [
        Step("hpcstruct of the interpreter", [hpcstruct, *jobs, "-o", str(struct), python_binary]),
        Step("hpcprof", [hpcprof, "-S", str(struct), "-o", str(database), str(measurements)]),
    ]
    return Plan("hpcrun", steps, [(hpcrun, "binary"), (hpcstruct, "hpcstruct"),
                                  (hpcprof, "hpcprof")],
                {"database": "database", "measurements": "measurements"})


def missing_binary(plan: Plan) -> str | None:
    """The one-line error for the first executable of the plan that cannot be found."""
    for binary, key in plan.binaries:
        if shutil.which(binary) is None:
            where = "is not an executable file" if "/" in binary else "not found on PATH"
            return (f"{plan.tool}: binary '{binary}' {where} "
                    f"(set profiling.tools.{plan.tool}.{key})")
    return None
