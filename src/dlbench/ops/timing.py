"""Timing one operator input, in PARAM's three execution modes.

discrete: every call is timed on its own (GPU synchronized before and after); with
    ``cuda_l2_cache`` off, a GPU buffer larger than the L2 cache is written before each
    call so the operator starts from a cold L2.
continuous: on a GPU, the calls run back to back and one time per loop is recorded (the
    mean per call); backward is the forward+backward loop's mean minus the forward mean.
continuous_events: on a GPU, back-to-back calls each bracketed by CUDA events.
On a CPU both continuous modes time each call, as PARAM does.

Backward is always timed separately from forward: the forward output is made, its
gradient (ones) is created untimed, then ``torch.autograd.backward`` is timed. Leaf
gradients are reset to None before every backward so each iteration does the same work.
Forward-only discrete calls drop their result inside the timed region, as timeit does.

Times are milliseconds and GPU memory peaks are MiB, in PARAM's metric layout.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dlbench import nvtx_ranges, stages
from dlbench.ops import modes
from dlbench.ops.grammar import tensors_in
from dlbench.ops.modes import Prepared, grad_targets
from dlbench.ops.registry import Operator, grad_mode
from dlbench.pytorch import execution

log = logging.getLogger("dlbench.ops")

EXEC_MODES = ("discrete", "continuous", "continuous_events")
# Used when the device does not report its L2 size; larger than any current GPU's L2.
FALLBACK_L2_BYTES = 256 * 2**20


@dataclass
class ExecOptions:
    device: torch.device
    warmup: int = 1
    iterations: int = 1
    backward: bool = False
    exec_mode: str = "discrete"
    cuda_l2_cache: bool = True  # True: leave the L2 warm between calls ("on")
    profile: bool = False
    compile: str = "eager"  # the compile axis (dlbench.ops.modes)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def l2_flush_bytes(props: Any) -> tuple[int, str | None]:
    """Size of the flush buffer for a device with properties ``props``, and a message when
    the size had to be guessed. Twice the L2 size: with the cache's hashed, not strictly
    LRU, replacement a single L2-sized write can leave lines of the previous call."""
    size = getattr(props, "L2_cache_size", None)
    if isinstance(size, int) and size > 0:
        return 2 * size, None
    name = getattr(props, "name", "this GPU")
    return FALLBACK_L2_BYTES, (f"{name} does not report L2_cache_size; flushing the L2 with "
                               f"{FALLBACK_L2_BYTES // 2**20} MiB writes instead")


class L2Flusher:
    """Evicts the GPU's L2 by writing a device buffer larger than it."""

    def __init__(self, device: torch.device):
        size, message = l2_flush_bytes(torch.cuda.get_device_properties(device))
        if message:
            log.warning(message)
        self.nbytes = size
        self.buffer = torch.empty(size, dtype=torch.uint8, device=device)
        self.count = 0

    def flush(self) -> None:
        """Between two measured calls, inside the input's "measure" range: its own NVTX
        range tells the flush kernel apart (ncu leaves it out of a profile)."""
        self.count += 1
        nvtx_ranges.push(nvtx_ranges.L2_FLUSH)
        try:
            self.buffer.fill_(self.count % 251)
        finally:
            nvtx_ranges.pop()


def new_metrics(backward: bool) -> dict[str, dict[str, list[float]]]:
    passes = ("forward", "backward") if backward else ("forward",)
    return {p: {f"{tag}.{metric}": [] for tag in ("warmup", "measure")
                for metric in ("time", "gpu.memory")} for p in passes}


class Executor:
    """Runs one built operator on one input: warmup, then the measured iterations."""

    def __init__(self, options: ExecOptions):
        if options.exec_mode not in EXEC_MODES:
            raise ValueError(f"exec mode must be one of {EXEC_MODES}, got {options.exec_mode!r}")
        self.o = options
        self.flusher: L2Flusher | None = None
        if options.cuda and not options.cuda_l2_cache and options.exec_mode == "discrete":
            self.flusher = L2Flusher(options.device)
        self.notes: list[str] = []
        self.facts: dict[str, Any] = {}

    def run(self, op: Operator, args: list[Any], kwargs: dict[str, Any], label: str
            ) -> dict[str, dict[str, list[float]]]:
        """PARAM's metrics for one input; ``label`` is ``op_name:run_id`` for trace ranges.
        A compiled or captured input leaves what preparing it found in ``self.facts``."""
        self.notes = []
        self.facts = {}
        metrics = new_metrics(self.o.backward)
        fn, fargs, fkwargs = op.call(args, kwargs)
        leaves = [t for t in tensors_in([args, kwargs]) if t.requires_grad and t.is_leaf]
        leaves += op.trainable()
        loop = self._discrete if self.o.exec_mode == "discrete" or not self.o.cuda else (
            self._continuous if self.o.exec_mode == "continuous" else self._events)
        gc_was_enabled = gc.isenabled()
        gc.disable()  # as timeit does: no collector pauses inside timed calls
        try:
            with grad_mode(op):
                with (stages.stage("compile") if self.o.compile != "eager"
                      else contextlib.nullcontext()):
                    prepared = modes.prepare(self.o.compile, fn, fargs, fkwargs, leaves,
                                             self.o.backward, self.o.device)
                self.facts = prepared.facts
                for tag, count in (("warmup", self.o.warmup), ("measure", self.o.iterations)):
                    if tag == "measure" and prepared.counts is not None:
                        before = execution.DynamoCounts.now()
                    if count > 0:
                        with self._phase(tag):
                            loop(count, prepared, metrics, tag, label)
                if prepared.counts is not None:
                    self._dynamo_facts(prepared.counts, before)
                if self.o.compile != "eager":
                    with stages.stage("accuracy"):
                        self.facts["accuracy"] = modes.accuracy(prepared, fn, fargs, fkwargs)
        finally:
            for leaf in leaves:
                leaf.grad = None
            if gc_was_enabled:
                gc.enable()
        return metrics

    def _dynamo_facts(self, first: execution.DynamoCounts,
                      before_measure: execution.DynamoCounts) -> None:
        """Recompilations after the first compiled call; one inside the measured calls is
        flagged (those times include compiling), not hidden."""
        now = execution.DynamoCounts.now()
        self.facts["recompilations"] = now.frames - first.frames
        measured = now.frames - before_measure.frames
        self.facts["recompilations_measured"] = measured
        if measured:
            self.facts["recompiled_in_measurement"] = True

    # -- helpers ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _phase(self, tag: str) -> Iterator[None]:
        """The input's ``warmup`` or ``measure`` calls inside the NVTX range of that name
        that every runner marks (the ncu and nsys jobs select ``measure``), with PARAM's
        ``param_bench:<tag>`` nested in it (PARAM's own ncu filter; the profiler's label
        when tracing)."""
        text = f"param_bench:{tag}"
        with contextlib.ExitStack() as stack:
            stack.enter_context(stages.stage(tag))
            for name in (tag, text):
                nvtx_ranges.push(name)
                stack.callback(nvtx_ranges.pop)
            if self.o.profile:
                stack.enter_context(torch.autograd.profiler.record_function(f"[{text}]"))
            yield

    @contextlib.contextmanager
    def _range(self, text: str) -> Iterator[None]:
        """NVTX range on a GPU (for nsys/ncu filters) and profiler label when tracing."""
        with contextlib.ExitStack() as stack:
            if self.o.cuda:
                stack.enter_context(torch.cuda.nvtx.range(text))
            if self.o.profile:
                stack.enter_context(torch.autograd.profiler.record_function(f"[{text}]"))
            yield

    def _sync(self) -> None:
        if self.o.cuda:
            torch.cuda.synchronize(self.o.device)

    def _reset_peak(self) -> None:
        if self.o.cuda:
            torch.cuda.reset_peak_memory_stats(self.o.device)

    def _peak_mib(self) -> float:
        return torch.cuda.max_memory_allocated(self.o.device) / 2**20 if self.o.cuda else 0.0

    def _backward_targets(self, out: Any) -> list[torch.Tensor]:
        targets = grad_targets(out)
        if not targets:
            note = "backward skipped: the forward output has no autograd history"
            if note not in self.notes:
                self.notes.append(note)
        return targets

    def _record(self, metrics: dict, pass_: str, tag: str, ms: float) -> None:
        metrics[pass_][f"{tag}.time"].append(ms)
        if self.o.cuda:
            metrics[pass_][f"{tag}.gpu.memory"].append(self._peak_mib())

    # -- the three loops -------------------------------------------------------------

    def _discrete(self, count: int, p: Prepared, metrics: dict, tag: str, label: str) -> None:
        fn, args, kwargs, leaves, backward = p.fn, p.args, p.kwargs, p.leaves, p.backward
        cuda, flusher, perf = self.o.cuda, self.flusher, time.perf_counter
        sync = torch.cuda.synchronize
        device = self.o.device
        fw_label, bw_label = f"{label}:{tag}:forward", f"{label}:{tag}:backward"
        for _ in range(count):
            if flusher is not None:
                flusher.flush()
            self._reset_peak()
            self._sync()
            if not self.o.backward:
                # The result is dropped inside the timed region, as timeit does: freeing
                # the output (and its autograd graph) is part of a forward-only call.
                with self._range(fw_label):
                    start = perf()
                    fn(*args, **kwargs)
                    if cuda:
                        sync(device)
                    stop = perf()
                self._record(metrics, "forward", tag, (stop - start) * 1e3)
                continue
            with self._range(fw_label):
                start = perf()
                out = fn(*args, **kwargs)
                if cuda:
                    sync(device)
                stop = perf()
            self._record(metrics, "forward", tag, (stop - start) * 1e3)
            # With backward the graph is freed by the (timed) backward call.
            targets = self._backward_targets(out)
            del out
            if not targets:
                continue
            grads = [torch.ones_like(t) for t in targets]
            for leaf in leaves:
                leaf.grad = None
            if flusher is not None:
                flusher.flush()
            self._reset_peak()
            self._sync()
            with self._range(bw_label):
                start = perf()
                backward(targets, grads)
                if cuda:
                    sync(device)
                stop = perf()
            self._record(metrics, "backward", tag, (stop - start) * 1e3)
            del targets, grads

    def _continuous(self, count: int, p: Prepared, metrics: dict, tag: str, label: str) -> None:
        fn, args, kwargs, leaves, backward = p.fn, p.args, p.kwargs, p.leaves, p.backward
        perf = time.perf_counter
        self._reset_peak()
        self._sync()
        with self._range(f"{label}:{tag}:forward"):
            start = perf()
            for _ in range(count):
                out = fn(*args, **kwargs)
            self._sync()
            fw_ms = (perf() - start) * 1e3 / count
        self._record(metrics, "forward", tag, fw_ms)
        if not self.o.backward or not self._backward_targets(out):
            return
        grads = [torch.ones_like(t) for t in grad_targets(out)]
        del out
        self._reset_peak()
        self._sync()
        with self._range(f"{label}:{tag}:forward_backward"):
            start = perf()
            for _ in range(count):
                targets = grad_targets(fn(*args, **kwargs))
                for leaf in leaves:
                    leaf.grad = None
                backward(targets, grads)
            self._sync()
            both_ms = (perf() - start) * 1e3 / count
        self._record(metrics, "backward", tag, both_ms - fw_ms)

    def _events(self, count: int, p: Prepared, metrics: dict, tag: str, label: str) -> None:
        fn, args, kwargs, leaves, backward = p.fn, p.args, p.kwargs, p.leaves, p.backward

        def pairs() -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
            return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                    for _ in range(count)]

        fw_events = pairs()
        self._reset_peak()
        self._sync()
        with self._range(f"{label}:{tag}:forward"):
            for begin, end in fw_events:
                begin.record()
                out = fn(*args, **kwargs)
                end.record()
            self._sync()
        peak = self._peak_mib()
        metrics["forward"][f"{tag}.time"].extend(b.elapsed_time(e) for b, e in fw_events)
        metrics["forward"][f"{tag}.gpu.memory"].append(peak)
        if not self.o.backward or not self._backward_targets(out):
            return
        grads = [torch.ones_like(t) for t in grad_targets(out)]
        del out
        bw_events = pairs()
        self._reset_peak()
        self._sync()
        with self._range(f"{label}:{tag}:backward"):
            for begin, end in bw_events:
                targets = grad_targets(fn(*args, **kwargs))
                for leaf in leaves:
                    leaf.grad = None
                begin.record()
                backward(targets, grads)
                end.record()
            self._sync()
        metrics["backward"][f"{tag}.time"].extend(b.elapsed_time(e) for b, e in bw_events)
        metrics["backward"][f"{tag}.gpu.memory"].append(self._peak_mib())
