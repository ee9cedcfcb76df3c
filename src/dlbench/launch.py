"""``python -m dlbench.launch``: run one workflow cell in its framework's interpreter.

The workflow hands over the cell as JSON; this turns it into the runner's own command line
(the seeds' flags, an argument list: nothing passes through a shell), runs it, and makes
sure a result file exists afterwards. If the runner could not write one (its interpreter
is missing, the framework does not import, the process was killed), a ``failed`` result
with the runner's last error line is written, so the study goes on and the cell shows up
in the table. It imports no framework.

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
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlbench import atomic, axes, environment, gpus, kinds, subproc
from dlbench import result as R


def runner_command(cell: dict[str, Any], output: Path, python: str,
                   data_dir: str | None = None) -> list[str]:
    """The runner's command line: its cell kind's runner and the flags of the cell's axes
    (dlbench.axes), then where to write and what to record."""
    cmd = kinds.get(cell["kind"]).command(cell["params"], output, python, data_dir)
    return [*cmd, f"--output={output}", f"--study={cell['study']}",
            f"--cell_id={cell['cell_id']}"]


def record_launch_failure(cell: dict[str, Any], output: Path, message: str,
                          status: str = "failed") -> None:
    res = R.new_result(kind=kinds.get(cell["kind"]).result_kind,
                       cell=axes.recorded(cell["kind"], cell["params"]), study=cell["study"],
                       cell_id=cell["cell_id"])
    res["environment"] = environment.collect()
    R.write(R.finish(res, status, message), output)


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
        yield {}
        return
    directory = lock_dir or gpus.lock_dir()

    with gpus.allocated(count, gpus.visible_gpus(), directory, owner=cell["cell_id"],
                        on_wait=say) as allocation:
        say(f"CUDA_VISIBLE_DEVICES={allocation.cuda_visible_devices}")
        yield {"CUDA_VISIBLE_DEVICES": allocation.cuda_visible_devices}


def launch(cell: dict[str, Any], output: Path, python: str, data_dir: str | None = None,
           env: dict[str, str] | None = None, gpu_lock_dir: Path | None = None,
           runner_options: list[str] | None = None) -> int:
    output.unlink(missing_ok=True)  # a stale result must not pass for this run's
    reason = unavailable_reason(python)
    if reason:
        # Not a failure of the cell: the machine cannot run this framework.
        record_launch_failure(cell, output, reason, status="skipped")
        print(f"dlbench.launch: skipped: {reason}", file=sys.stderr)
        return 0
    cmd = [*runner_command(cell, output, python, data_dir), *(runner_options or [])]
    print("dlbench.launch:", " ".join(cmd), file=sys.stderr, flush=True)
    try:
        with assigned_gpus(cell, gpu_lock_dir) as gpu_env:
            rc, stderr_tail = subproc.run_tee(cmd, env={**os.environ, **(env or {}), **gpu_env})
    except gpus.GpuAllocationError as exc:
        record_launch_failure(cell, output, f"dlbench.launch: {exc}")
        print(f"dlbench.launch: {exc}", file=sys.stderr)
        return 1
    if not output.exists():
        why = subproc.last_error_line(stderr_tail) or f"runner exited with code {rc}"
        record_launch_failure(cell, output, f"{Path(python).name} -m {cmd[2]}: {why}")
    return rc


def image_digest(image: str, cache_dir: Path | None = None) -> str | None:
    """What identifies a container image's contents: ``sha256:<hex>`` of a local image file
    (remembered in ``cache_dir`` by path, size and mtime, since images are gigabytes), the
    URI itself for a registry image (docker://, oras://, ...), None for a missing file."""
    if "://" in image:
        return image
    path = Path(image)
    try:
        st = path.stat()
    except OSError:
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
    rc = launch(cell, args.output, args.python, args.data_dir or None,
                gpu_lock_dir=args.gpu_lock_dir, runner_options=options)
    # The cell's outcome lives in its result file; a recorded failure is not a job failure.
    status = R.read(args.output)["status"]
    print(f"dlbench.launch: cell {cell['cell_id']}: {status} (runner exit code {rc})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
