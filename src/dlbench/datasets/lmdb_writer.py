"""Caffe LMDB of ``Datum`` records, as Caffe's ``convert_imageset`` lays it out.

Keys are ``%08d_<relpath>`` (convert_imageset's), values serialised ``caffe.Datum``:
raw records hold the transformed image as uint8 CHW in BGR order (how Caffe stores
pixels); encoded records hold JPEG bytes with ``encoded: true`` (the source file itself
when no resize or crop is asked and it is a JPEG already).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import lmdb
import numpy as np

from dlbench.atomic import prepared_dir
from dlbench.datasets import datum, imageops, manifest
from dlbench.datasets.encode_jobs import (
    check_options,
    check_target,
    options_dict,
    ordered_map,
)
from dlbench.datasets.errors import DatasetError
from dlbench.datasets.imagefolder import Item, scan, write_lst

MAP_SIZE = 1 << 40  # an upper bound only: the file grows with what is written
TXN_RECORDS = 1000


def key_of(item: Item) -> bytes:
    # fsencode: the name's bytes on disk, also where they are not UTF-8 (convert_imageset's
    # keys hold the names as its list file gives them).
    return f"{item.index:08d}_".encode() + os.fsencode(item.relpath)


def _record(job: tuple[str, Item, bool, imageops.Transform]) -> tuple[bytes, bytes, tuple]:
    root, item, encoded, transform = job
    path = Path(root) / item.relpath
    img = imageops.apply(imageops.load_rgb(path), transform)
    shape = (3, img.height, img.width)
    if encoded:
        if not transform.changes_pixels and imageops.is_jpeg_file(path):
            data = path.read_bytes()
        else:
            data = imageops.encode_jpeg(img, transform.quality)
        d = datum.encoded(data, item.label, shape)
    else:
        hwc = np.asarray(img, dtype=np.uint8)
        d = datum.raw(hwc[:, :, ::-1].transpose(2, 0, 1), item.label)
    return key_of(item), d.SerializeToString(), shape


def write(source: str | os.PathLike, out: str | os.PathLike, *, encoded: bool = False,
          resize: int = 0, center_crop: bool = False, quality: int = 95,
          shuffle: bool = False, seed: int = 0, workers: int = 1, subset: int = 0) -> dict:
    check_options(resize=resize, quality=quality, subset=subset)
    check_target(source, out)
    listing = scan(source, subset=subset, shuffle=shuffle, seed=seed)
    transform = imageops.Transform(resize=resize, center_crop=center_crop, quality=quality)
    jobs = ((str(listing.root), item, encoded, transform) for item in listing.items)
    shapes = manifest.ShapeRange()
    with prepared_dir(out) as tmp:
        records = ordered_map(_record, jobs, workers)
        with contextlib.closing(records):
            # The pool is made (forked) by the first record, before the environment is
            # opened: an open LMDB environment must not cross a fork.
            first = next(records)
            _store(tmp, itertools.chain([first], records), shapes, Path(out) / "data.mdb")
        sha = write_lst(listing, tmp / manifest.LIST_FILENAME)
        doc = manifest.build(
            fmt="caffe_lmdb", count=len(listing), classes=listing.classes, shapes=shapes,
            source=listing.root, list_sha256=sha,
            options=options_dict(encoded=encoded, shuffle=shuffle, seed=seed, subset=subset,
                                 **asdict(transform)),
            files={"lmdb": ".", "list": manifest.LIST_FILENAME})
        manifest.write(tmp, doc)
    return doc


def _store(folder: Path, records: Iterator[tuple[bytes, bytes, tuple]],
           shapes: manifest.ShapeRange, target: Path) -> None:
    """Write the records into a new environment in ``folder``; ``target`` is the data.mdb
    that errors name (``folder`` is a temporary name, gone when they are read)."""
    try:
        env = lmdb.open(str(folder), map_size=MAP_SIZE, subdir=True, meminit=False)
    except lmdb.Error as exc:
        raise DatasetError(f"{target}: {exc}") from None
    txn = None
    try:
        txn = env.begin(write=True)
        for n, (key, value, shape) in enumerate(records, 1):
            txn.put(key, value, append=True)  # keys ascend: the %08d prefix
            shapes.add(*shape)
            if n % TXN_RECORDS == 0:
                txn.commit()
                txn = env.begin(write=True)
        txn.commit()
        txn = None
        env.sync(True)
    except lmdb.Error as exc:
        # A full disk or an I/O error (lmdb.Error, no OSError): one line naming the file.
        if txn is not None:
            txn.abort()
        raise DatasetError(f"{target}: {exc}") from None
    finally:
        env.close()
