"""The one measurement harness every runner uses.

``timed_loop`` runs warmup iterations untimed and then the measured ones, each timed on
its own from the request of its input to the device having finished it (the framework
supplies ``sync``), with the wait for input recorded apart from compute. Hooks (the
resource monitor, torch.profiler) and NVTX ranges see the same window in every cell kind:
the measured iterations only.

A framework whose runner has nothing special to do (one process, one device) only builds
a ``Workload`` and calls ``main``: flags, result, failures, timing, monitor and writing
are done here (see tests/plugins/numpy_framework for a whole framework in one file).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dlbench import axes, cellrun, cli, monitor, nvtx_ranges, stages
from dlbench import result as R


class Hook(Protocol):
    """Told when the measured iterations start, after each one (outside its timing) and
    when they end."""

    def measure_start(self) -> None: ...
    def iteration_end(self) -> None: ...
    def measure_end(self) -> None: ...


# Warm-up until steady (the warmup_until_steady axis): past a cell's warm-up iterations,
# more until the last STEADY_WINDOW iterations' times move less than drift.NOTABLE across
# them (Sen's slope, dlbench.drift: a few outliers do not move it), at most
# STEADY_MAX_ITERATIONS more or STEADY_MAX_S of warm-up in all.
STEADY_WINDOW = 20
STEADY_MAX_ITERATIONS = 1000
STEADY_MAX_S = 300.0


@dataclass
class LoopTimes:
    times_s: list[float]  # per measured iteration, seconds
    data_wait_s: float  # of those, waiting for input
    compute_s: float  # the rest
    warmup: dict[str, Any] | None = None  # a warm-up until steady: what it ran and found


@dataclass(frozen=True)
class UntilSteady:
    """Warm up until steady. ``agree(done)`` is every process's verdict from each one's
    own (a data-parallel cell's processes must warm up alike: each step has collectives);
    one process agrees with itself."""

    agree: Callable[[bool], bool] = lambda done: done


def timed_loop(fetch: Callable[[], Any], step: Callable[[Any], Any], sync: Callable[[], None],
               warmup: int, measured: int, *, hooks: Sequence[Hook] = (),
               steady: UntilSteady | None = None) -> LoopTimes:
    """``fetch()`` gives an iteration's input, ``step(batch)`` runs it and ``sync()`` waits
    until the device has finished; each iteration ends synchronised, so the next one starts
    from an idle device. With ``steady``, warm-up goes on past ``warmup`` iterations until
    the times settle (``warm_up_until_steady``)."""
    # Each range only around work: a profiler that captures the first "measure" range
    # (nsys) must not stop at an empty one.
    warmed = None
    if warmup > 0 or steady is not None:
        nvtx_ranges.push("warmup")
        with stages.stage("warmup"):
            if steady is None:
                for _ in range(warmup):
                    step(fetch())
                    sync()
            else:
                warmed = warm_up_until_steady(fetch, step, sync, warmup, steady)
        nvtx_ranges.pop()
    if measured > 0:
        nvtx_ranges.push("measure")
    try:
        with stages.stage("measure"):  # the hooks' start and end too
            loop = _measured(fetch, step, sync, measured, hooks)
    finally:
        if measured > 0:
            nvtx_ranges.pop()
    loop.warmup = warmed
    return loop


def warm_up_until_steady(fetch: Callable[[], Any], step: Callable[[Any], Any],
                         sync: Callable[[], None], warmup: int, steady: UntilSteady
                         ) -> dict[str, Any]:
    """At least ``warmup`` iterations (and STEADY_WINDOW), then more until the last
    STEADY_WINDOW have settled or a limit is reached; what ran, as the result records it:
    ``iterations``, ``settled`` (false: a limit stopped it), ``seconds`` and ``drift`` (of
    the last window, a share of its median)."""
    from dlbench import drift

    clock = time.perf_counter
    times: list[float] = []
    began = clock()
    while True:
        t0 = clock()
        step(fetch())
        sync()
        times.append(clock() - t0)
        if len(times) < max(warmup, STEADY_WINDOW):
            continue
        moving = drift.trend(times[-STEADY_WINDOW:])
        settled = moving is not None and abs(moving.change) < drift.NOTABLE
        spent = len(times) - warmup >= STEADY_MAX_ITERATIONS or clock() - began >= STEADY_MAX_S
        if steady.agree(settled or spent):
            return {"iterations": len(times), "settled": settled,
                    "seconds": clock() - began,
                    "drift": moving.change if moving is not None else None}


def _measured(fetch: Callable[[], Any], step: Callable[[Any], Any], sync: Callable[[], None],
              measured: int, hooks: Sequence[Hook]) -> LoopTimes:
    times: list[float] = []
    data_wait = compute = 0.0
    clock = time.perf_counter
    for hook in hooks:
        hook.measure_start()
    try:
        for i in range(measured):
            nvtx_ranges.push(f"batch {i}")
            try:
                t0 = clock()
                batch = fetch()
                t1 = clock()
                step(batch)
                sync()
                t2 = clock()
            finally:
                nvtx_ranges.pop()
            times.append(t2 - t0)
            data_wait += t1 - t0
            compute += t2 - t1
            for hook in hooks:
                hook.iteration_end()
    finally:
        for hook in hooks:
            hook.measure_end()
    return LoopTimes(times, data_wait, compute)


# A device-timed call's stream is held while the host launches it, for a whole number of
# these (at least one): processes of one collective then mostly hold alike, so the hold
# does not set one rank's kernels off before its peers'.
HOLD_MIN_S = 50e-6
# The sleep kernel's cycles timed once to learn its rate (about a millisecond).
HOLD_CALIBRATION_CYCLES = 2_000_000


class StreamHold:
    """A kernel that only waits (``torch.cuda._sleep``), holding the current stream before
    a call timed by CUDA events.

    On an idle stream a start event fires as soon as it is recorded, and the device then
    waits for the host to launch the call: the events would time the launch (a small NCCL
    collective's ~20 µs on an H200, more than its kernels). ``hold()`` queues the waiting
    kernel for twice the median of the last three launches (``launched``), rounded up to
    a multiple of HOLD_MIN_S, so that the call is queued when the start event fires and
    the events time the device's work alone. A launch longer than its hold is counted
    (``late_launches``: those calls' times include part of it)."""

    def __init__(self) -> None:
        self._cycles_per_s = _sleep_cycles_per_second()
        self._launch_s: list[float] = []
        self._hold_s: list[float] = []

    def hold(self) -> None:
        import torch

        recent = sorted(self._launch_s[-3:])
        twice = 2 * recent[len(recent) // 2] if recent else 0.0
        hold = HOLD_MIN_S * max(1, math.ceil(twice / HOLD_MIN_S))
        torch.cuda._sleep(int(hold * self._cycles_per_s))
        self._hold_s.append(hold)

    def launched(self, seconds: float) -> None:
        """The host's time to launch the call just held for."""
        self._launch_s.append(seconds)

    def facts(self, last: int) -> dict[str, Any]:
        """Of the ``last`` calls: the median hold before them and how many launches
        outlasted theirs."""
        holds = sorted(self._hold_s[-last:])
        late = sum(launch > hold for launch, hold in
                   zip(self._launch_s[-last:], self._hold_s[-last:], strict=True))
        return {"device_hold_s": holds[len(holds) // 2] if holds else None,
                "late_launches": late}


class DeviceTimedStep:
    """``step`` between two CUDA events recorded on the current stream, the stream held
    while the host launches it (``StreamHold``): the device's time of each call (PARAM's
    --use-device-time). Run in ``timed_loop``, whose per-iteration sync completes the
    events; the events for ``calls`` calls (warmup and measured) are made here, outside
    any timed region."""

    def __init__(self, step: Callable[[Any], Any], calls: int) -> None:
        import torch

        self._step = step
        self._events = [(torch.cuda.Event(enable_timing=True),
                         torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        self._calls = 0
        self._hold = StreamHold()

    def __call__(self, batch: Any) -> Any:
        start, end = self._events[self._calls]
        self._calls += 1
        self._hold.hold()
        start.record()
        began = time.perf_counter()
        out = self._step(batch)
        self._hold.launched(time.perf_counter() - began)
        end.record()
        return out

    def times(self, last: int) -> list[float]:
        """Seconds of each of the ``last`` calls made (the measured ones)."""
        done = self._events[self._calls - last:self._calls]
        return [start.elapsed_time(end) / 1e3 for start, end in done]

    def facts(self, last: int) -> dict[str, Any]:
        """Of the ``last`` calls: the median hold before them and how many launches
        outlasted theirs."""
        return self._hold.facts(last)


def _sleep_cycles_per_second() -> float:
    """How many of ``torch.cuda._sleep``'s cycles the device spins a second (its clock)."""
    import torch

    torch.cuda._sleep(1000)  # loaded before it is timed
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    torch.cuda._sleep(HOLD_CALIBRATION_CYCLES)
    end.record()
    end.synchronize()
    return HOLD_CALIBRATION_CYCLES / (start.elapsed_time(end) / 1e3)


@dataclass
class Workload:
    """What a framework builds for one model cell."""

    fetch: Callable[[], Any]
    step: Callable[[Any], Any]
    sync: Callable[[], None]
    items_per_iteration: float  # samples per iteration (all devices)
    parameters: int | None = None
    flops_per_iteration: float | None = None
    real_data: bool = False  # False: no input pipeline, so no data wait is reported
    gpus: list[int | str] = field(default_factory=list)  # NVML ids the monitor samples
    facts: dict[str, Any] = field(default_factory=dict)  # measurement extra
    cell_facts: dict[str, Any] = field(default_factory=dict)  # result extra
    close: Callable[[], None] = lambda: None


def pass_of(args: argparse.Namespace) -> str:
    if getattr(args, "data_loader_only", False):
        return "loader"
    return "inference" if args.forward_only else "training"


def measure(work: Workload, args: argparse.Namespace, res: dict[str, Any],
            hooks: Sequence[Hook] = ()) -> dict[str, Any]:
    """Time a workload with the cell's warmup and measured iterations; its measurement."""
    try:
        loop = timed_loop(work.fetch, work.step, work.sync, args.num_warmup_batches,
                          args.num_batches, hooks=hooks, steady=until_steady(args))
    finally:
        work.close()
    res["extra"].update(work.cell_facts)
    return R.measurement(
        name=args.model, pass_=pass_of(args), times_s=loop.times_s,
        items_per_iteration=work.items_per_iteration, parameters=work.parameters,
        flops_per_iteration=work.flops_per_iteration,
        data_wait_s=loop.data_wait_s if work.real_data else None,
        compute_s=loop.compute_s if work.real_data else sum(loop.times_s),
        extra={**work.facts, **warmup_facts(loop)})


def until_steady(args: argparse.Namespace,
                 agree: Callable[[bool], bool] | None = None) -> UntilSteady | None:
    """The cell's warm-up until steady, where its ``--warmup_until_steady`` asks for it."""
    if not getattr(args, "warmup_until_steady", False):
        return None
    return UntilSteady(agree) if agree is not None else UntilSteady()


@dataclass(frozen=True)
class InputSplit:
    """A data-parallel cell's split of its measured time into waiting for input and the
    rest, taken from the rank that waited longest for input (``rank``), with every rank's
    wait beside it.

    A step's collectives make every rank as slow as the slowest: a rank starved of input
    waits in its loader while the others wait in the gradient all-reduce, which counts as
    their compute. Rank 0's split alone would call a cell bound by one rank's input
    compute-bound."""

    data_wait_s: float
    compute_s: float
    rank: int
    ranks_data_wait_s: list[float]

    def facts(self) -> dict[str, Any]:
        """The measurement's extra: whose split it is and every rank's wait."""
        return {"data_wait_rank": self.rank, "ranks_data_wait_s": self.ranks_data_wait_s}


def input_split(splits: Sequence[tuple[float, float]]) -> InputSplit:
    """Of every rank's (data_wait_s, compute_s), in rank order, that of the rank that
    waited longest for input (the lowest rank of those that waited alike)."""
    if not splits:
        raise ValueError("no rank's split of its measured time")
    waits = [float(wait) for wait, _ in splits]
    rank = waits.index(max(waits))
    return InputSplit(waits[rank], float(splits[rank][1]), rank, waits)


def warmup_facts(loop: LoopTimes) -> dict[str, Any]:
    """A measurement's extra for its warm-up until steady (nothing for a fixed one)."""
    return {"warmup": loop.warmup} if loop.warmup is not None else {}


def parser(framework: str, prog: str | None = None) -> argparse.ArgumentParser:
    """A model runner's flags: the axis table's for this framework, and the monitor's."""
    p = cli.model_runner_parser(prog or f"python -m {framework}", framework)
    monitor.add_arguments(p)
    return p


def main(framework: str, build: Callable[[argparse.Namespace], Workload],
         environment: Callable[[argparse.Namespace], dict[str, Any]],
         argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """A whole model runner: parse the flags, build the workload, time it, write the
    result (failures included, as cellrun.recorded does for every runner)."""
    p = parser(framework, prog)
    args = p.parse_args(argv)
    cli.check_minimums(p, args, framework)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    res = R.new_result(kind="loader" if args.data_loader_only else "model",
                       cell=axes.cell_from_args("model", framework, framework, args),
                       study=args.study, cell_id=args.cell_id)
    with cellrun.recorded(res, args.output or None):
        with stages.stage("environment"):
            res["environment"] = environment(args)
        with stages.stage("build"):
            work = build(args)
        mon = monitor.ResourceMonitor(args.monitor_interval_ms, gpus=work.gpus)
        res["measurements"] = [measure(work, args, res, hooks=[mon])]
        monitor.attach(res, args.output, mon)
        res["status"] = "ok"
    return cellrun.exit_code(res)
