"""Which RecordIO reader a cell uses (``--data_reader``); no mxnet import, so the workflow
driver and the tests can ask without the MXNet environment.

``mx.io.ImageRecordIter``'s parser starts ``min(preprocess_threads, max(omp_get_num_procs()
/ 2 - 1, 1))`` decoding threads: asking for more than that cap changes nothing. ``auto``
keeps the native reader while the cap covers the threads asked and otherwise takes the
gluon reader, whose worker processes are not capped.
"""

from __future__ import annotations

from dlbench.cellrun import CellError
from dlbench.cpu import usable_cpus

READERS = ("native", "gluon")
AUTO = "auto"
CHOICES = (AUTO, *READERS)  # the data_reader axis's values (dlbench.axes)


def native_thread_cap(cpus: int) -> int:
    """The decoding threads ImageRecordIter really starts on ``cpus`` processors at most."""
    return max(cpus // 2 - 1, 1)


def choose_reader(requested: str, threads: int, cpus: int | None = None) -> str:
    """``native`` or ``gluon``; ``auto`` is native when ``native_thread_cap(cpus) >=
    threads``, else gluon with ``threads`` worker processes."""
    if requested not in CHOICES:
        raise CellError(f"--data_reader {requested!r} is not one of {', '.join(CHOICES)}")
    if requested != AUTO:
        return requested
    cap = native_thread_cap(usable_cpus() if cpus is None else cpus)
    return "native" if cap >= threads else "gluon"
