"""hpcrun: HPCToolkit as GVProf uses it (hpcrun, hpcstruct --gpucfg, hpcprof).

GVProf's flow: (a first pass with plain ``-e gpu=nvidia`` whose samples are dropped, then
``hpcstruct --gpucfg no`` of the GPU binaries it saw) the measured hpcrun, hpcstruct of the
interpreter, and hpcprof into a database. The framework's library folder goes first on
``LD_LIBRARY_PATH`` so that hpcrun finds the framework's CUDA libraries. The database has
no table: the report lists its files only.

``gpucfg`` is off by default, as GVProf's FAQ profiles Python applications ("For GPU
binaries, we use hpcstruct --gpucfg no"): with ``yes`` hpcstruct analyses the control flow
of every GPU function and slices backwards, which GVProf's manual calls costly for large
GPU binaries, and a framework's CUDA libraries are large. ``gpucfg: true`` is what GVProf's
``gvprof -cfg`` asks for (fine-grained GPU instruction analysis).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench.profiling.base import Job, Profiler, iterations_words
from dlbench.profiling.commands import Plan, ProfileError, Step
from dlbench.profiling.spec import NUM_BATCHES, NUM_WARMUP_BATCHES, Bool, Int, Knobs, Str, Strings

# Events beyond plain GPU tracing that make GVProf's two-pass flow worth it.
_PLAIN_EVENTS = {"gpu=nvidia"}
_FIND_PACKAGE = ("import importlib.util, os, sys; spec = importlib.util.find_spec(sys.argv[1]); "
                 "print(os.path.dirname(spec.origin) if spec and spec.origin else '')")


def framework_library_dir(python: str, framework: str) -> str:
    """Ask the framework's interpreter where the framework's shared libraries are (without
    importing it: a GPU framework's import is slow)."""
    from dlbench.profiling.run import library_dirs  # run imports the registry

    package, sub = library_dirs(framework)
    try:
        out = subprocess.run([python, "-c", _FIND_PACKAGE, package], capture_output=True,
                             text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProfileError(f"hpcrun: cannot ask {python} where {package} is ({exc})") from None
    folder = out.stdout.strip()
    if out.returncode != 0 or not folder:
        raise ProfileError(f"hpcrun: {python} cannot find the {package} package")
    return os.path.join(folder, sub) if sub else folder


def hpcrun_plan(runner: list[str], out_dir: Path, s: Mapping[str, Any], *,
                library_dir: str | None, python_binary: str,
                ld_library_path: str = "") -> Plan:
    """GVProf's flow (see the module's docstring), as steps."""
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


class Hpcrun(Profiler):
    name = "hpcrun"
    order = 3
    description = "HPCToolkit as GVProf uses it (hpcrun, hpcstruct --gpucfg, hpcprof)."
    settings = (
        Str("binary", "hpcrun", "The hpcrun executable (a name on PATH or a path)."),
        Str("hpcstruct", "hpcstruct", "The hpcstruct executable."),
        Str("hpcprof", "hpcprof", "The hpcprof executable."),
        dataclasses.replace(NUM_BATCHES, default=1),
        NUM_WARMUP_BATCHES,
        Strings("events", ["gpu=nvidia"], "hpcrun -e events (GVProf: [gpu=nvidia,data_flow])."),
        Knobs("knobs", {}, "hpcrun -ck NAME=value (GVProf's HPCRUN_SANITIZER_* knobs)."),
        Bool("prepass", None, "First pass (plain gpu=nvidia, then hpcstruct --gpucfg) "
             "before the measured run (null: when an event is more than gpu=nvidia).",
             nullable=True),
        # Off by default: see the module's docstring.
        Bool("gpucfg", False, "hpcstruct --gpucfg yes|no of the GPU binaries."),
        Int("jobs", 1, "hpcstruct -j.", minimum=1),
        Bool("framework_library_path", True,
             "Put the framework's library folder (torch/lib) first on LD_LIBRARY_PATH."),
    )
    run_facts = ("events",)
    colour = "#b279a2"
    opens_in = ("an HPCToolkit database", "hpcviewer")

    def covers(self, settings: Mapping[str, Any], measured: int | None) -> str:
        return (f"over the whole profiled process: start-up, warm-up and its "
                f"{iterations_words(measured)}")

    def plan(self, job: Job) -> Plan:
        library = None
        if job.settings["framework_library_path"]:
            library = framework_library_dir(job.python,
                                            job.cell["params"].get("framework", "pytorch"))
        # The interpreter's own file for hpcstruct (a virtual env's python is a link).
        interpreter = os.path.realpath(shutil.which(job.python) or job.python)
        return hpcrun_plan(job.runner, job.out_dir, job.settings, library_dir=library,
                           python_binary=interpreter,
                           ld_library_path=os.environ.get("LD_LIBRARY_PATH", ""))


PROFILER = Hpcrun()
