"""Input for the MXNet runner: synthetic batches made once on the devices, or images read
from a RecordIO file (``.rec`` with its ``.idx``) through ``mx.io.ImageRecordIter``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import gluon

from dlbench.cellrun import CellError
from dlbench.datasets import failure

# ImageNet channel statistics on the 0..255 scale (the usual ImageRecordIter settings).
_MEAN_RGB = (123.68, 116.779, 103.939)
_STD_RGB = (58.393, 57.12, 57.375)


def resolve_record(data_dir: str) -> tuple[Path, Path]:
    """The ``.rec`` file and its ``.idx`` for ``--data_dir``: a ``.rec`` file, or a folder
    holding ``data.rec`` (as ``python -m dlbench.datasets recordio`` prepares it) or
    ``train.rec`` (DLBS's layout), each with its ``.idx``."""
    path = Path(data_dir)
    failure.raise_if_failed(path)
    rec = path
    if path.is_dir():
        rec = next((path / n for n in ("data.rec", "train.rec") if (path / n).is_file()),
                   path / "data.rec")
    if rec.suffix != ".rec":
        raise CellError(f"--data_dir {data_dir}: expected a .rec file or a folder with "
                        "data.rec or train.rec")
    if not rec.is_file():
        raise CellError(f"--data_dir: RecordIO file {rec} does not exist")
    idx = rec.with_suffix(".idx")
    if not idx.is_file():
        raise CellError(f"--data_dir: index {idx} of {rec.name} does not exist "
                        "(create both with im2rec or mxnet.recordio.MXIndexedRecordIO)")
    return rec, idx


def manifest_of(rec: Path) -> dict | None:
    """The dataset manifest written beside a prepared RecordIO set, if there is one."""
    path = rec.parent / "manifest.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def synthetic(ctxs: list[mx.Context], batch_size: int, input_shape: tuple[int, ...],
              num_classes: int, dtype: str, seed: int = 0) -> list[tuple[mx.nd.NDArray, ...]]:
    """One (data, label) pair per device, allocated on that device; the benchmark reuses
    them every iteration so no host-to-device copy is timed."""
    rng = np.random.default_rng(seed)
    batches = []
    for ctx in ctxs:
        data = mx.nd.array(rng.uniform(-1.0, 1.0, (batch_size, *input_shape)), ctx=ctx,
                           dtype=dtype)
        label = mx.nd.array(rng.integers(0, num_classes, batch_size), ctx=ctx, dtype="float32")
        batches.append((data, label))
    mx.nd.waitall()
    return batches


def record_iter(rec: Path, idx: Path, *, batch_size: int, input_shape: tuple[int, ...],
                threads: int, part_index: int = 0, num_parts: int = 1,
                seed: int = 0) -> mx.io.ImageRecordIter:
    """Training-style decoding: random crop to the model's input, random mirror, shuffled
    records; ``part_index``/``num_parts`` give each kvstore worker its own share."""
    channels = input_shape[0]
    if channels == 3:
        normalize = {"mean_r": _MEAN_RGB[0], "mean_g": _MEAN_RGB[1], "mean_b": _MEAN_RGB[2],
                     "std_r": _STD_RGB[0], "std_g": _STD_RGB[1], "std_b": _STD_RGB[2]}
    else:
        normalize = {"scale": 1.0 / 255.0}
    return mx.io.ImageRecordIter(
        path_imgrec=os.fspath(rec), path_imgidx=os.fspath(idx),
        data_shape=tuple(input_shape), batch_size=batch_size,
        rand_crop=True, rand_mirror=True, shuffle=True, seed=seed,
        preprocess_threads=threads, part_index=part_index, num_parts=num_parts,
        dtype="float32", **normalize)


def next_batch(it: mx.io.DataIter) -> mx.io.DataBatch:
    """The next batch, starting new epochs when the file is exhausted, so that a small
    dataset serves any number of iterations. (ImageRecordIter's round_batch can need two
    resets when a batch holds more than the remaining records plus a whole epoch.)"""
    for _ in range(3):
        try:
            return it.next()
        except StopIteration:
            it.reset()
    raise CellError("--data_dir: the RecordIO iterator yields no batch after three restarts")


def to_devices(batch: mx.io.DataBatch, ctxs: list[mx.Context],
               dtype: str) -> list[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
    """Split a host batch evenly across the devices (each gets ``batch_size`` samples)."""
    data = gluon.utils.split_and_load(batch.data[0], ctxs, even_split=True)
    label = gluon.utils.split_and_load(batch.label[0], ctxs, even_split=True)
    if dtype != "float32":
        data = [d.astype(dtype, copy=False) for d in data]
    return list(zip(data, label, strict=True))
