"""Validate a prepared dataset: it opens, holds what its manifest says, records decode.

First its structure, cheaply (``dlbench.datasets.quick``: file sizes against what the
headers declare, so that a truncated LMDB is reported, not mapped and read into a SIGBUS).
Then every record's container (header, key, Datum shape); image bytes are decoded for an
evenly spaced sample (``sample`` records, or all with ``sample=0``).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from PIL import Image

from dlbench.datasets import failure, manifest
from dlbench.datasets.errors import DatasetError
from dlbench.datasets.imagefolder import scan
from dlbench.datasets.imageops import DECODE_ERRORS, unreadable
from dlbench.datasets.quick import quick_problem, structural_problem

__all__ = ["CHECKS", "check", "quick_problem", "structural_problem"]

DEFAULT_SAMPLE = 64


def _sampled(n: int, sample: int) -> set[int]:
    if sample <= 0 or sample >= n:
        return set(range(n))
    return {i * n // sample for i in range(sample)}


def _decode(data: bytes | Path, where: str) -> tuple[int, int]:
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as img:
            img.load()
            return img.size
    except DECODE_ERRORS as exc:
        raise unreadable(where, exc) from None


def _against_manifest(path: Path, count: int) -> dict[str, Any] | None:
    doc = manifest.read(path if path.is_dir() else path.parent)
    if doc is not None and doc["count"] != count:
        raise DatasetError(f"{path}: manifest says {doc['count']} records, found {count}")
    return doc


def check_image_folder(path: Path, sample: int) -> dict[str, Any]:
    listing = scan(path)
    for i in sorted(_sampled(len(listing), sample)):
        item = listing.items[i]
        _decode(listing.path(item), str(listing.path(item)))
    _against_manifest(path, len(listing))
    return {"count": len(listing), "num_classes": len(listing.classes)}


def check_caffe_lmdb(path: Path, sample: int) -> dict[str, Any]:
    import lmdb

    from dlbench.datasets import datum

    # check() has compared data.mdb's size with its meta pages: mapping it cannot SIGBUS.
    try:
        env = lmdb.open(str(path), readonly=True, lock=False, readahead=False, subdir=True)
    except lmdb.Error as exc:
        raise DatasetError(f"{path}: not an LMDB ({exc})") from None
    labels: set[int] = set()
    try:
        count = env.stat()["entries"]
        if count == 0:
            raise DatasetError(f"{path}: empty LMDB")
        decode = _sampled(count, sample)
        with env.begin() as txn:
            for i, (key, value) in enumerate(txn.cursor()):
                where = f"{path} key {bytes(key).decode(errors='replace')}"
                d = datum.parse(value, where)
                labels.add(d.label)
                if d.encoded and i in decode:
                    _decode(d.data, where)
    except lmdb.Error as exc:  # a damaged page or an I/O error: no OSError
        raise DatasetError(f"{path / 'data.mdb'}: {exc}") from None
    finally:
        env.close()
    _against_manifest(path, count)
    return {"count": count, "labels": len(labels)}


def check_recordio(path: Path, sample: int) -> dict[str, Any]:
    from dlbench.datasets import recordio_format as rf

    rec, idx = rf.locate(path)
    index = rf.read_index(idx)
    if not index:
        raise DatasetError(f"{idx}: empty index")
    size = rec.stat().st_size
    decode = _sampled(len(index), sample)
    labels: set[float] = set()
    with open(rec, "rb") as fh:
        for i, (key, offset) in enumerate(sorted(index.items())):
            where = f"{rec} record {key}"
            if not 0 <= offset < size:
                raise DatasetError(f"{idx}: offset {offset} of key {key} is past the end")
            record = rf.unpack_image_record(rf.read_payload(fh, offset, where), where)
            labels.add(record.label)
            if i in decode:
                _decode(record.image, where)
    _against_manifest(rec.parent, len(index))
    return {"count": len(index), "labels": len(labels)}


CHECKS = {"image_folder": check_image_folder, "caffe_lmdb": check_caffe_lmdb,
          "recordio": check_recordio}


def check(fmt: str, path: str | os.PathLike, *, sample: int = DEFAULT_SAMPLE) -> dict[str, Any]:
    if fmt not in CHECKS:
        raise DatasetError(f"unknown format {fmt!r}; one of {', '.join(CHECKS)}")
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    failure.raise_if_failed(path)  # its recorded reason, not "no data.mdb"
    problem = structural_problem(path, fmt)  # before any reader maps a file cut short
    if problem:
        raise DatasetError(problem)
    return {"format": fmt, "path": str(path), **CHECKS[fmt](path, sample)}
