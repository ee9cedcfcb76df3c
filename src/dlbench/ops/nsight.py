"""PARAM's ``--ncu`` and ``--nsys``: the inputs just measured, run again under the tool.

Each batch of at most ``--run-batch-size`` of one build's inputs, as PARAM's
``OpBuildExecutor`` makes them, is handed to a second process under Nsight Compute or
Nsight Systems once the measured run is over (PARAM launches each batch when it is full,
between measurements; here the resource monitor, which covers the whole measured run,
samples no profiler): the batch's config (PARAM's layout: ``op_name``,
``config_build_id``, ``op_info`` with the build and the batch's inputs, each with its
``id``, and ``run_options`` with the tool's warmup and iteration counts) travels in POSIX
shared memory, and the command is

    ncu --log-file <prefix>_<pid>_<time>_<n>_ncu.log --csv [--app-replay-buffer file] --nvtx
        --nvtx-include param_bench:measure/ --nvtx-exclude l2_flush/ --target-processes all
        [--ncu-args-file words] <batch command> -s <shared memory name>
    nsys profile -t cuda,nvtx -o <prefix>_<pid>_<time>_<n>_nsys.nsys-rep [--nsys-args-file
        words] <batch command> -s <shared memory name>

with ``CUDA_VISIBLE_DEVICES`` naming the batch's GPU. The batch command is
``python -m dlbench.ops.batch`` by default (``--batch-cmd`` replaces it; PARAM's own
``run_batch`` reads the same config). Each launch adds PARAM's record to the JSON-lines
file (``{"ncu_file" | "nsys_file", "ncu_cmd_str" | "nsys_cmd_str", "config",
"start_run_id", "end_run_id"}``, plus its ``returncode``); a tool that exits non-zero is an
error of the run, not of the measurements. An ncu log also becomes a Parquet table beside
it (``dlbench.profiling.tools.ncu.ncu_details``), which the result's record names.

Where dlbench differs from PARAM: the ranges are push/pop, so the NVTX filter ends in
``/``, and the L2 flush between measured calls (``--cuda-l2-cache off``) is left out of
ncu's profile (``--nvtx-exclude l2_flush/``: its own range, not the operator's work);
``--app-replay-buffer file`` is passed only where the args file asks for
application replay (``--replay-mode application`` or ``app-range``): the ncu PARAM was
written for ignored it under its default kernel replay, current releases exit 1 on it there;
each file name carries the launch's number (PARAM's second-resolution time stamp
alone lets two batches write one file); the batch's GPU is by default the one measured
(PARAM's default, 1, is a second GPU that a one-GPU machine lacks); and ``--ncu-warmup 0``
means no warmup (PARAM reads 0 as "the default"). Nothing here runs a shell: the args
files and ``--batch-cmd`` are split into words as a shell would, and run as an argument
list.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

from dlbench import nvtx_ranges
from dlbench.cellrun import CellError

log = logging.getLogger("dlbench.ops")

DEFAULT_BATCH_CMD = (sys.executable, "-m", "dlbench.ops.batch")
# PARAM's NVTX range around the measured calls (dlbench.ops.timing), as ncu's push/pop
# filter.
MEASURE_RANGE = "param_bench:measure/"
FLUSH_RANGE = f"{nvtx_ranges.L2_FLUSH}/"
DATA_GENERATOR = "PyTorch:DefaultDataGenerator"  # PARAM's default (create_op_info)


@dataclass(frozen=True)
class Tool:
    """One of PARAM's two profilers: its defaults and its command line."""

    name: str  # ncu | nsys
    warmup: int  # PARAM's defaults (get_benchmark_options)
    iteration: int
    suffix: str  # of the file each launch writes

    def options(self, out_file: str, extra: list[str]) -> list[str]:
        """The tool's own options before ``extra`` (the args file's words)."""
        if self.name == "ncu":
            # PARAM's buffer for application replay: current ncu releases refuse it under
            # their default kernel replay, which older ones ran ignoring it.
            buffer = ["--app-replay-buffer", "file"] if replay_mode(extra) in APP_REPLAY \
                else []
            # PARAM's filter, less the L2 flush between measured calls (its own range).
            return ["--log-file", out_file, "--csv", *buffer, "--nvtx",
                    "--nvtx-include", MEASURE_RANGE, "--nvtx-exclude", FLUSH_RANGE,
                    "--target-processes", "all"]
        return ["profile", "-t", "cuda,nvtx", "-o", out_file]


APP_REPLAY = frozenset({"application", "app-range"})  # ncu's replay modes that buffer


def replay_mode(words: list[str]) -> str:
    """ncu's ``--replay-mode`` among ``words`` (its last, as ncu reads it); ncu's default,
    ``kernel``, where none is given."""
    mode = "kernel"
    for i, word in enumerate(words):
        if word == "--replay-mode" and i + 1 < len(words):
            mode = words[i + 1]
        elif word.startswith("--replay-mode="):
            mode = word.partition("=")[2]
    return mode


TOOLS = {"ncu": Tool("ncu", 5, 1, "ncu.log"), "nsys": Tool("nsys", 5, 10, "nsys.nsys-rep")}


@dataclass
class Launch:
    """How one tool is launched: its binary, extra words, warmup and iteration counts."""

    tool: Tool
    binary: str
    extra: list[str]
    warmup: int
    iteration: int


def words(flag: str, text: str) -> list[str]:
    """An option's text split into words as a shell would, never run by one."""
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise CellError(f"{flag}: {exc}") from None


def executable(flag: str, name: str, binary: str | None) -> str:
    """The tool's binary: the one given, else ``name`` on PATH; one line when missing."""
    found = shutil.which(binary or name)
    if found is None:
        if binary:
            raise CellError(f"{flag} {binary}: not an executable file")
        raise CellError(f"--{name}: '{name}' not found on PATH (give {flag})")
    return found


def visible_device(index: int, count: int, parent: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the batch: the ``index``-th of the GPUs this process
    sees (through the parent's own ``CUDA_VISIBLE_DEVICES`` when it has one)."""
    if not 0 <= index < count:
        seen = f"0 to {count - 1}" if count else "none"
        raise CellError(f"--batch-cuda-device {index}: no such GPU (visible: {seen})")
    if parent is not None and parent.strip():
        return parent.split(",")[index].strip()
    return str(index)


@dataclass
class Batch:
    """The queued inputs of one build."""

    op_name: str
    build_id: str  # PARAM's config_build_id: "<config>|<build>"
    op_info: dict[str, Any]  # the operator's iterators and data generators
    build: Any  # the build's concrete spec (None: the operator takes no build arguments)
    inputs: list[dict[str, Any]] = field(default_factory=list)  # with their "id"


@dataclass
class Nsight:
    """Queues the inputs that ran in batches by build; ``run`` launches the tools on each
    batch once the measured run is over (so that the resource monitor, which covers the
    whole operator run, samples no profiler)."""

    launches: list[Launch]
    batch_size: int
    run_options: dict[str, Any]  # device, pass_type, op_exec_mode, cuda_l2_cache, compile
    out_prefix: str
    batch_cmd: list[str]
    env: dict[str, str]  # added to the batch's environment (CUDA_VISIBLE_DEVICES)
    writer: Any  # dlbench.ops.output.JsonlWriter
    on_error: Any  # (op_name, run_id, message) -> None
    records: list[dict[str, Any]] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)  # closed, to be run
    current: Batch | None = None

    def queue(self, op_name: str, build_id: str, op_info: dict[str, Any], build: Any,
              input_id: str, config: dict[str, Any]) -> None:
        if self.current is not None and (self.current.op_name,
                                         self.current.build_id) != (op_name, build_id):
            self.close_batch()
        if self.current is None:
            self.current = Batch(op_name, build_id, op_info, build)
        self.current.inputs.append({**config, "id": input_id})
        if len(self.current.inputs) >= self.batch_size:
            self.close_batch()

    def close_batch(self) -> None:
        """Ends the batch being filled (a build's last input ran, or the batch is full)."""
        if self.current is not None and self.current.inputs:
            self.batches.append(self.current)
        self.current = None

    def run(self) -> None:
        """Each batch under each tool, in the order the inputs ran."""
        self.close_batch()
        for batch in self.batches:
            for launch in self.launches:
                self.launch(launch, batch)
        self.batches = []

    def config(self, launch: Launch, batch: Batch) -> dict[str, Any]:
        """PARAM's batch config."""
        info = {key: batch.op_info.get(key) for key in
                ("build_iterator", "input_iterator", "build_data_generator",
                 "input_data_generator")}
        # The inputs are concrete already: read as they are, not expanded again.
        info["build_iterator"] = info["input_iterator"] = None
        info["input_data_generator"] = info["input_data_generator"] or DATA_GENERATOR
        info["config"] = [{"build": batch.build, "input": batch.inputs}]
        return {"op_name": batch.op_name, "config_build_id": batch.build_id, "op_info": info,
                "run_options": {**self.run_options, "warmup": launch.warmup,
                                "iteration": launch.iteration}}

    def launch(self, launch: Launch, batch: Batch) -> None:
        tool = launch.tool
        out_file = (f"{self.out_prefix}_{os.getpid()}_{int(time.time())}_"
                    f"{len(self.records)}_{tool.suffix}")
        config = self.config(launch, batch)
        text = json.dumps(config).encode()
        shm = shared_memory.SharedMemory(create=True, size=len(text))
        try:
            shm.buf[:len(text)] = text
            cmd = [launch.binary, *tool.options(out_file, launch.extra), *launch.extra,
                   *self.batch_cmd, "-s", shm.name]
            if log.isEnabledFor(logging.DEBUG):
                cmd.append("-v")
            log.info("running: %s", shlex.join(cmd))
            returncode = run(cmd, {**os.environ, **self.env})
        finally:
            shm.close()
            shm.unlink()
        first, last = batch.inputs[0]["id"], batch.inputs[-1]["id"]
        record = {f"{tool.name}_file": out_file, f"{tool.name}_cmd_str": shlex.join(cmd),
                  "config": config, "start_run_id": f"{batch.build_id}|{first}",
                  "end_run_id": f"{batch.build_id}|{last}", "returncode": returncode}
        self.writer.write(record)
        entry = {"tool": tool.name, "file": out_file, "command": cmd,
                 "start_run_id": record["start_run_id"], "end_run_id": record["end_run_id"],
                 "inputs": len(batch.inputs), "returncode": returncode}
        if tool.name == "ncu" and returncode == 0:
            entry.update(details_table(out_file))
        self.records.append(entry)
        if returncode != 0:
            self.on_error(batch.op_name, record["start_run_id"],
                          f"{batch.op_name}: {tool.name} exited with code {returncode} on "
                          f"inputs {record['start_run_id']} to {record['end_run_id']} "
                          f"(its output: {out_file})")
        else:
            log.info("%s result: %s", tool.name, out_file)


def details_table(log_file: str) -> dict[str, Any]:
    """An ncu log's kernels and metrics as Parquet beside it (``..._ncu.parquet``): its
    ``table`` and how many ``kernels`` it holds, or why there is none (``table_error``)."""
    try:
        from dlbench.profiling.tables import TableError
        from dlbench.profiling.tools.ncu import ncu_details
    except ImportError as exc:  # pyarrow
        log.warning("ncu log %s: no table (%s)", log_file, exc)
        return {"table_error": str(exc)}
    table_file = log_file.removesuffix(".log") + ".parquet"
    try:
        table = ncu_details(Path(log_file), Path(table_file))
    except TableError as exc:
        log.warning("ncu log %s: no table (%s)", log_file, exc)
        return {"table_error": str(exc)}
    if table is None:
        log.warning("ncu profiled no kernel (its log: %s)", log_file)
        return {"kernels": 0}
    return {"table": table_file, "kernels": len(set(table.column("ID").to_pylist()))}


def run(cmd: list[str], env: dict[str, str]) -> int:
    """Runs the tool, its output passed through line by line as PARAM does; the exit code
    (127 when it cannot be started)."""
    try:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              bufsize=1, env=env) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.strip():
                    sys.stdout.write(line)
            sys.stdout.flush()
            return proc.wait()
    except OSError as exc:
        log.error("%s: cannot start (%s)", cmd[0], exc.strerror)
        return 127
