"""Run one profile job: a tool on one cell, in its own folder, then its tables.

``python -m dlbench.profiling run --tool ncu --cell JSON --out_dir DIR --python PY`` checks
that the tool's executables exist, runs the plan's steps (argument lists, no shell), checks
that the profiled cell finished, converts the exports to Parquet and writes
``profile.json`` (the workflow's target, ``"status": "ok"``) last. Any failure is one line
naming the tool, written to stderr and to ``error.txt`` in the folder, and the exit code is
1: only this job fails, the measurements and other profiles are not touched. With
``--record-failure`` (the workflow's way) the failure is a result like a failed cell: the
manifest is written with ``"status": "failed"`` and ``"error"``, and the exit code is 0, so
that nothing waiting on the profile (the report) is held back.
"""

from __future__ import annotations

import datetime as _dt
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from dlbench import gpus, launch, subproc
from dlbench import result as R
from dlbench.profiling import commands, tables
from dlbench.profiling.commands import ProfileError, Step
from dlbench.profiling.config import MANIFEST

ERROR_FILE = "error.txt"
# Where a framework keeps its shared libraries, relative to its package folder.
LIBRARY_DIRS = {"pytorch": ("torch", "lib"), "mxnet": ("mxnet", "")}
_FIND_PACKAGE = ("import importlib.util, os, sys; spec = importlib.util.find_spec(sys.argv[1]); "
                 "print(os.path.dirname(spec.origin) if spec and spec.origin else '')")


def framework_library_dir(python: str, framework: str) -> str:
    """Ask the framework's interpreter where the framework's shared libraries are (without
    importing it: a GPU framework's import is slow)."""
    package, sub = LIBRARY_DIRS.get(framework, LIBRARY_DIRS["pytorch"])
    try:
        out = subprocess.run([python, "-c", _FIND_PACKAGE, package], capture_output=True,
                             text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProfileError(f"hpcrun: cannot ask {python} where {package} is ({exc})") from None
    folder = out.stdout.strip()
    if out.returncode != 0 or not folder:
        raise ProfileError(f"hpcrun: {python} cannot find the {package} package")
    return os.path.join(folder, sub) if sub else folder


def build_plan(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
               settings: dict[str, Any], data_dir: str | None) -> commands.Plan:
    runner = commands.runner_argv(cell, out_dir, python, tool, settings, data_dir)
    if tool == "torch":
        return commands.torch_plan(runner, out_dir, settings)
    if tool == "ncu":
        return commands.ncu_plan(runner, out_dir, settings)
    if tool == "nsys":
        return commands.nsys_plan(runner, out_dir, settings)
    library = None
    if settings["framework_library_path"]:
        library = framework_library_dir(python, cell["params"].get("framework", "pytorch"))
    interpreter = os.path.realpath(shutil.which(python) or python)
    return commands.hpcrun_plan(runner, out_dir, settings, library_dir=library,
                                python_binary=interpreter,
                                ld_library_path=os.environ.get("LD_LIBRARY_PATH", ""))


def run_step(tool: str, step: Step, out_dir: Path, env: dict[str, str] | None = None) -> None:
    for pattern in step.remove_first:
        for path in glob.glob(str(out_dir / pattern)):
            os.unlink(path)
    print(f"dlbench.profiling: {tool}: {step.name}: {' '.join(step.argv)}", file=sys.stderr,
          flush=True)
    env = {**os.environ, **(env or {}), **step.env}
    if step.stdout is None:
        rc, tail = subproc.run_tee(step.argv, env=env)
    else:
        with open(out_dir / step.stdout, "w") as sink:
            try:
                proc = subprocess.run(step.argv, env=env, stdout=sink, stderr=subprocess.PIPE,
                                      text=True, errors="replace")
                rc, tail = proc.returncode, proc.stderr.splitlines()
                sys.stderr.write(proc.stderr)
            except OSError as exc:
                rc, tail = 127, [f"cannot start {step.argv[0]}: {exc.strerror}"]
    if rc != 0:
        why = subproc.last_error_line(tail) or "no error output"
        raise ProfileError(f"{tool}: {step.name} ({Path(step.argv[0]).name}) exited with "
                           f"code {rc}: {why}")


def check_cell_result(tool: str, out_dir: Path) -> dict[str, Any]:
    path = out_dir / commands.RESULT
    if not path.is_file():
        raise ProfileError(f"{tool}: the profiled run wrote no result ({path})")
    try:
        res = R.read(path)
    except ValueError as exc:
        raise ProfileError(f"{tool}: {exc}") from None
    if res["status"] != "ok":
        raise ProfileError(f"{tool}: the profiled cell ended {res['status']}: {res['error']}")
    return res


def files_of(folder: Path, limit: int = 500) -> list[str]:
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return files[:limit]


def profile(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
            settings: dict[str, Any], data_dir: str | None = None) -> dict[str, Any]:
    """Run the job; return the manifest written to ``out_dir/profile.json``."""
    if out_dir.exists():
        shutil.rmtree(out_dir)  # a profile of an earlier run must not mix with this one
    out_dir.mkdir(parents=True)
    started = R.now_iso()
    plan = build_plan(tool, cell, out_dir, python, settings, data_dir)
    missing = commands.missing_binary(plan)
    if missing:
        raise ProfileError(missing)
    try:
        # A GPU cell's profile holds its GPUs the way its measurement does (the launcher's
        # locks and CUDA_VISIBLE_DEVICES).
        with launch.assigned_gpus(cell, None) as gpu_env:
            for step in plan.steps:
                run_step(tool, step, out_dir, gpu_env)
                if step.runs_cell:
                    check_cell_result(tool, out_dir)
    except gpus.GpuAllocationError as exc:
        raise ProfileError(f"{tool}: {exc}") from None
    try:
        made = tables.convert(tool, out_dir, settings.get("reports", ()))
    except tables.TableError as exc:
        raise ProfileError(f"{tool}: {exc}") from None
    if tool == "nsys" and not made:
        raise ProfileError(f"nsys: no report has data ({', '.join(settings['reports'])}): "
                           "nothing was captured (is the NVTX range "
                           f"'{settings['nvtx_capture']}' pushed?)")
    manifest = {
        **_identity(tool, cell, settings), "status": "ok", "error": None,
        "started_at": started, "finished_at": _now(),
        "commands": [{"name": s.name, "argv": s.argv, "env": s.env} for s in plan.steps],
        "artifacts": {name: rel for name, rel in plan.artifacts.items()
                      if (out_dir / rel).exists()},
        "tables": made, "files": files_of(out_dir),
    }
    write_manifest(out_dir, manifest)
    return manifest


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _identity(tool: str, cell: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "tool": tool, "study": cell.get("study"),
            "cell_id": cell.get("cell_id"), "cell": cell.get("params"), "settings": settings}


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> Path:
    """``profile.json``, atomically: the workflow's target must never be half written."""
    path = out_dir / MANIFEST
    R.write_atomic(path, json.dumps(manifest, indent=1) + "\n")
    return path


def write_failure(tool: str, cell: dict[str, Any], out_dir: Path, settings: dict[str, Any],
                   line: str) -> dict[str, Any]:
    """The manifest of a profile that failed: its one-line error and what it left behind."""
    manifest = {
        **_identity(tool, cell, settings), "status": "failed", "error": line,
        "finished_at": _now(), "artifacts": {}, "tables": {},
        "files": files_of(out_dir) if out_dir.is_dir() else [],
    }
    write_manifest(out_dir, manifest)
    return manifest


def _error_line(tool: str, exc: Exception) -> str:
    if isinstance(exc, ProfileError):
        return str(exc)
    # A disk or permission problem of the profile folder: still one line naming the file.
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    return f"{tool}: {where}{getattr(exc, 'strerror', None) or exc}"


def main(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
         settings: dict[str, Any], data_dir: str | None, *,
         record_failure: bool = False) -> int:
    """Run the profile job; 0 when it succeeded, or failed and ``record_failure`` recorded
    it in the manifest; 1 when it failed."""
    try:
        manifest = profile(tool, cell, out_dir, python, settings, data_dir)
    except (ProfileError, OSError) as exc:
        if isinstance(exc, OSError) and not record_failure:
            raise
        line = _error_line(tool, exc)
        out_dir.mkdir(parents=True, exist_ok=True)
        R.write_atomic(out_dir / ERROR_FILE, line + "\n")
        if record_failure:
            write_failure(tool, cell, out_dir, settings, line)
        print(line, file=sys.stderr)  # last: the job log's last line is the reason
        return 0 if record_failure else 1
    print(f"dlbench.profiling: {tool}: {len(manifest['files'])} files in {out_dir}",
          file=sys.stderr)
    return 0
