"""Run one profile job: a tool on one cell, in its own folder, then its tables.

Two halves, so that the profiled run happens in the cell's framework environment (its
container under --use-singularity, which has no pyarrow in the MXNet image) and the tables
are made by the driver:

* ``capture`` (``python -m dlbench.profiling capture``, in the framework's environment):
  checks that the tool's executables exist, runs the plan's steps (argument lists, no
  shell), checks that the profiled cell finished and writes ``capture.json`` last;
* ``finish`` (``python -m dlbench.profiling finish``, the driver): converts the exports to
  Parquet and writes ``profile.json`` (the workflow's target, ``"status": "ok"``).

``python -m dlbench.profiling run`` does both in one process. Any failure is one line
naming the tool, written to stderr and to ``error.txt`` in the folder, and the exit code is
1: only this job fails, the measurements and other profiles are not touched. With
``--record-failure`` (the workflow's way) the failure is a result like a failed cell: the
record is written with ``"status": "failed"`` and ``"error"`` (``capture.json``, which
``finish`` carries into ``profile.json``), and the exit code is 0, so that nothing waiting
on the profile (the report) is held back.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench import frameworks, gpus, launch, subproc
from dlbench import result as R
from dlbench.profiling import commands, registry
from dlbench.profiling.base import Job
from dlbench.profiling.commands import ProfileError, Step
from dlbench.profiling.config import CAPTURE, ERROR_FILE, MANIFEST


def library_dirs(framework: str) -> tuple[str, str]:
    """The package whose folder holds ``framework``'s shared libraries, and the folder in
    it ("" for the package's own), as its plug-in says (dlbench.frameworks); an unknown
    framework is taken as PyTorch."""
    if framework not in frameworks.names():
        framework = "pytorch"
    return frameworks.get(framework).library_package


def build_plan(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
               settings: dict[str, Any], data_dir: str | None) -> commands.Plan:
    profiler = registry.get(tool)
    runner = commands.runner_argv(cell, out_dir, python, profiler.iterations(settings),
                                  data_dir)
    return profiler.plan(Job(cell, out_dir, python, settings, runner))


def run_step(tool: str, step: Step, out_dir: Path, env: dict[str, str] | None = None,
             timeout_s: float | None = None) -> None:
    """One step of the plan; ``timeout_s``: the step's process group is killed after it
    (the cell's study's limit, as its measurement's), a failure naming it."""
    for pattern in step.remove_first:
        for path in glob.glob(str(out_dir / pattern)):
            os.unlink(path)
    print(f"dlbench.profiling: {tool}: {step.name}: {' '.join(step.argv)}", file=sys.stderr,
          flush=True)
    env = {**os.environ, **(env or {}), **step.env}
    timed_out = False
    if step.stdout is None:
        ran = subproc.supervised(step.argv, env=env, timeout_s=timeout_s)
        rc, tail, timed_out = ran.rc, ran.tail, ran.timed_out
    else:
        with open(out_dir / step.stdout, "w") as sink:
            try:
                proc = subprocess.run(step.argv, env=env, stdout=sink, stderr=subprocess.PIPE,
                                      text=True, errors="replace", timeout=timeout_s)
                rc, tail = proc.returncode, proc.stderr.splitlines()
                sys.stderr.write(proc.stderr)
            except subprocess.TimeoutExpired:
                rc, tail, timed_out = -9, [], True
            except OSError as exc:
                rc, tail = 127, [f"cannot start {step.argv[0]}: {exc.strerror}"]
    if timed_out:
        raise ProfileError(f"{tool}: {step.name} ({Path(step.argv[0]).name}) stopped after "
                           f"{timeout_s:g} s (the study's timeout_s)")
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


def mark_profiled(tool: str, cell: dict[str, Any], settings: dict[str, Any], out_dir: Path,
                  res: dict[str, Any]) -> None:
    """Write into the profiled run's own result (``res``, read from ``out_dir``) that a
    tool profiled it, and how: ``extra.profiled`` holds the tool, its settings that say what
    it recorded and the measurement's iteration counts (``cell_<axis>``), since the result's
    ``cell`` holds the profile's. Facts the runner wrote there itself are kept. Done after
    the run: nothing of it is timed."""
    facts = {"tool": tool, **{name: settings[name] for name in registry.get(tool).run_facts}}
    for key in commands.iteration_keys(cell["kind"]):
        facts[f"cell_{key}"] = cell["params"].get(key)
    res["extra"]["profiled"] = {**facts, **(res["extra"].get("profiled") or {})}
    R.write(res, out_dir / commands.RESULT)


def files_of(folder: Path, limit: int = 500) -> list[str]:
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return files[:limit]


# What a profile writes into its folder: a folder holding none of them is not a profile's.
PROFILE_FILES = (CAPTURE, MANIFEST, ERROR_FILE, commands.RESULT)


class NotAProfileFolder(ProfileError):
    """--out_dir names a folder with files of its own: nothing is written there."""


def check_profile_folder(out_dir: Path) -> None:
    """Refuse, in one line, a folder that a profile would replace but did not write (a
    hand run's --out_dir naming results/, or ~): a profile starts by removing its folder."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise NotAProfileFolder(f"{out_dir}: not a profile's folder (a link or a file); "
                                "give another --out_dir")
    if (out_dir.is_dir() and next(out_dir.iterdir(), None) is not None
            and not any((out_dir / name).exists() for name in PROFILE_FILES)):
        raise NotAProfileFolder(
            f"{out_dir}: holds files but no profile (none of {', '.join(PROFILE_FILES)}), "
            "and a profile replaces its folder whole; give another --out_dir")


def capture(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
            settings: dict[str, Any], data_dir: str | None = None,
            timeout_s: float | None = None) -> dict[str, Any]:
    """The profiled run, in the cell's framework environment, each step stopped after
    ``timeout_s``; returns the record written to ``out_dir/capture.json``."""
    check_profile_folder(out_dir)
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
                run_step(tool, step, out_dir, gpu_env, timeout_s)
                if step.runs_cell:
                    mark_profiled(tool, cell, settings, out_dir,
                                  check_cell_result(tool, out_dir))
    except gpus.GpuAllocationError as exc:
        raise ProfileError(f"{tool}: {exc}") from None
    record = {
        **_identity(tool, cell, settings), "status": "ok", "error": None,
        "started_at": started, "captured_at": R.now_iso(),
        "commands": [{"name": s.name, "argv": s.argv, "env": s.env} for s in plan.steps],
        "artifacts": dict(plan.artifacts),
    }
    write_record(out_dir / CAPTURE, record)
    return record


def read_capture(tool: str, out_dir: Path) -> dict[str, Any]:
    path = out_dir / CAPTURE
    try:
        record = json.loads(path.read_text())
        if record["status"] not in ("ok", "failed") or record["tool"] != tool:
            raise ValueError(f"status {record['status']!r}, tool {record['tool']!r}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProfileError(f"{tool}: {path}: no capture record of this tool ({exc})") from None
    return record


def finish(tool: str, out_dir: Path) -> dict[str, Any]:
    """Tables of a captured profile, on the driver; returns the manifest written to
    ``out_dir/profile.json``. A recorded capture failure raises ``CaptureFailed``."""
    from dlbench.profiling import tables  # pyarrow: the driver's, not the framework's

    record = read_capture(tool, out_dir)
    if record["status"] != "ok":
        raise CaptureFailed(record)
    settings = record["settings"]
    profiler = registry.get(tool)
    try:
        made = profiler.convert(out_dir, settings)
    except tables.TableError as exc:
        raise ProfileError(f"{tool}: {exc}") from None
    profiler.finish(out_dir, settings, made)
    manifest = {
        **record, "finished_at": R.now_iso(),
        "artifacts": {name: rel for name, rel in record["artifacts"].items()
                      if (out_dir / rel).exists()},
        "tables": made, "files": files_of(out_dir),
    }
    write_manifest(out_dir, manifest)
    return manifest


def profile(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
            settings: dict[str, Any], data_dir: str | None = None) -> dict[str, Any]:
    """Capture and finish in one process; returns the manifest (``profile.json``)."""
    capture(tool, cell, out_dir, python, settings, data_dir)
    return finish(tool, out_dir)


class CaptureFailed(Exception):
    """``finish`` of a profile whose capture recorded a failure."""

    def __init__(self, record: dict[str, Any]):
        super().__init__(record.get("error") or "capture failed")
        self.record = record


def _identity(tool: str, cell: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "tool": tool, "study": cell.get("study"),
            "cell_id": cell.get("cell_id"), "cell": cell.get("params"), "settings": settings}


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """``capture.json`` or ``profile.json``, atomically: a workflow target is never half
    written."""
    R.write_atomic(path, json.dumps(record, indent=1) + "\n")
    return path


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> Path:
    return write_record(out_dir / MANIFEST, manifest)


def failure_record(identity: dict[str, Any], out_dir: Path, line: str) -> dict[str, Any]:
    """The record of a profile that failed: who it is (``identity``, e.g. the capture
    record), its one-line error and what it left behind."""
    return {
        **identity, "status": "failed", "error": line,
        "finished_at": R.now_iso(), "artifacts": {}, "tables": {},
        "files": files_of(out_dir) if out_dir.is_dir() else [],
    }


def write_failure(tool: str, cell: dict[str, Any], out_dir: Path, settings: dict[str, Any],
                   line: str) -> dict[str, Any]:
    manifest = failure_record(_identity(tool, cell, settings), out_dir, line)
    write_manifest(out_dir, manifest)
    return manifest


def _error_line(tool: str, exc: Exception) -> str:
    if isinstance(exc, ProfileError):
        return str(exc)
    # A disk or permission problem of the profile folder: still one line naming the file.
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    return f"{tool}: {where}{getattr(exc, 'strerror', None) or exc}"


def _failed(tool: str, out_dir: Path, line: str, record_failure: bool,
            record: Callable[[], Any]) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    R.write_atomic(out_dir / ERROR_FILE, line + "\n")
    if record_failure:
        record()
    print(line, file=sys.stderr)  # last: the job log's last line is the reason
    return 0 if record_failure else 1


def main_capture(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
                 settings: dict[str, Any], data_dir: str | None, *,
                 record_failure: bool = False, timeout_s: float | None = None) -> int:
    """The profiled run; 0 when it succeeded, or failed and ``record_failure`` recorded it
    in ``capture.json``; 1 when it failed."""
    try:
        capture(tool, cell, out_dir, python, settings, data_dir, timeout_s)
    except NotAProfileFolder as exc:  # someone else's folder: nothing written into it
        print(f"{tool}: {exc}", file=sys.stderr)
        return 2
    except (ProfileError, OSError) as exc:
        if isinstance(exc, OSError) and not record_failure:
            raise
        line = _error_line(tool, exc)
        return _failed(tool, out_dir, line, record_failure, lambda: write_record(
            out_dir / CAPTURE, failure_record(_identity(tool, cell, settings), out_dir, line)))
    print(f"dlbench.profiling: {tool}: captured in {out_dir}", file=sys.stderr)
    return 0


def main_finish(tool: str, out_dir: Path, *, record_failure: bool = False) -> int:
    """Tables and ``profile.json`` of a capture; a recorded capture failure is carried
    into ``profile.json``."""
    try:
        manifest = finish(tool, out_dir)
    except CaptureFailed as failed:
        record, line = failed.record, failed.record["error"]
        return _failed(tool, out_dir, line, record_failure, lambda: write_manifest(
            out_dir, failure_record(record, out_dir, line)))
    except (ProfileError, OSError) as exc:
        if isinstance(exc, OSError) and not record_failure:
            raise
        line = _error_line(tool, exc)
        identity = _readable_capture(tool, out_dir) or _identity(tool, {}, {})
        return _failed(tool, out_dir, line, record_failure, lambda: write_manifest(
            out_dir, failure_record(identity, out_dir, line)))
    print(f"dlbench.profiling: {tool}: {len(manifest['files'])} files in {out_dir}",
          file=sys.stderr)
    return 0


def _readable_capture(tool: str, out_dir: Path) -> dict[str, Any]:
    """The capture record, or nothing when it is what failed to read."""
    try:
        return read_capture(tool, out_dir)
    except ProfileError:
        return {}


def main(tool: str, cell: dict[str, Any], out_dir: Path, python: str,
         settings: dict[str, Any], data_dir: str | None, *,
         record_failure: bool = False, timeout_s: float | None = None) -> int:
    """Capture, then finish, in this process (``python -m dlbench.profiling run``)."""
    code = main_capture(tool, cell, out_dir, python, settings, data_dir,
                        record_failure=record_failure, timeout_s=timeout_s)
    if code != 0:  # with record_failure a failed capture is code 0 and finish records it
        return code
    return main_finish(tool, out_dir, record_failure=record_failure)
