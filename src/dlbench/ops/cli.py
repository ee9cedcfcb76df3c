"""``python -m dlbench.ops``: PARAM's ``run_benchmark`` options, plus dlbench's result.

Writes PARAM's JSON-lines file ``<output-prefix>.json`` (and ``<output-prefix>_trace.json``
with ``--profile``) and, with ``--output``, a dlbench result document of kind ``op``.
With ``--ncu``/``--nsys`` the inputs run again, in batches, under the tool, as PARAM does
(``dlbench.ops.nsight``); the workflow's profiling jobs profile a cell's own run instead.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import dlbench
from dlbench import axes, cli, monitor
from dlbench import result as R
from dlbench.cellrun import CellError, exit_code, recorded
from dlbench.ops import configfile, modes, nsight, output
from dlbench.ops.runner import Benchmark, seed
from dlbench.ops.timing import EXEC_MODES, ExecOptions
from dlbench.pytorch import precision, torch_environment
from dlbench.pytorch.runner import monitored_gpus

log = logging.getLogger("dlbench.ops")
# The monitor runs once around the whole op config, not around each input's calls (those
# last milliseconds, below its sampling interval and the GPUs' energy-counter updates): on
# an H100 a bf16 8192^3 matmul cell sampled 3.9 s at a mean 134 W for 70 ms of measured
# calls. Its power and energy say so, and give no samples per joule.
MONITOR_WINDOW = "the whole operator run (tensor set-up, warm-up and every input's calls)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dlbench.ops",
                                description="PyTorch operator microbenchmarks (PARAM configs)")
    p.add_argument("-c", "--config", help="The benchmark config file.")
    p.add_argument("-w", "--warmup", type=int, default=1, help="Number of warm up iterations.")
    p.add_argument("-i", "--iteration", type=int, default=1,
                   help="Number of benchmark iterations.")
    p.add_argument("-b", "--backward", action="store_true", help="Include backward pass.")
    p.add_argument("-d", "--device", default="cpu",
                   help="Target device: cpu, cuda, cuda:N (gpu means cuda).")
    p.add_argument("-o", "--output-prefix", default="benchmark_result",
                   help="File name prefix of the JSON-lines results (<prefix>.json).")
    p.add_argument("-r", "--resume-id", default=None,
                   help="Resume at this op_name|config|build|input id, skipping those before.")
    p.add_argument("-s", "--stop_id", default=None,
                   help="Stop before this op_name|config|build|input id (exclusive).")
    p.add_argument("-a", "--append", action="store_true",
                   help="Append to the output file, rather than overwrite.")
    # A bare --cuda-l2-cache flushes, as in PARAM: its value is then None, and PARAM keeps
    # the L2 warm only where the value == "on".
    p.add_argument("--cuda-l2-cache", default="on", nargs="?", const="off", choices=["on", "off"],
                   help="on: leave the GPU L2 warm between calls; off (or the bare flag, as "
                        "in PARAM): flush it before each call (discrete mode).")
    p.add_argument("--ncu", action="store_true",
                   help="Run the measured inputs again, in batches, under NSight Compute.")
    p.add_argument("--ncu-bin", default=None, help="Path to the NSight Compute (ncu) binary.")
    p.add_argument("--ncu-args-file", default=None,
                   help="NSight Compute extra command line options (metrics etc.).")
    p.add_argument("--ncu-warmup", type=int, default=None,
                   help="NSight Compute warmup runs (default 5).")
    p.add_argument("--ncu-iteration", type=int, default=None,
                   help="NSight Compute measured iteration runs (default 1).")
    p.add_argument("--nsys", action="store_true",
                   help="Run the measured inputs again, in batches, under NSight Systems.")
    p.add_argument("--nsys-bin", default=None, help="Path to the NSight Systems (nsys) binary.")
    p.add_argument("--nsys-args-file", default=None,
                   help="NSight Systems extra command line options.")
    p.add_argument("--nsys-warmup", type=int, default=None,
                   help="NSight Systems warmup runs (default 5).")
    p.add_argument("--nsys-iteration", type=int, default=None,
                   help="NSight Systems measured iteration runs (default 10).")
    p.add_argument("--run-batch-size", type=int, default=50,
                   help="Input configs per NSight launch.")
    p.add_argument("--batch-cuda-device", type=int, default=None,
                   help="CUDA GPU device ID to run batch job (default: the measured one; "
                        "PARAM's is 1).")
    p.add_argument("--batch-cmd", default=None,
                   help="Run batch job command (default: python -m dlbench.ops.batch); "
                        "it is given -s <shared memory name>.")
    p.add_argument("--exec-mode", default="discrete", nargs="?", const="discrete",
                   choices=list(EXEC_MODES),
                   help="Execution mode of the operators. Default=discrete")
    p.add_argument("--pt2-model", action="store_true",
                   help="Compile the operator with torch.compile (inductor) before the run.")
    p.add_argument("--cuda-graph", action="store_true",
                   help="Capture each input's forward (and backward) in CUDA graphs and time "
                        "their replay (cuda devices; ignored with a warning elsewhere).")
    p.add_argument("--compile", default=None, choices=list(axes.compile_modes("ops")),
                   help="dlbench's execution mode (the compile axis): eager, inductor[-reduce-"
                        "overhead|-max-autotune], cudagraphs (= --cuda-graph), "
                        "inductor-cudagraphs (= --pt2-model --cuda-graph).")
    p.add_argument("-p", "--profile", action="store_true",
                   help="Enable the torch profiler; trace to <prefix>_trace.json.")
    p.add_argument("--et", action="store_true",
                   help="Collect PyTorch's execution trace of the run into <prefix>_et.json "
                        "(what PARAM's et_replay and Chakra read).")
    p.add_argument("-l", "--log-level", default="INFO", help="Log output verbosity.")
    p.add_argument("--version", action="store_true", help="Print version.")
    p.add_argument("--output", default=None, type=cli.result_path,
                   help="dlbench result JSON path")
    p.add_argument("--study", default=None, help="study name recorded in the result")
    p.add_argument("--cell_id", default=None, help="cell id recorded in the result")
    monitor.add_arguments(p)
    return p


def bind_cuda(device: torch.device) -> torch.device:
    """The GPU ``device`` names (``cuda`` alone: the current one, as a batch launched with
    one visible GPU gets it), made this process's current device; ValueError in one line
    where there is none."""
    if not torch.cuda.is_available():
        raise ValueError(f"device {device}: no CUDA GPU is available to torch")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device {device}: only {torch.cuda.device_count()} GPU(s) visible")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    return device


def parse_device(text: str) -> torch.device:
    """cpu, cuda, cuda:N; ``gpu``/``gpu:N`` mean cuda."""
    lowered = text.strip().lower()
    if lowered == "gpu" or lowered.startswith("gpu:"):
        lowered = "cuda" + lowered[3:]
    try:
        device = torch.device(lowered)
    except (RuntimeError, ValueError):
        raise ValueError(f"unknown device {text!r} (cpu, cuda, cuda:N or gpu)") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {text!r}: only cpu and cuda are supported")
    return device


def load_config(path: str) -> dict[str, Any]:
    """The operators of the config file, or a one-line ``CellError`` naming it."""
    return configfile.load(path)


def failure_line(config: str, errors: list[dict[str, Any]]) -> str:
    """The result's error when every operator input failed: the file, then the error
    (the first of several, with their count)."""
    name = configfile.shown(config)
    if len(errors) == 1:
        return f"config {name}: {errors[0]['error']}"
    return f"config {name}: {len(errors)} errors, none measured; first: {errors[0]['error']}"


def compile_mode(args: argparse.Namespace, device: torch.device) -> str:
    """The execution mode from ``--compile`` or PARAM's ``--pt2-model``/``--cuda-graph``
    (which must agree with it when both are given). Off a GPU, CUDA-graph capture is
    dropped with a warning, as PARAM does."""
    from_flags = modes.from_param_flags(args.pt2_model, args.cuda_graph)
    mode = args.compile or from_flags
    if args.compile and from_flags != "eager" and from_flags != args.compile:
        raise ValueError(f"--compile {args.compile} contradicts --pt2-model/--cuda-graph "
                         f"({from_flags})")
    if device.type != "cuda" and mode in modes.CAPTURE_MODES:
        log.warning("CUDA graphs need a cuda device; running %s without them on %s",
                    modes.without_capture(mode), device)
        mode = modes.without_capture(mode)
    return mode


def l2_cache_setting(args: argparse.Namespace, device: torch.device) -> str:
    """``--cuda-l2-cache`` as it applies: off flushes a GPU's L2 before each call; off a
    GPU there is none to flush, so, as CUDA-graph capture is, it is dropped with a warning
    and the result records what ran (on)."""
    if args.cuda_l2_cache == "off" and device.type != "cuda":
        log.warning("--cuda-l2-cache off flushes a GPU's L2 cache; nothing is flushed on %s "
                    "(running, and recording, cuda_l2_cache on)", device)
        return "on"
    return args.cuda_l2_cache


def warn_of_exec_mode(args: argparse.Namespace, device: torch.device) -> None:
    """The continuous modes queue a CUDA stream's calls back to back; off a GPU each call
    is timed on its own whatever the mode (PARAM's CPU loop), so they measure what
    discrete does: said, the mode kept as asked (the cell's id holds it)."""
    if args.exec_mode != "discrete" and device.type != "cuda":
        log.warning("--exec-mode %s queues a GPU's calls; on %s each call is timed on its "
                    "own, as discrete does", args.exec_mode, device)


def read_args_file(flag: str, path: str | None) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise CellError(f"{flag} {path}: cannot read ({exc.strerror})") from None


def run_options(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """PARAM's run_options record (the first line of the JSON-lines file)."""
    return {
        "device": str(device),
        "pass_type": "backward" if args.backward else "forward",
        "warmup": args.warmup,
        "iteration": args.iteration,
        "op_exec_mode": args.exec_mode,
        "time_unit": "millisecond",
        "out_file_prefix": args.output_prefix,
        "cuda_l2_cache": args.cuda_l2_cache == "on",
        "resume_op_run_id": args.resume_id,
        "stop_op_run_id": args.stop_id,
        "run_ncu": args.ncu,
        "ncu_bin": args.ncu_bin,
        "ncu_args": read_args_file("--ncu-args-file", args.ncu_args_file),
        "ncu_warmup": args.ncu_warmup,
        "ncu_iteration": args.ncu_iteration,
        "run_nsys": args.nsys,
        "nsys_bin": args.nsys_bin,
        "nsys_args": read_args_file("--nsys-args-file", args.nsys_args_file),
        "nsys_warmup": args.nsys_warmup,
        "nsys_iteration": args.nsys_iteration,
        "run_batch_size": args.run_batch_size,
        "batch_cuda_device": args.batch_cuda_device,
        "batch_cmd": args.batch_cmd,
        "profile": args.profile,
        "pt2-model": args.compile not in ("eager", "cudagraphs"),
        "cuda-graph": args.compile in modes.CAPTURE_MODES,
        "compile": args.compile,
        "cmd_args": vars(args),
    }


def nsight_launches(args: argparse.Namespace, device: torch.device,
                    options_record: dict[str, Any]) -> list[nsight.Launch]:
    """The tools asked for, their binaries found before anything runs (a missing binary is
    one line, not a run measured in vain); their args files' text as the run options
    record read it."""
    launches = []
    for name, asked in (("ncu", args.ncu), ("nsys", args.nsys)):
        if not asked:
            continue
        tool = nsight.TOOLS[name]
        binary = nsight.executable(f"--{name}-bin", name, getattr(args, f"{name}_bin"))
        extra = nsight.words(f"--{name}-args-file", options_record[f"{name}_args"])
        warmup, iteration = (getattr(args, f"{name}_{key}") for key in ("warmup", "iteration"))
        launches.append(nsight.Launch(tool, binary, extra,
                                      tool.warmup if warmup is None else warmup,
                                      tool.iteration if iteration is None else iteration))
    if launches and device.type != "cuda":
        log.warning("--ncu/--nsys on %s: the tools see no CUDA kernels there", device)
    return launches


def batch_run_options(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The batch's run options in PARAM's names; its one visible GPU is ``cuda``."""
    return {"device": "cuda" if device.type == "cuda" else str(device),
            "pass_type": "backward" if args.backward else "forward",
            "op_exec_mode": args.exec_mode, "cuda_l2_cache": args.cuda_l2_cache == "on",
            "compile": args.compile}


def batch_command(args: argparse.Namespace) -> list[str]:
    if args.batch_cmd is None:
        return list(nsight.DEFAULT_BATCH_CMD)
    command = nsight.words("--batch-cmd", args.batch_cmd)
    if not command:
        raise CellError("--batch-cmd: empty")
    return command


def batch_environment(args: argparse.Namespace, device: torch.device) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for the batch: ``--batch-cuda-device``, else the GPU
    measured; nothing on a CPU."""
    if device.type != "cuda":
        return {}
    index = device.index if args.batch_cuda_device is None else args.batch_cuda_device
    return {"CUDA_VISIBLE_DEVICES": nsight.visible_device(
        index, torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))}


@contextlib.contextmanager
def execution_trace(path: str | None) -> Iterator[None]:
    """PARAM's --et: PyTorch's execution trace observer around the run, its JSON written
    to ``path`` when it stops (nothing when ``path`` is None)."""
    if path is None:
        yield
        return
    observer = torch.profiler.ExecutionTraceObserver()
    observer.register_callback(path)
    observer.start()
    try:
        yield
    finally:
        observer.stop()
        observer.unregister_callback()
        log.info("execution trace: %s", path)


def configure_logging(level_name: str) -> None:
    level = logging.getLevelName(level_name.upper())
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {level_name!r}")
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("dlbench").setLevel(level)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        configure_logging(args.log_level)
    except ValueError as exc:
        parser.error(f"-l/--log-level: {exc}")
    if args.version:
        print(f"dlbench.ops {dlbench.__version__} (PARAM train compute config grammar)")
        return 0
    if not args.config:
        parser.error("-c/--config is required")
    if args.warmup < 0 or args.iteration < 0:
        parser.error("-w/--warmup and -i/--iteration must be >= 0")
    for flag in ("ncu_warmup", "ncu_iteration", "nsys_warmup", "nsys_iteration"):
        if (getattr(args, flag) or 0) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be >= 0")
    if args.run_batch_size < 1:
        parser.error("--run-batch-size must be >= 1")
    if args.output and os.path.abspath(f"{args.output_prefix}.json") == \
            os.path.abspath(args.output):
        # the result would be written over PARAM's JSON-lines records
        parser.error(f"-o {args.output_prefix} writes {args.output_prefix}.json, the file "
                     "--output names: give them apart")
    try:
        device = parse_device(args.device)
    except ValueError as exc:
        parser.error(f"-d/--device: {exc}")
    try:
        args.compile = compile_mode(args, device)
    except ValueError as exc:
        parser.error(str(exc))
    args.cuda_l2_cache = l2_cache_setting(args, device)
    warn_of_exec_mode(args, device)

    cell = {
        "framework": "pytorch",
        "op_config": args.config,
        "device": "gpu" if device.type == "cuda" else "cpu",
        "torch_device": str(device),
        "backward": args.backward,
        "exec_mode": args.exec_mode,
        "warmup": args.warmup,
        "iterations": args.iteration,
        "cuda_l2_cache": args.cuda_l2_cache,
        "compile": args.compile,
    }
    res = R.new_result(kind="op", cell=cell, study=args.study, cell_id=args.cell_id)
    with recorded(res, args.output):
        # A float32 operator is IEEE float32, as a float32 model cell is, and is held
        # against the float32 peak: PyTorch's default ran its convolutions in TF32.
        precision.set_tf32(device.type, False)
        res["environment"] = torch_environment.collect(device)
        run(args, device, res)
    return exit_code(res)


def run(args: argparse.Namespace, device: torch.device, res: dict[str, Any]) -> None:
    bench_config = load_config(args.config)
    if device.type == "cuda":
        try:
            device = bind_cuda(device)
        except ValueError as exc:
            raise CellError(str(exc)) from None
    options_record = run_options(args, device)
    launches = nsight_launches(args, device, options_record)
    if launches:  # checked before anything runs, like the binaries
        batch_cmd, batch_env = batch_command(args), batch_environment(args, device)
    if device.type == "cuda" and args.cuda_l2_cache == "off" and args.exec_mode != "discrete":
        log.warning("--cuda-l2-cache off applies to discrete mode only; %s keeps the L2 warm",
                    args.exec_mode)
    options = ExecOptions(device=device, warmup=args.warmup, iterations=args.iteration,
                          backward=args.backward, exec_mode=args.exec_mode,
                          cuda_l2_cache=args.cuda_l2_cache == "on", profile=args.profile,
                          compile=args.compile)
    seed(0)
    # by UUID, as the model runner: the same GPU whatever order CUDA numbers them in
    mon = monitor.ResourceMonitor(args.monitor_interval_ms, gpus=monitored_gpus(device, 1),
                                  window=MONITOR_WINDOW)
    jsonl_path = f"{args.output_prefix}.json"
    with output.JsonlWriter(jsonl_path, append=args.append) as writer:
        writer.run_record(options_record, output.sys_info(device))
        bench = Benchmark(options, writer, resume_id=args.resume_id, stop_id=args.stop_id)
        if launches:
            bench.nsight = nsight.Nsight(
                launches, args.run_batch_size, batch_run_options(args, device),
                args.output_prefix, batch_cmd, batch_env, writer, bench.error)
        profiler = contextlib.nullcontext()
        if args.profile:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            profiler = torch.profiler.profile(activities=activities)
        et_file = f"{args.output_prefix}_et.json" if args.et else None
        with (execution_trace(et_file), profiler as prof,
              torch.autograd.profiler.record_function(f"[param|{device}]"), mon):
            bench.run(bench_config)
        if bench.nsight is not None:
            bench.nsight.run()
        writer.finish()
        trace_file = None
        if args.profile:
            trace_file = f"{args.output_prefix}_trace.json"
            prof.export_chrome_trace(trace_file)
            writer.trace(trace_file)
    log.info("benchmark result: %s", jsonl_path)

    res["measurements"] = bench.measurements
    res["extra"] = {"jsonl": jsonl_path, "trace_file": trace_file, "et_file": et_file,
                    "errors": bench.errors,
                    "inputs_run": bench.inputs_run, "run_options": {
                        k: v for k, v in options_record.items() if k != "cmd_args"}}
    if bench.nsight is not None:
        res["extra"]["nsight"] = bench.nsight.records
    monitor.attach(res, args.output, mon, items=0.0)  # no samples per joule of an input
    if bench.measurements:
        res["status"] = "ok"
    elif bench.errors:
        # Nothing measured because no input could be allocated: the cell is out of memory.
        oom = all(error.get("oom") for error in bench.errors)
        R.finish(res, "oom" if oom else "failed", failure_line(args.config, bench.errors))
    else:
        R.finish(res, "skipped", "no operator input was measured (resume/stop ids or -i 0)")
