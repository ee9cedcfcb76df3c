"""``python -m dlbench.ops.batch -s NAME | -f FILE``: one batch of an operator's inputs,
run under ncu or nsys (dlbench.ops.nsight launches it), as PARAM's ``run_batch``.

The config (PARAM's layout: ``op_name``, ``config_build_id``, ``op_info`` whose single
config holds the concrete build and the inputs, each with its ``id``, and ``run_options``)
comes from POSIX shared memory (``-s``) or a file (``-f``). Each input runs its warmup and
measured calls as a measured cell's inputs do, in the same NVTX ranges, and nothing is
written: the tool records what it sees. A config that cannot be read is one line and exit
code 2; an input that fails is logged and the others still run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import replace
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from dlbench import axes
from dlbench.cellrun import one_line
from dlbench.ops import grammar, iterators, output, registry
from dlbench.ops.cli import bind_cuda, parse_device
from dlbench.ops.configfile import json_type, shown
from dlbench.ops.grammar import SpecError
from dlbench.ops.precheck import DATA_GENERATORS
from dlbench.ops.registry import OpError
from dlbench.ops.runner import Benchmark, Build, seed
from dlbench.ops.timing import EXEC_MODES, ExecOptions

log = logging.getLogger("dlbench.ops")


class BatchError(Exception):
    """A batch config that cannot be run: one line."""


def read_shared(name: str) -> Any:
    try:
        shm = shared_memory.SharedMemory(name)
    except (OSError, ValueError) as exc:
        raise BatchError(f"-s {name}: no such shared memory ({one_line(exc)})") from None
    # The creator unlinks it; this process's resource tracker must not (PARAM's workaround
    # for https://bugs.python.org/issue39959).
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    try:
        text = bytes(shm.buf).rstrip(b"\0").decode()
    finally:
        shm.close()
    return parse(text, f"-s {name}")


def read_file(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchError(f"-f {path}: cannot read ({one_line(exc)})") from None
    return parse(text, f"-f {path}")


def parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BatchError(f"{where}: not JSON ({exc})") from None


def field(config: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = config.get(key)
    if not isinstance(value, kind):
        raise BatchError(f"{where}.{key}: missing or {json_type(value)}")
    return value


def options(run_options: dict[str, Any]) -> ExecOptions:
    where = "run_options"
    device = field(run_options, "device", str, where)
    try:
        torch_device = parse_device(device)  # the runner's own reading of -d
    except ValueError as exc:
        raise BatchError(f"{where}.device: {exc}") from None
    mode = run_options.get("op_exec_mode", "discrete")
    if mode not in EXEC_MODES:
        raise BatchError(f"{where}.op_exec_mode: {mode!r} is none of {', '.join(EXEC_MODES)}")
    counts = {}
    for key in ("warmup", "iteration"):
        value = run_options.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BatchError(f"{where}.{key}: {value!r} is no count of iterations")
        counts[key] = value
    compile_mode = run_options.get("compile") or "eager"
    if compile_mode not in axes.compile_modes("ops"):
        raise BatchError(f"{where}.compile: {compile_mode!r} is none of "
                         f"{', '.join(axes.compile_modes('ops'))}")
    return ExecOptions(device=torch_device, warmup=counts["warmup"],
                       iterations=counts["iteration"],
                       backward=run_options.get("pass_type") == "backward", exec_mode=mode,
                       cuda_l2_cache=bool(run_options.get("cuda_l2_cache", False)),
                       compile=compile_mode)


def run_batch(config: Any) -> int:
    """Runs the batch; the number of its inputs that ran."""
    if not isinstance(config, dict):
        raise BatchError(f"the batch config is {json_type(config)}, not an object")
    op_name = field(config, "op_name", str, "config")
    build_id = field(config, "config_build_id", str, "config")
    info = field(config, "op_info", dict, "config")
    entries = field(info, "config", list, "op_info")
    if len(entries) != 1 or not isinstance(entries[0], dict):
        raise BatchError("op_info.config: expected one {\"build\", \"input\"} object")
    if info.get("input_data_generator") not in (None, *DATA_GENERATORS):
        raise BatchError(f"op_info.input_data_generator: unknown data generator "
                         f"{info['input_data_generator']!r}")
    exec_options = options(field(config, "run_options", dict, "config"))
    try:
        factory = registry.resolve(op_name)
    except OpError as exc:
        raise BatchError(str(exc)) from None
    spec = entries[0].get("build")
    build_spec = spec if spec else {"args": [], "kwargs": {}}
    try:
        grammar.check_args(build_spec, "op_info.config[0].build")
    except SpecError as exc:
        raise BatchError(str(exc)) from None
    build_item = iterators.ConfigItem(build_id.rpartition("|")[2],
                                      iterators.normalized(build_spec), "build")
    build = Build(factory, build_item, spec)
    inputs = field(entries[0], "input", list, "op_info.config[0]")
    seed(0)
    if exec_options.cuda:  # "cuda" alone: the one GPU the launch left visible
        try:
            exec_options = replace(exec_options, device=bind_cuda(exec_options.device))
        except ValueError as exc:
            raise BatchError(f"run_options.device: {exc}") from None
    with output.JsonlWriter(os.devnull) as devnull:
        bench = Benchmark(exec_options, devnull)
        for index, item in enumerate(inputs):
            path = f"op_info.config[0].input[{index}]"
            if not isinstance(item, dict):
                bench.error(op_name, None, f"{path}: {json_type(item)}, not an input spec")
                continue
            input_id = str(item.get("id", index))
            spec = {k: v for k, v in item.items() if k != "id"}
            try:
                grammar.check_args(spec, path)
            except SpecError as exc:
                bench.error(op_name, f"{build_id}|{input_id}", str(exc))
                continue
            bench.run_input(op_name, f"{build_id}|{input_id}", build,
                            iterators.ConfigItem(input_id, iterators.normalized(spec), path))
    return bench.inputs_run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.ops.batch",
                                description="One batch of operator inputs (under ncu/nsys)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-s", "--shm", help="The shared memory buffer name for the config.")
    source.add_argument("-f", "--file", help="The file name for the config.")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="Increase log output verbosity.")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        config = read_shared(args.shm) if args.shm else read_file(args.file)
        ran = run_batch(config)
    except BatchError as exc:
        print(f"dlbench.ops.batch: {shown(exc)}", file=sys.stderr)
        return 2
    log.info("batch: %d input(s) ran", ran)
    return 0


if __name__ == "__main__":
    sys.exit(main())
