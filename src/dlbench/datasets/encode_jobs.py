"""Per-image work of the writers, run in a process pool: read, transform, encode.

Results come back in list order, so records are stored in list order whatever the number
of workers, and only a bounded window of chunks is in flight: a writer slower than the
pool does not make results pile up in memory.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import multiprocessing.pool
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from dlbench import subproc
from dlbench.datasets import manifest
from dlbench.datasets.errors import DatasetError

T = TypeVar("T")
R = TypeVar("R")


def _run_chunk(func: Callable[[T], R], chunk: list[T]) -> list[R]:
    return [func(job) for job in chunk]


def _stop_signals_by_default() -> None:
    """A worker's start: a stop signal ends it by the signal's default action (the pool's
    terminate() sends SIGTERM), not by the conversion's handler, which it inherited."""
    for sig in subproc.STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, subproc.STOP_SIGNALS)


@contextlib.contextmanager
def process_pool(workers: int) -> Iterator[multiprocessing.pool.Pool]:
    """A pool of ``workers`` processes that a stop signal (SIGTERM, SIGHUP) ends cleanly.
    The signals wait while the workers are forked: the conversion's handler raising inside
    fork's hooks would be lost ("Exception ignored"), and the conversion go on. Delivered
    once the pool exists, the exception leaves the block and terminate() ends the workers,
    who take the signal by its default action."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, subproc.STOP_SIGNALS)
    try:
        pool = multiprocessing.Pool(workers, initializer=_stop_signals_by_default)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    with pool:  # a signal held is delivered in here: the pool's exit ends the workers
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        yield pool


def ordered_map(func: Callable[[T], R], jobs: Iterable[T], workers: int,
                chunksize: int = 8, window: int = 4) -> Iterator[R]:
    """``map`` over a pool of ``workers`` processes (in this process when 1), in order,
    with at most ``window`` chunks per worker submitted ahead of the consumer."""
    if workers < 1:
        raise DatasetError(f"workers must be >= 1, got {workers}")
    if workers == 1:
        yield from map(func, jobs)
        return
    source = iter(jobs)
    chunks = iter(lambda: list(itertools.islice(source, chunksize)), [])
    with process_pool(workers) as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(_run_chunk, (func, chunk)))
            if len(pending) >= workers * window:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()


def check_options(*, resize: int, quality: int, subset: int) -> None:
    if resize < 0:
        raise DatasetError(f"resize must be >= 0, got {resize}")
    if not 1 <= quality <= 100:
        raise DatasetError(f"quality must be within 1..100, got {quality}")
    if subset < 0:
        raise DatasetError(f"subset must be >= 0, got {subset}")


def check_target(source: str | os.PathLike, out: str | os.PathLike) -> None:
    """The prepared folder replaces ``out``: it must not hold, or be, the source."""
    src, dst = Path(source).resolve(), Path(out).resolve()
    if dst == src or dst in src.parents:
        raise DatasetError(f"{out}: output would replace the source folder {source}")
    if src in dst.parents:
        raise DatasetError(f"{out}: output inside the source folder {source} would be "
                           f"read as a class")
    manifest.check_replaceable(out)


def options_dict(**kwargs: Any) -> dict[str, Any]:
    return dict(sorted(kwargs.items()))
