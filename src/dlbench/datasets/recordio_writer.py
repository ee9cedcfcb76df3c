"""MXNet RecordIO (``data.lst``, ``data.rec``, ``data.idx``) as MXNet's im2rec makes them.

Each record is ``IRHeader(flag=0, label, id=index, id2=0)`` followed by the JPEG bytes of
the image, re-encoded at ``quality`` after im2rec's optional center crop and resize (the
decode and encode go through Pillow: the pip mxnet has no OpenCV bindings for Python).

Runs in the MXNet environment: imports stdlib, numpy, Pillow, mxnet and pure-Python
dlbench modules only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from dlbench.atomic import prepared_dir
from dlbench.datasets import imageops, manifest
from dlbench.datasets.encode_jobs import (
    check_options,
    check_target,
    options_dict,
    ordered_map,
)
from dlbench.datasets.imagefolder import Item, scan, write_lst

PREFIX = "data"


def files(folder: str | os.PathLike) -> dict[str, Path]:
    folder = Path(folder)
    return {ext: folder / f"{PREFIX}.{ext}" for ext in ("lst", "rec", "idx")}


def _record(job: tuple[str, Item, imageops.Transform]) -> tuple[Item, bytes, tuple]:
    root, item, transform = job
    img = imageops.apply(imageops.load_rgb(Path(root) / item.relpath), transform)
    return item, imageops.encode_jpeg(img, transform.quality), (3, img.height, img.width)


def write(source: str | os.PathLike, out: str | os.PathLike, *, resize: int = 0,
          center_crop: bool = False, quality: int = 95, shuffle: bool = False, seed: int = 0,
          workers: int = 1, subset: int = 0) -> dict:
    check_options(resize=resize, quality=quality, subset=subset)
    check_target(source, out)
    listing = scan(source, subset=subset, shuffle=shuffle, seed=seed)
    transform = imageops.Transform(resize=resize, center_crop=center_crop, quality=quality)
    jobs = ((str(listing.root), item, transform) for item in listing.items)
    shapes = manifest.ShapeRange()
    with prepared_dir(out) as tmp:
        paths = files(tmp)
        sha = write_lst(listing, paths["lst"])
        records = ordered_map(_record, jobs, workers)
        with contextlib.closing(records):
            # The pool is forked by the first record, before mxnet starts its threads.
            first = next(records)
            _store(paths, itertools.chain([first], records), shapes)
        doc = manifest.build(
            fmt="recordio", count=len(listing), classes=listing.classes, shapes=shapes,
            source=listing.root, list_sha256=sha,
            options=options_dict(shuffle=shuffle, seed=seed, subset=subset,
                                 **asdict(transform)),
            files={ext: p.name for ext, p in paths.items()})
        manifest.write(tmp, doc)
    return doc


def _store(paths: dict[str, Path], records: Iterator[tuple[Item, bytes, tuple]],
           shapes: manifest.ShapeRange) -> None:
    from mxnet import recordio

    writer = recordio.MXIndexedRecordIO(str(paths["idx"]), str(paths["rec"]), "w")
    try:
        for item, jpeg, shape in records:
            header = recordio.IRHeader(0, float(item.label), item.index, 0)
            writer.write_idx(item.index, recordio.pack(header, jpeg))
            shapes.add(*shape)
    finally:
        writer.close()
