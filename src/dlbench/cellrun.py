"""What every runner does around its measurement: record, classify failures, write.

A runner builds a result with ``result.new_result``, then runs its measurement inside
``recorded(...)``. Whatever happens (success, out-of-memory, any exception) a result file
is written atomically and the DLBS-style summary lines are printed, so DLBS log parsers
and the workflow both see every cell.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from dlbench import result as R
from dlbench import stages

log = logging.getLogger("dlbench")

# status_alloc_failed: cuBLAS, cuDNN, cuFFT and cuSPARSE out of device memory for a handle
# or workspace (CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)), which a
# batch near the limit meets in its first matmul or its backward thread's.
_OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory",
                "failed to allocate", "cudaerrormemoryallocation", "std::bad_alloc",
                "status_alloc_failed")


class CellError(RuntimeError):
    """A failure to report in one line (bad input, missing framework, bad dataset)."""


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__.lower()
    if "outofmemory" in name:
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _OOM_MARKERS)


def one_line(exc: BaseException) -> str:
    """The exception in one line: its first, and the next one where the first only
    announces it ("Validation error for field 'x':" says its cause on the next)."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    if first.endswith(":") and len(text) > 1:
        first = f"{first} {text[1]}"
    return f"{type(exc).__name__}: {first}" if not isinstance(exc, CellError) else first


def print_dlbs_summary(res: dict[str, Any], stream: Any = None) -> None:
    """The ``__results.*__=`` lines DLBS's log parser reads (times in ms, as DLBS). Every
    value is JSON: DLBS's parser (``DictUtils.add``) runs ``json.loads`` on each one. The
    time and throughput are DLBS's: the mean time, and the samples of an iteration over it
    (``dlbs_samples``), so that the two agree as in DLBS's logs (the result's own
    throughput is at the median, and in the measurement's unit: tokens/s for a language
    model). Only an ``ok`` cell prints its figures (``success_lines``)."""
    stream = stream or sys.stdout

    def line(key: str, value: Any) -> None:
        print(f"__results.{key}__={json.dumps(value)}", file=stream)

    line("status", res["status"])
    if res.get("error"):
        line("status_msg", res["error"])
    if res["status"] == "ok":
        for key, value in success_lines(res):
            line(key, value)
        if title := model_title(res):
            print(f"__exp.model_title__={json.dumps(title)}", file=stream)
    stream.flush()


def success_lines(res: dict[str, Any]) -> list[tuple[str, Any]]:
    """The figures of a cell's (first) measurement, as DLBS's backends print them after a
    run that succeeded. DLBS's tools take their presence as success: ``BenchData.status``
    and its reports count a cell with ``results.time`` > 0 as ok, its log parser one with
    ``results.throughput`` > 0; its backends print none of them after a failure. So a
    cell that failed after its measurement had finished (a monitor series, a result that
    could not be written) keeps them out of the log, its result file still holding them."""
    if not res["measurements"]:
        return []
    first = res["measurements"][0]
    lines: list[tuple[str, Any]] = []
    if len(res["measurements"]) > 1:
        # DLBS has one time per run; an operator config or a message-size sweep has many:
        # the lines below are the first measurement's, and say which it is.
        lines.append(("measurements", len(res["measurements"])))
        lines.append(("measurement", " ".join(
            str(v) for v in (first["name"], first.get("op_name"), first["pass"]) if v)))
    mean = first["time_s"]["mean"]
    # DLBS's np.std: over the iterations themselves (ddof 0); the result's is the sample's
    # (ddof 1)
    n = len(first["times_s"])
    lines += [
        ("time", round(mean * 1000.0, 6)),
        ("time_std", round(first["time_s"]["std"] * math.sqrt((n - 1) / n) * 1000.0, 6)
         if n else None),
        ("throughput", round(dlbs_samples(res, first) / mean, 6) if mean > 0 else None),
        ("time_data", [round(t * 1000.0, 6) for t in first["times_s"]]),
    ]
    return lines


def model_title(res: dict[str, Any]) -> str | None:
    """What DLBS's reports call a model cell's network (``ModelSpec.model_title``); None for
    a cell of no catalogued model (an operator, a collective)."""
    from dlbench import models

    name = (res.get("cell") or {}).get("model")
    if res.get("kind") not in ("model", "llm_inference") or name not in models.names():
        return None
    return models.get(name).model_title


def dlbs_samples(res: dict[str, Any], m: dict[str, Any]) -> float:
    """An iteration's samples as DLBS counts them for ``__results.throughput__``: the
    effective batch, the per-device batch size times the devices of every node. Not the
    measurement's items: a language model's items are its tokens, and a DLBS log of such
    a cell would otherwise hold tokens/s under a key that means samples/s. A cell without
    a batch (an operator, a collective, a calibration) counts its items (iterations)."""
    cell = res.get("cell") or {}
    batch = cell.get("batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        return m["items_per_iteration"]
    # A language-model inference cell has neither axis: one device.
    return batch * (cell.get("num_gpus") or 1) * (cell.get("num_nodes") or 1)


@contextlib.contextmanager
def recorded(res: dict[str, Any], output: str | None, *, write: bool = True) -> Iterator[dict]:
    """Run the body; on exit classify the outcome, stamp times and write ``output``.

    The body sets ``res['status']`` to ``ok`` (or ``skipped``) when it succeeds; an
    exception becomes ``oom`` or ``failed`` with a one-line error, and its traceback goes
    to the log. The exception is not re-raised: the caller decides the exit code from the
    status."""
    startup = stages.process_age_s()
    stages.reset()
    start = time.perf_counter()
    try:
        yield res
        if res["status"] == "failed" and not res["error"]:
            res["status"] = "ok"
    except KeyboardInterrupt:
        R.finish(res, "failed", "interrupted")
        raise
    except BaseException as exc:  # every failure must become a recorded result
        _quiet_worker_exits()
        R.finish(res, "oom" if is_oom(exc) else "failed", one_line(exc))
        # The failure is recorded: an exception raised while its traceback is logged (a
        # signal handler's) must not replace it.
        with contextlib.suppress(Exception):
            if isinstance(exc, CellError):  # bad input: its one line says it all
                log.error("cell failed: %s", exc)
            else:
                log.error("cell failed:\n%s", traceback.format_exc())
    finally:
        if res["finished_at"] is None:
            R.finish(res, res["status"], res["error"])
        res["wall_time_s"] = time.perf_counter() - start
        res["stages_s"] = stages.breakdown(res["wall_time_s"], startup)
        if write:
            # Written first: a result that cannot be written fails the cell, and the
            # summary lines must say so, whatever stopped the write.
            try:
                if output:
                    _write(res, output)
            except BaseException as exc:
                R.finish(res, "failed", f"the result could not be written: {one_line(exc)}")
                raise
            finally:
                print_dlbs_summary(res)


def _quiet_worker_exits() -> None:
    """SIGCHLD back to its default once a cell has failed. PyTorch's DataLoader handles it
    by raising in the main thread whenever a worker has died: after a worker's death has
    failed the cell, the other workers' exits would raise again wherever the failure is
    being recorded, and lose it."""
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def _write(res: dict[str, Any], output: str) -> None:
    """The result to ``output``; where that fails (a disk full, a folder the runner's
    ``--output`` check could not foresee), one line saying so and the result on standard
    error instead, so that the measurement is not lost, and the cell counts as failed."""
    try:
        R.write(res, output)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        log.error("cannot write the result to %s (%s); it follows on standard error",
                  output, why)
        print(json.dumps(res, allow_nan=False), file=sys.stderr, flush=True)
        R.finish(res, "failed", f"the result could not be written to {output}: {why}")


def exit_code(res: dict[str, Any]) -> int:
    """0 for ok and skipped, 1 otherwise (the result file tells the workflow the rest)."""
    return 0 if res["status"] in ("ok", "skipped") else 1
