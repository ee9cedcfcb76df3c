"""Which RecordIO reader a cell uses (``--data_reader``); no mxnet import, so the workflow
driver and the tests can ask without the MXNet environment.

``mx.io.ImageRecordIter``'s parser starts ``min(preprocess_threads, max(omp_get_num_procs()
/ 2 - 1, 1))`` decoding threads: asking for more than that cap changes nothing. ``auto``
keeps the native reader while the cap covers the threads asked and otherwise takes the
gluon reader, whose worker processes are not capped.
"""

from __future__ import annotations

from pathlib import Path

from dlbench.cellrun import CellError
from dlbench.cpu import usable_cpus

READERS = ("native", "gluon")
AUTO = "auto"
CHOICES = (AUTO, *READERS)  # the data_reader axis's values (dlbench.axes)


def native_thread_cap(cpus: int) -> int:
    """The decoding threads ImageRecordIter really starts on ``cpus`` processors at most."""
    return max(cpus // 2 - 1, 1)


def records_at_least(idx: Path, enough: int) -> int:
    """The records an ``.idx`` lists, counted up to ``enough`` (an ImageNet index has 1.28
    million lines: not read whole to learn that it has more than a few)."""
    count = 0
    with open(idx, "rb") as fh:
        for line in fh:
            count += bool(line.strip())
            if count >= enough:
                break
    return count


def native_shortfall(idx: Path, batch: int, parts: int = 1) -> str | None:
    """Why ImageRecordIter cannot serve batches of ``batch`` from the set of ``idx`` read
    by ``parts`` workers, or None: its round_batch takes at most two epochs of a worker's
    share to fill one batch ("number of input images must be bigger than the batch size"),
    so each share needs half a batch of records at least."""
    needed = -(-batch // 2) * parts
    have = records_at_least(idx, needed)
    if have >= needed:
        return None
    share = f" for each of {parts} workers" if parts > 1 else ""
    return (f"MXNet's native RecordIO reader needs half a batch of records ({-(-batch // 2)} "
            f"for --batch_size {batch}){share}; {idx} lists {have}")


def choose_reader(requested: str, threads: int, cpus: int | None = None, *,
                  idx: Path | None = None, batch: int | None = None, parts: int = 1) -> str:
    """``native`` or ``gluon``; ``auto`` is native when ``native_thread_cap(cpus) >=
    threads``, else gluon with ``threads`` worker processes. Given the set's ``idx`` and the
    ``batch``: a set too small for the native reader (``native_shortfall``) takes gluon
    under ``auto``, and fails in one line when native was asked for."""
    if requested not in CHOICES:
        raise CellError(f"--data_reader {requested!r} is not one of {', '.join(CHOICES)}")
    shortfall = None
    if requested != "gluon" and idx is not None and batch is not None:
        shortfall = native_shortfall(idx, batch, parts)
    if requested != AUTO:
        if requested == "native" and shortfall:
            raise CellError(f"--data_reader native: {shortfall} (--data_reader gluon reads it, "
                            "or a smaller batch)")
        return requested
    if shortfall:
        return "gluon"
    cap = native_thread_cap(usable_cpus() if cpus is None else cpus)
    return "native" if cap >= threads else "gluon"
