"""``python -m dlbench.launch``: run one workflow cell in its framework's interpreter.

The workflow hands over the cell as JSON; this turns it into the runner's own command line
(the seeds' flags, an argument list: nothing passes through a shell), runs it, and makes
sure a result file exists afterwards. If the runner could not write one (its interpreter
is missing, the framework does not import, the process was killed), a ``failed`` result
with the runner's last error line is written, so the study goes on and the cell shows up
in the table. It imports no framework.

The runner writes its result under a name of this launcher's own (dlbench.staging); the
launcher checks it (schema, the cell's identity) and moves it into place once the runner
has exited. The runner runs in a process group of its own that dies with the launcher,
and is stopped after ``--timeout_s``. A failed cell, whether its runner wrote the result or
left none, is recorded as ``oom`` when the kernel's OOM killer ended one of its processes
(``classified``: the runner, a DataLoader worker, a torchrun rank); a runner killed by
another signal names the signal.

A GPU cell gets its own GPUs: the launcher holds ``num_gpus`` free GPU ids (``dlbench.gpus``)
while the runner runs and gives it ``CUDA_VISIBLE_DEVICES``. A cell run in a container
records the image and its digest (``DLBENCH_CONTAINER_IMAGE``/``_DIGEST``, read by
``dlbench.environment``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dlbench import (
    atomic,
    axes,
    cellrun,
    cpu,
    environment,
    gpus,
    kinds,
    oom_kills,
    staging,
    subproc,
    systems,
)
from dlbench import result as R


def runner_command(cell: dict[str, Any], output: Path, python: str,
                   data_dir: str | None = None, write_to: Path | None = None) -> list[str]:
    """The runner's command line: its cell kind's runner and the flags of the cell's axes
    (dlbench.axes), then where to write (``write_to``, default ``output``; the runner's
    side files go beside ``output``) and what to record."""
    cmd = kinds.get(cell["kind"]).command(cell["params"], output, python, data_dir)
    return [*cmd, f"--output={write_to or output}", f"--study={cell['study']}",
            f"--cell_id={cell['cell_id']}"]


def stamped(res: dict[str, Any], output: Path) -> dict[str, Any]:
    """The result with its system (the results/<system>/ folder it goes to), what that
    label stands for (dlbench.systems.fingerprint) and its repeat (the file's name)."""
    system = systems.system_of(output)
    if system is not None:
        res["system"] = system
    res["repeat"] = systems.repeat_of(output)
    res["fingerprint"] = systems.fingerprint(res.get("environment") or {})
    return res


def record_launch_failure(cell: dict[str, Any], output: Path, message: str,
                          status: str = "failed", since: tuple[str, float] | None = None
                          ) -> None:
    """A row for a cell whose runner left none. ``since``: when the launch began (its UTC
    time, its ``time.monotonic()``): the row's start and ``wall_time_s`` are then the
    launcher's, so that the cell's cost is known (for a timed-out or killed runner, a lower
    bound of what the cell would take) instead of missing."""
    res = R.new_result(kind=kinds.get(cell["kind"]).result_kind,
                       cell=axes.recorded(cell["kind"], cell["params"]), study=cell["study"],
                       cell_id=cell["cell_id"])
    if since is not None:
        res["started_at"] = since[0]
        res["wall_time_s"] = round(time.monotonic() - since[1], 3)
    res["environment"] = environment.collect()
    R.write(stamped(R.finish(res, status, message), output), output)
    cellrun.print_dlbs_summary(res)  # the job log's last status line: what the row says


# Left in a framework environment's folder by its set-up when the environment cannot be
# built on this machine (envs/mxnet_env.py): one line saying why and how to get it.
UNAVAILABLE_FILE = "unavailable.txt"


def unavailable_reason(python: str) -> str | None:
    """Why the framework environment of ``python`` (``<env>/bin/python``) was not built,
    if its set-up said so; None otherwise."""
    path = Path(python)
    if path.exists() or len(path.parents) < 2:
        return None
    marker = path.parents[1] / UNAVAILABLE_FILE
    try:
        return marker.read_text().strip().splitlines()[0] or None
    except (OSError, IndexError):
        return None


# A GPU cell's runner numbers GPUs as NVML and the scheduler do (by PCI bus): CUDA's own
# default puts the fastest first, so on a host of mixed GPUs the ids locked and passed in
# CUDA_VISIBLE_DEVICES, and the GPU the monitor samples, would be another than the one used.
PCI_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def gpus_needed(cell: dict[str, Any]) -> int:
    p = cell["params"]
    return int(p.get("num_gpus", 1)) if p.get("device") == "gpu" else 0


@contextlib.contextmanager
def assigned_gpus(cell: dict[str, Any], lock_dir: Path | None) -> Iterator[dict[str, str]]:
    """The environment a cell's runner needs for its GPUs, held for the ``with`` block.

    A CPU cell, or a job whose GPUs a cluster scheduler allocated, needs nothing; otherwise
    the cell's ``num_gpus`` ids are locked among those this process can see."""
    def say(message: str) -> None:
        print(f"dlbench.launch: {message}", file=sys.stderr, flush=True)

    count = gpus_needed(cell)
    if count == 0:
        yield {}
        return
    if gpus.scheduler_allocated():
        say(f"GPUs from the scheduler: CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
        yield dict(PCI_ORDER)
        return
    directory = lock_dir or gpus.lock_dir()

    with gpus.allocated(count, gpus.visible_gpus(), directory, owner=cell["cell_id"],
                        on_wait=say) as allocation:
        say(f"CUDA_VISIBLE_DEVICES={allocation.cuda_visible_devices}")
        yield {"CUDA_VISIBLE_DEVICES": allocation.cuda_visible_devices, **PCI_ORDER}


def take_staged(path: Path) -> bytes | None:
    """The runner's result file as it is now, removed (None: there is none)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return data


def accepted_result(data: bytes | None, cell: dict[str, Any],
                    where: str = "result") -> tuple[dict[str, Any] | None, str]:
    """The runner's result (``data``, read from ``where``) if it is valid and is this
    cell's; else None and why not."""
    if data is None:
        return None, ""
    try:
        res = R.loads(data, where)
        R.validate(res)
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"the runner wrote an invalid result ({exc})"
    for key in ("cell_id", "study"):
        if res.get(key) != cell[key]:
            return None, (f"the runner's result is for {key} {res.get(key)!r}, "
                          f"not {cell[key]!r}")
    return res, ""


def runner_failure(ran: subproc.Ran, timeout_s: float | None, module: str,
                   written: dict[str, Any] | None = None) -> str:
    """The one-line message of a runner that left no result; ``written``: the result a
    timed-out runner had written (its measurement done, it did not exit: a hung teardown,
    a worker or rank that would not end), said so that the log's earlier figures and the
    row's failure are understood together."""
    if ran.timed_out:
        wrote = ""
        if written is not None:  # its own error too: a CUDA OOM, then a hung teardown
            error = f": {written['error']}" if written.get("error") else ""
            wrote = (f": it had written its result ({written['status']}{error}) but did not "
                     "exit")
        # The limit is the study's timeout_s, or on a cluster its job's runtime less a
        # margin where that is shorter: the launcher is given the limit, not which it is.
        return (f"timed out after {timeout_s:g} s (timeout_s, or its cluster job's runtime "
                f"less a margin where shorter){wrote}; the runner's process group was killed")
    line = subproc.last_error_line(ran.tail)
    if ran.rc < 0:
        words = subproc.exit_words(ran.rc)
        return f"{module}: {words}" + (f"; last error line: {line}" if line else "")
    # argparse names the program itself ("python -m dlbench.pytorch: error: ..."): once
    line = line.removeprefix(f"python -m {module.rsplit(' ', 1)[-1]}: ")
    return f"{module}: {line or subproc.exit_words(ran.rc)}"


def classified(status: str, message: str, ran: subproc.Ran,
               oom_before: int | None) -> tuple[str, str]:
    """A cell's status and message, ``failed`` turned ``oom`` where the kernel's OOM killer
    ended a process of the cell: the memory cgroup's OOM-kill count rose while the runner
    ran, and the failure shows a process of the cell ended by SIGKILL (the runner itself,
    or in its error line or its last stderr lines a DataLoader worker or a torchrun rank:
    ``oom_kills.sigkill_shown``). A timed-out runner was killed by us."""
    if status != "failed" or ran.timed_out:
        return status, message
    shown = (subproc.exit_words(ran.rc) if ran.rc == -signal.SIGKILL
             else oom_kills.sigkill_shown([message, *ran.tail]))
    if shown is None or not oom_kills.rose(oom_before, oom_kills.count()):
        return status, message
    return "oom", oom_kills.oom_message(message, shown)


def thread_caps(environ: Mapping[str, str] | None = None,
                cpus: int | None = None) -> dict[str, str]:
    """The thread counts of ``environ`` capped at the CPUs this job may use. A cluster job
    of a GPU cell is given cpus_per_gpu x its GPUs (Slurm's --cpus-per-gpu) while
    Snakemake sets these to the rule's threads: 16 threads on 8 CPUs would time a CPU
    side twice oversubscribed. A count within the CPUs, or not a count, is left alone."""
    environ = os.environ if environ is None else environ
    cpus = cpu.usable_cpus() if cpus is None else cpus
    caps = {}
    for name in cpu.THREAD_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit() and int(value) > cpus:
            caps[name] = str(cpus)
    return caps


# The environment variable inductor reads for its cache folder (dlbench.pytorch.execution).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def compile_cache_env(cell: dict[str, Any], output: Path) -> dict[str, str]:
    """A compiled cell's own inductor cache:
    results/<system>/cache/inductor/<host>/<study>/<cell>.
    A rerun of the cell finds its own cache (its compile time is comparable, and recorded
    as warm), and no cell's compilation shortens another's. A cache folder the user set
    in the environment is kept."""
    mode = (cell.get("params") or {}).get("compile")
    if mode in (None, "eager") or os.environ.get(INDUCTOR_CACHE_ENV):
        return {}
    output = Path(output)
    root = output.parents[2] if output.parent.name == "cells" and len(output.parents) > 2 \
        else output.parent
    folder = root / "cache" / "inductor" / socket.gethostname() / str(cell.get("study")) \
        / str(cell["cell_id"])
    return {INDUCTOR_CACHE_ENV: str(folder.resolve())}


# The runner's last stderr lines kept: enough for the traceback of a DataLoader worker's
# death, whose cause ("is killed by signal") comes before the runner's own frames, and for
# torchrun's failure report.
STDERR_LINES = 400


def launch(cell: dict[str, Any], output: Path, python: str, data_dir: str | None = None,
           env: dict[str, str] | None = None, gpu_lock_dir: Path | None = None,
           runner_options: list[str] | None = None, timeout_s: float | None = None) -> int:
    since = (R.now_iso(), time.monotonic())  # a failure row's time: the launcher's
    output.unlink(missing_ok=True)  # a stale result must not pass for this run's
    for stale in staging.stale(output):  # left by a killed launcher: never accepted
        stale.unlink(missing_ok=True)
    reason = unavailable_reason(python)
    if reason:
        # Not a failure of the cell: the machine cannot run this framework.
        record_launch_failure(cell, output, reason, status="skipped")
        print(f"dlbench.launch: skipped: {reason}", file=sys.stderr)
        return 0
    if systems.system_of(output) is not None:
        # One label, one machine: a cell launched elsewhere under it fails in one line.
        problem = systems.check_machine(output.parents[2])
        if problem:
            record_launch_failure(cell, output, problem, since=since)
            print(f"dlbench.launch: {problem}", file=sys.stderr)
            return 1
    staged = staging.staging_path(output)
    cmd = [*runner_command(cell, output, python, data_dir, write_to=staged),
           *(runner_options or [])]
    print("dlbench.launch:", " ".join(cmd), file=sys.stderr, flush=True)
    taken: list[bytes | None] = [None]

    def take() -> None:  # the moment the runner exits
        taken[0] = take_staged(staged)

    try:
        with assigned_gpus(cell, gpu_lock_dir) as gpu_env:
            oom_before = oom_kills.count()
            ran = subproc.supervised(cmd, env={**os.environ, **thread_caps(),
                                               **compile_cache_env(cell, output),
                                               **(env or {}), **gpu_env},
                                     timeout_s=timeout_s, keep=STDERR_LINES, on_exit=take)
    except gpus.GpuAllocationError as exc:
        record_launch_failure(cell, output, f"dlbench.launch: {exc}", since=since)
        print(f"dlbench.launch: {exc}", file=sys.stderr)
        return 1
    res, invalid = accepted_result(taken[0], cell, staged.name)
    written = None
    if ran.timed_out:  # past timeout_s the cell failed, whatever its runner had written
        res, invalid, written = None, "", res
    if res is not None:
        status, message = classified(res["status"], res["error"] or "", ran, oom_before)
        relabelled = status != res["status"]
        if relabelled:
            res["status"], res["error"] = status, message
        R.write(stamped(res, output), output)
        if relabelled:  # the runner's log said failed: its last status line is the row's
            cellrun.print_dlbs_summary(res)
        return ran.rc
    status, why = classified(
        "failed", invalid or runner_failure(ran, timeout_s, f"{Path(python).name} -m {cmd[2]}",
                                            written), ran, oom_before)
    if written is not None and written["status"] == "oom":
        status = "oom"  # out of memory, then hung in its teardown: an oom row all the same
    record_launch_failure(cell, output, why, status=status, since=since)
    return ran.rc


def image_digest(image: str, cache_dir: Path | None = None) -> str | None:
    """What identifies a container image's contents: ``sha256:<hex>`` of a local image file
    (remembered in ``cache_dir`` by path, size and mtime, since images are gigabytes), the
    URI itself for a registry image (docker://, oras://, ...), None for a missing file or one
    that is none (a device)."""
    if "://" in image:
        return image
    path = Path(image)
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):  # a device (/dev/zero) would be read for ever
        return None
    key = hashlib.sha256(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    cached = cache_dir / key if cache_dir else None
    if cached and cached.is_file():
        return cached.read_text().strip()
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    value = f"sha256:{digest.hexdigest()}"
    if cached:
        atomic.write_text(cached, value + "\n")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlbench.launch", description=__doc__)
    parser.add_argument("--cell", required=True, help="the cell as JSON (study.Cell.to_json)")
    parser.add_argument("--output", required=True, type=Path, help="result JSON to write")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter of the framework's environment")
    parser.add_argument("--data_dir", default="", help="prepared dataset for this cell")
    parser.add_argument("--gpu_lock_dir", type=Path,
                        help=f"where GPU cells lock their GPU ids (default: ${gpus.LOCK_DIR_ENV} "
                             f"or {gpus.DEFAULT_LOCK_DIR})")
    parser.add_argument("--container_image", default="",
                        help="the container image this runs in, recorded with the result")
    parser.add_argument("--container_digest", default="", help="that image's digest")
    parser.add_argument("--monitor_interval_ms", type=float, default=None,
                        help="the runner's resource-monitor interval (0: off)")
    parser.add_argument("--timeout_s", type=float, default=None,
                        help="stop the runner (its whole process group) after this many "
                             "seconds and record the cell as failed")
    args = parser.parse_args(argv)
    try:
        cell = json.loads(args.cell)
    except json.JSONDecodeError as exc:
        parser.error(f"--cell: not valid JSON ({exc.msg})")
    if args.container_image:
        # Read by environment.collect(), here and in the runner (which inherits them).
        os.environ["DLBENCH_CONTAINER_IMAGE"] = args.container_image
        os.environ["DLBENCH_CONTAINER_DIGEST"] = args.container_digest
    options = ([] if args.monitor_interval_ms is None
               else [f"--monitor_interval_ms={args.monitor_interval_ms:g}"])
    try:
        rc = launch(cell, args.output, args.python, args.data_dir or None,
                    gpu_lock_dir=args.gpu_lock_dir, runner_options=options,
                    timeout_s=args.timeout_s)
        status = R.read(args.output)["status"]
    except OSError as exc:
        # No result could be written (a full disk, a read-only folder): the job fails, and
        # its one line names the cause.
        print(f"dlbench.launch: cell {cell['cell_id']}: no result written: "
              f"{subproc.errno_words(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: the runner's group is stopped (dlbench.subproc) and the cell has no
        # result, so the next run measures it; one line in its log, not a traceback.
        print(f"dlbench.launch: cell {cell['cell_id']}: interrupted; runner stopped, "
              "no result", file=sys.stderr)
        return 130
    # The cell's outcome lives in its result file; a recorded failure is not a job failure.
    print(f"dlbench.launch: cell {cell['cell_id']}: {status} "
          f"(runner {subproc.exit_words(rc)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    # The job's shell execs us, so our parent is the Snakemake process running the job: if
    # it dies, we end (and our runner's group with us) instead of measuring on unseen.
    subproc.die_with_parent()
    # What the runner starts in sessions of its own (torchrun's ranks) comes to us, not to
    # init, should the runner end before it: ended with the cell (dlbench.subproc).
    subproc.adopt_orphans()
    sys.exit(main())
