"""Walks a benchmark config: operator -> config -> build -> input, runs each input.

Ids are PARAM's: an input runs as ``<config>|<build>|<input>`` (e.g. ``0|0|3_1`` for a
range-expanded input), and ``--resume-id``/``--stop_id`` match ``<op_name>|<id>``: a
resume id skips everything before it, a stop id stops before it (exclusive).

A bad operator, build or input spec (an operator with an empty ``config`` or ``input``
list is one: it would run nothing), or an input that raises, is logged as one line,
recorded, and skipped; the rest of the config still runs. The file itself is read by
``configfile``, which fails the whole cell on a file that holds no operators.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from dlbench import stages
from dlbench.cellrun import is_oom, one_line
from dlbench.ops import cost, grammar, iterators, output, precheck, registry
from dlbench.ops.configfile import json_type, shown
from dlbench.ops.grammar import SpecError
from dlbench.ops.iterators import ConfigItem
from dlbench.ops.precheck import OP_SHAPE
from dlbench.ops.registry import Operator, OpError
from dlbench.ops.timing import ExecOptions, Executor

log = logging.getLogger("dlbench.ops")



class StopBenchmark(Exception):
    pass


def free_memory(device: torch.device) -> int | None:
    """The bytes free on ``device`` now: a GPU's (CUDA's own count), else the host's
    available memory (what it can give without swapping); None where unknown."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 (no count: inputs are made as before)
        return None


def seed(value: int = 0) -> None:
    """Fixed random inputs from run to run (PARAM's init_pytorch)."""
    torch.manual_seed(value)
    random.seed(value)


def to_meta(value: Any) -> Any:
    """The same values with every tensor replaced by a meta tensor of its shape."""
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value, device="meta").requires_grad_(value.requires_grad)
    if isinstance(value, list):
        return [to_meta(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: to_meta(v) for k, v in value.items()}
    return value


@dataclass
class Build:
    """One build of an operator: built lazily, on the first input that runs."""

    factory: Callable[[], Operator]
    item: ConfigItem
    recorded_config: Any  # what the output's "config.build" says (PARAM: as written)
    op: Operator | None = None
    args: tuple[list[Any], dict[str, Any]] | None = None
    meta_op: Operator | None = None
    meta_failed: bool = False
    error: str | None = None
    op_info: dict[str, Any] = field(default_factory=dict)  # the operator's iterators, ...


@dataclass
class Benchmark:
    options: ExecOptions
    writer: output.JsonlWriter
    resume_id: str | None = None
    stop_id: str | None = None
    measurements: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    inputs_run: int = 0
    nsight: Any = None  # dlbench.ops.nsight.Nsight: --ncu/--nsys batches of what ran

    def __post_init__(self) -> None:
        self.executor = Executor(self.options)
        self.skipping = bool(self.resume_id)

    # -- driving ----------------------------------------------------------------------

    def run(self, bench_config: dict[str, Any]) -> None:
        stopped_before_resume = False
        try:
            for op_name, info in bench_config.items():
                self.run_op(op_name, info)
        except StopBenchmark as stop:
            log.info("%s", stop)
            # Reached while still skipping: the resume id may well exist, after it.
            stopped_before_resume = self.skipping
            if stopped_before_resume:
                log.warning("stop id %r comes before resume id %r: nothing ran",
                            self.stop_id, self.resume_id)
        else:
            if self.stop_id:  # said, as a resume id that matches nothing is
                log.warning("stop id %r matched no input: ran to the end of the config",
                            self.stop_id)
        if self.skipping and not stopped_before_resume:
            log.warning("resume id %r matched no input: nothing ran", self.resume_id)
        if self.errors and self.inputs_run:
            # Where some inputs ran the cell stays ok and nothing else counts the failures;
            # where none did, the cell's own error says this (cli.failure_line).
            log.warning("%s", self.failure_summary())

    def failure_summary(self) -> str:
        """One line at the end of the run: how many inputs failed and the first error (the
        others are in the log above and in the result's ``extra.errors``). An error before
        any input ran (an unknown operator) counts as one input."""
        failed = len(self.errors)
        return (f"{failed} of {failed + self.inputs_run} inputs failed; "
                f"first: {self.errors[0]['error']}")

    def run_op(self, op_name: str, info: Any) -> None:
        # the name as it starts a message: quoted when it could not be told apart
        label = op_name if op_name and op_name.strip() == op_name else repr(op_name)
        if not isinstance(info, dict):
            self.error(op_name, None, f"{label}: {OP_SHAPE}, got {json_type(info)}")
            return
        try:
            precheck.check_op_info(info)
            factory = registry.resolve(op_name)
        except (SpecError, OpError) as exc:
            self.error(op_name, None, f"{label}: {exc}" if isinstance(exc, SpecError) else str(exc))
            return
        log.info("### op: %s", op_name)
        for c, config in enumerate(info["config"]):
            cpath = f"config[{c}]"
            if not isinstance(config, dict):
                self.error(op_name, None, f"{op_name}: {cpath}: expected an object with "
                                          f"\"input\" (and \"build\"), got {json_type(config)}")
                continue
            if "input" not in config:
                self.error(op_name, None, f"{op_name}: {cpath}.input: missing")
                continue
            try:
                builds = list(self.builds(info, config, cpath, factory))
                inputs = list(iterators.make_iterator(info.get("input_iterator"), config,
                                                      "input", str(self.options.device), cpath))
            except SpecError as exc:
                self.error(op_name, None, f"{op_name}: {exc}")
                continue
            if not inputs:
                self.error(op_name, None, f"{op_name}: {cpath}.input: an empty list, no "
                                          "inputs to run")
                continue
            for build in builds:
                for item in inputs:
                    self.run_input(op_name, f"{c}|{build.item.id}|{item.id}", build, item)

    def builds(self, info: dict, config: dict, cpath: str,
               factory: Callable[[], Operator]) -> Iterator[Build]:
        spec = config.get("build")
        if not spec:
            # No build spec (or PARAM's empty list): build once without arguments.
            item = ConfigItem("0", {"args": [], "kwargs": {}}, f"{cpath}.build")
            yield Build(factory, item, spec, op_info=info)
            return
        for item in iterators.make_iterator(info.get("build_iterator"), config, "build",
                                            str(self.options.device), cpath):
            yield Build(factory, item, item.config, op_info=info)

    def transition(self, full_id: str) -> bool:
        """True when this input runs; raises StopBenchmark at the stop id."""
        if self.skipping and full_id == self.resume_id:
            self.skipping = False
            log.info("resume id matched [%s]", full_id)
        if full_id == self.stop_id:
            raise StopBenchmark(f"stopped before [{full_id}]")
        return not self.skipping

    def error(self, op_name: str, run_id: str | None, message: str,
              oom: bool = False) -> None:
        message = shown(message)  # one line, whatever names the config holds
        log.error("%s", message)
        self.writer.error_record(op_name, run_id, message)
        self.errors.append({"op_name": op_name, "id": run_id, "error": message, "oom": oom})

    # -- one input --------------------------------------------------------------------

    def run_input(self, op_name: str, run_id: str, build: Build, item: ConfigItem) -> None:
        if not self.transition(f"{op_name}|{run_id}"):
            return
        if build.item.error:
            if build.error is None:
                build.error = build.item.error
                self.error(op_name, run_id, f"{op_name}: {build.item.error}")
            return
        if item.error:
            self.error(op_name, run_id, f"{op_name}: {item.error}")
            return
        final_config = {"build": build.recorded_config, "input": item.config}
        if self.options.warmup == 0 and self.options.iterations == 0:
            # nothing measured; PARAM's way to run the profilers alone
            self.writer.op_record(op_name, run_id, {}, final_config)
            self.queue_for_profiling(op_name, run_id, build, item)
            return
        if not self.ensure_built(op_name, run_id, build):
            return
        log.info("input [%s]", run_id)
        args = kwargs = None
        try:
            with stages.stage("build"):
                args, kwargs = grammar.materialize_args(item.config, self.options.device,
                                                        item.path,
                                                        free_memory(self.options.device))
            metrics = self.executor.run(build.op, args, kwargs, f"{op_name}:{run_id}")
            # The FLOP counter's first use imports and traces for about a second: its own
            # stage, not "other", in the cell's wall time.
            with stages.stage("flop_count"):
                work, counted_on = self.work(build, args, kwargs)
        except Exception as exc:  # an input that fails is recorded; the others still run
            if isinstance(exc, SpecError):
                self.error(op_name, run_id, f"{op_name}: {exc}")
            else:  # an input the allocator cannot hold is out of memory, not a bug
                self.error(op_name, run_id, f"{op_name}: {item.path}: {one_line(exc)}",
                           oom=is_oom(exc))
            return
        finally:
            del args, kwargs
            if self.options.cuda:
                torch.cuda.empty_cache()
        notes = list(self.executor.notes)
        self.writer.op_record(op_name, run_id, metrics, final_config, notes)
        extra = {"exec_mode": self.options.exec_mode, "cost_device": counted_on}
        facts = dict(self.executor.facts)
        if facts.get("accuracy"):
            extra["accuracy"] = facts.pop("accuracy")
        facts.pop("accuracy", None)
        if facts:
            extra["compile"] = facts
        if notes:
            extra["notes"] = notes
        self.measurements += output.measurements(op_name, run_id, metrics, work, final_config,
                                                 extra)
        self.inputs_run += 1
        log_metrics(op_name, run_id, metrics)
        self.queue_for_profiling(op_name, run_id, build, item)

    def queue_for_profiling(self, op_name: str, run_id: str, build: Build,
                            item: ConfigItem) -> None:
        """The input into the batch of its build for --ncu/--nsys (a batch ends with its
        build, or when full)."""
        if self.nsight is not None:
            self.nsight.queue(op_name, run_id.rpartition("|")[0], build.op_info,
                              build.item.config if build.recorded_config else None,
                              item.id, item.config)

    def ensure_built(self, op_name: str, run_id: str, build: Build) -> bool:
        if build.op is not None:
            return True
        if build.error is not None:
            return False
        try:
            with stages.stage("build"):
                args, kwargs = grammar.materialize_args(build.item.config, self.options.device,
                                                        build.item.path,
                                                        free_memory(self.options.device))
                op = build.factory()
                op.build(args, kwargs, self.options.device)
        except Exception as exc:  # a build that fails skips its inputs, nothing else
            if isinstance(exc, SpecError):
                build.error = f"{op_name}: {exc}"
            else:
                build.error = f"{op_name}: {build.item.path}: {one_line(exc)}"
            self.error(op_name, run_id, build.error)
            return False
        build.op, build.args = op, (args, kwargs)
        return True

    def work(self, build: Build, args: list[Any], kwargs: dict[str, Any]
             ) -> tuple[dict[str, dict[str, float | None]], str]:
        """FLOPs and bytes of one call, counted on the meta device when the operator
        allows it, else with one more untimed call on the real device."""
        backward = self.options.backward
        if not build.meta_failed:
            try:
                if build.meta_op is None:
                    op = build.factory()
                    op.build(*to_meta(build.args), "meta")
                    build.meta_op = op
                return cost.count(build.meta_op, to_meta(args), to_meta(kwargs), backward), "meta"
            except Exception as exc:  # no meta kernel, data-dependent shapes, ...
                log.debug("counting on meta failed (%s); counting on %s", one_line(exc),
                          self.options.device)
                build.meta_failed = True
        try:
            return cost.count(build.op, args, kwargs, backward), str(self.options.device)
        except Exception as exc:
            log.warning("could not count FLOPs/bytes: %s", one_line(exc))
            return {}, "none"


def log_metrics(op_name: str, run_id: str, metrics: dict[str, Any]) -> None:
    for pass_, metric in metrics.items():
        times = metric.get("measure.time", [])
        if times:
            log.info("%s [%s] %s: mean %.4f ms over %d", op_name, run_id, pass_,
                     sum(times) / len(times), len(times))
