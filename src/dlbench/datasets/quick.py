"""Cheap structural checks of prepared datasets: headers and file sizes, no record read.

A prepared dataset cut short (a full disk, an interrupted copy, a quota) is worse than a
missing one: LMDB maps ``data.mdb`` into memory, and a read past the end of the file kills
the reader with SIGBUS, which no Python code can catch. Each check here compares what the
format's own header or index declares with the size of its file, before anything maps it.
They cost one ``stat`` and a read of a few hundred bytes per dataset, so ``check`` runs
them first and the workflow runs them for every prepared dataset at every start.

Standard library only: the workflow imports this at parse time.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from dlbench.datasets import FORMATS, failure
from dlbench.datasets import recordio_format as rf
from dlbench.datasets.errors import DatasetError

# LMDB's data.mdb starts with two meta pages; the one with the larger transaction id is
# current. After the 16-byte page header, MDB_meta (64-bit build, little-endian) holds:
# magic, version, address, map size, two 48-byte MDB_db records (the page size is kept in
# the first one's pad field), the last page number used, the transaction id.
LMDB_MAGIC = 0xBEEFC0DE
_PAGE_HEADER = 16
_META = struct.Struct("<II8x8xI44x48xQQ")
_META_END = _PAGE_HEADER + _META.size


class _Meta(NamedTuple):
    magic: int
    version: int
    page_size: int
    last_page: int
    txn_id: int


def _lmdb_meta(fh, offset: int) -> _Meta | None:
    """The meta page at ``offset`` (None: the file ends before it)."""
    fh.seek(offset)
    data = fh.read(_META_END)
    if len(data) < _META_END:
        return None
    return _Meta(*_META.unpack_from(data, _PAGE_HEADER))


def _valid_page_size(size: int) -> bool:
    return 512 <= size <= 65536 and size & (size - 1) == 0


def lmdb_problem(folder: Path) -> str | None:
    """A Caffe LMDB folder whose data.mdb is shorter than its meta pages declare."""
    if not folder.is_dir():
        return f"{folder}: no such LMDB directory"
    data = folder / "data.mdb"
    if not data.is_file():
        return f"{folder}: not an LMDB (no data.mdb)"
    with open(data, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        first = _lmdb_meta(fh, 0)
        if first is None or first.magic != LMDB_MAGIC or not _valid_page_size(first.page_size):
            return f"{data}: not an LMDB (no LMDB meta page at the start; {size} bytes)"
        second = _lmdb_meta(fh, first.page_size)
    if second is None:
        expected = 2 * first.page_size  # LMDB writes both meta pages when it creates a file
        return f"{data}: truncated LMDB: at least {expected} bytes expected, the file has {size}"
    current = second if second.magic == LMDB_MAGIC and second.txn_id > first.txn_id else first
    expected = (current.last_page + 1) * first.page_size
    if size < expected:
        return (f"{data}: truncated LMDB: its meta page declares {expected} bytes "
                f"({current.last_page + 1} pages of {first.page_size}), the file has {size}")
    return None


# A line of the .idx is "key<TAB>offset": a few dozen bytes, so the last one is in the tail.
_IDX_TAIL = 4096


def _last_index_line(idx: Path) -> str:
    """The last non-empty line of the .idx, read from its tail (not the whole index: an
    ImageNet index has 1.28 million lines)."""
    with open(idx, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        start = max(0, size - _IDX_TAIL)
        fh.seek(start)
        lines = fh.read().decode(errors="replace").splitlines()
    if start > 0 and len(lines) > 1:
        lines = lines[1:]  # the first may be a line cut by the seek
    lines = [line for line in lines if line.strip()]
    return lines[-1] if lines else ""


def recordio_problem(path: Path) -> str | None:
    """A RecordIO set whose last indexed record does not lie whole inside the .rec: the
    writers (ours, im2rec) append index lines in write order, so the last line names the
    record that ends furthest into the file."""
    try:
        rec, idx = rf.locate(path)
    except DatasetError as exc:
        return str(exc)
    line = _last_index_line(idx)
    if not line:
        return f"{idx}: empty index"
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return f"{idx}: last line is not 'key<TAB>offset': {line[:80]!r} (a truncated index)"
    key, offset = int(parts[0]), int(parts[1])
    size = rec.stat().st_size
    if offset >= size:
        return (f"{rec}: truncated RecordIO: {idx.name} puts record {key} at byte {offset}, "
                f"the file has {size} bytes")
    try:
        with open(rec, "rb") as fh:
            rf.read_payload(fh, offset, f"{rec} record {key}")
    except DatasetError as exc:
        return f"{exc} (the file has {size} bytes)"
    return None


def _no_problem(path: Path) -> None:
    """ImageFolder: every image is a file of its own, nothing declares a size to compare."""
    return None


PROBES: dict[str, Callable[[Path], str | None]] = {
    "image_folder": _no_problem, "caffe_lmdb": lmdb_problem, "recordio": recordio_problem}


def structural_problem(path: str | os.PathLike, fmt: str) -> str | None:
    """What is structurally wrong with the prepared dataset at ``path`` in format ``fmt``, in
    one line naming the file; None when its headers and sizes agree."""
    if fmt not in PROBES:
        raise DatasetError(f"unknown format {fmt!r}; one of {', '.join(PROBES)}")
    return PROBES[fmt](Path(path))


def quick_problem(prepared_dir: str | os.PathLike) -> str | None:
    """``structural_problem`` of a prepared folder, its format being the folder's name
    (``results/datasets/<name>/<format>``). A folder holding a recorded preparation
    failure has no problem of this kind: the cells reading it report the failure, unless
    the failure no longer holds (``failure.mended``: MXNet installed since)."""
    folder = Path(prepared_dir)
    if (folder / failure.FILENAME).is_file():
        return failure.mended(folder)
    if folder.name not in PROBES:
        return None
    return structural_problem(folder, folder.name)


PREPARED_ROOT = Path("results/datasets")


def prepared_folders(data_dirs: Iterable[str | os.PathLike]) -> list[Path]:
    """The existing folders among ``data_dirs`` that the workflow prepares itself
    (``results/datasets/<name>/<format>``), once each. A user's own tree is never one."""
    folders = {Path(d) for d in data_dirs if d}
    return sorted(f for f in folders
                  if f.parent.parent == PREPARED_ROOT and f.name in FORMATS and f.is_dir())


def broken_prepared(data_dirs: Iterable[str | os.PathLike]) -> list[tuple[Path, str]]:
    """The prepared folders among ``data_dirs`` that fail ``quick_problem``, with why. One
    that cannot be read (permissions, an I/O error on a network filesystem) is left alone:
    that is no proof it is broken, and its readers report it, naming the file."""
    found = []
    for folder in prepared_folders(data_dirs):
        try:
            problem = quick_problem(folder)
        except OSError:
            continue
        if problem:
            found.append((folder, problem))
    return found


def remove_broken_prepared(data_dirs: Iterable[str | os.PathLike],
                           dry_run: Callable[[], bool]) -> list[Path]:
    """Remove the prepared folders among ``data_dirs`` that fail ``quick_problem``, each
    with one line on stderr, so that Snakemake, finding them missing, prepares them again
    (and reruns the cells reading them, whose input is then newer). Return them; a dry
    run only says what it would remove, and returns those (its cells would run again). A
    folder that cannot be removed is a DatasetError."""
    removed = []
    for folder, problem in broken_prepared(data_dirs):
        if dry_run():
            print(f"dlbench: would remove {folder}: {problem}", file=sys.stderr)
            removed.append(folder)
            continue
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            raise DatasetError(f"{problem}; cannot remove {folder} ({exc.strerror})") from None
        print(f"dlbench: removed {folder} to prepare it again: {problem}", file=sys.stderr)
        removed.append(folder)
    return removed
