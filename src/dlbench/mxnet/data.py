"""Input for the MXNet runner: synthetic batches made once on the devices, or images read
from a RecordIO file (``.rec`` with its ``.idx``) by one of two readers:

* ``native``: ``mx.io.ImageRecordIter``, MXNet's C++ parser (decoding threads capped at
  ``omp_get_num_procs() / 2 - 1``, at least 1, whatever ``preprocess_threads`` asks);
* ``gluon``: ``gluon.data.DataLoader`` worker processes decoding with OpenCV (or Pillow)
  (``dlbench.mxnet.record_loader``).

``auto`` (``dlbench.mxnet.reader_choice``) takes the native reader when its thread cap covers
the threads asked."""

from __future__ import annotations

import os
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import gluon

from dlbench.cellrun import CellError
from dlbench.cpu import usable_cpus
from dlbench.datasets import failure, manifest
from dlbench.mxnet.reader_choice import READERS, native_thread_cap

# ImageNet channel statistics on the 0..255 scale (the usual ImageRecordIter settings).
MEAN_RGB = (123.68, 116.779, 103.939)
STD_RGB = (58.393, 57.12, 57.375)


def resolve_record(data_dir: str) -> tuple[Path, Path]:
    """The ``.rec`` file and its ``.idx`` for ``--data_dir``: a ``.rec`` file, or a folder
    holding ``data.rec`` (as ``python -m dlbench.datasets recordio`` prepares it) or
    ``train.rec`` (DLBS's layout), each with its ``.idx``."""
    path = Path(data_dir)
    failure.raise_if_failed(path)
    rec = path
    if path.is_dir():
        rec = next((path / n for n in ("data.rec", "train.rec") if (path / n).is_file()), None)
        if rec is None:  # both layouts named: a DLBS folder is as good as a prepared one
            raise CellError(f"--data_dir {data_dir}: a folder with neither data.rec (python -m "
                            "dlbench.datasets recordio's layout: data.rec, data.idx) nor "
                            "train.rec (DLBS's: train.rec, train.idx)")
    if rec.suffix != ".rec":
        raise CellError(f"--data_dir {data_dir}: expected a .rec file or a folder with "
                        "data.rec or train.rec")
    if not rec.is_file():
        raise CellError(f"--data_dir: RecordIO file {rec} does not exist")
    idx = rec.with_suffix(".idx")
    if not idx.is_file():
        raise CellError(f"--data_dir: index {idx} of {rec.name} does not exist "
                        "(create both with im2rec or mxnet.recordio.MXIndexedRecordIO)")
    from dlbench.datasets.quick import recordio_problem

    problem = recordio_problem(rec)  # a cut-short .rec: say so instead of a reader error
    if problem:
        raise CellError(problem)
    return rec, idx


def manifest_of(rec: Path) -> dict | None:
    """The dataset manifest written beside a prepared RecordIO set, if there is one: a
    ``manifest.json`` of another tool's beside a DLBS layout counts as none, a damaged one
    of ours is a one-line DatasetError naming it (``dlbench.datasets.manifest.read``)."""
    return manifest.read(rec.parent)


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
                seed: int = 0, shuffle: bool = True,
                prefetch_buffer: int | None = None) -> mx.io.ImageRecordIter:
    """Training-style decoding: random crop to the model's input, random mirror, shuffled
    records; ``part_index``/``num_parts`` give each kvstore worker its own share;
    ``prefetch_buffer``: batches decoded ahead (DLBS's flag; None: MXNet's own default)."""
    channels = input_shape[0]
    if channels == 3:
        normalize = {"mean_r": MEAN_RGB[0], "mean_g": MEAN_RGB[1], "mean_b": MEAN_RGB[2],
                     "std_r": STD_RGB[0], "std_g": STD_RGB[1], "std_b": STD_RGB[2]}
    else:
        normalize = {"scale": 1.0 / 255.0}
    return mx.io.ImageRecordIter(
        path_imgrec=os.fspath(rec), path_imgidx=os.fspath(idx),
        data_shape=tuple(input_shape), batch_size=batch_size,
        rand_crop=True, rand_mirror=True, shuffle=shuffle, seed=seed,
        preprocess_threads=threads, part_index=part_index, num_parts=num_parts,
        dtype="float32", **normalize,
        **({"prefetch_buffer": prefetch_buffer} if prefetch_buffer is not None else {}))


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


class NativeReader:
    """``mx.io.ImageRecordIter`` behind the readers' interface: float32 NCHW host batches,
    normalised on the host, endless (epochs restart)."""

    name = "native"

    def __init__(self, rec: Path, idx: Path, *, batch_size: int, input_shape: tuple[int, ...],
                 threads: int, part_index: int = 0, num_parts: int = 1, seed: int = 0,
                 prefetch_buffer: int | None = None):
        self.threads, self.rec, self.prefetch_buffer = threads, rec, prefetch_buffer
        self.it = record_iter(rec, idx, batch_size=batch_size, input_shape=input_shape,
                              threads=threads, part_index=part_index, num_parts=num_parts,
                              seed=seed, prefetch_buffer=prefetch_buffer)

    def facts(self) -> dict:
        return {"data_reader": self.name, "decode_threads_requested": self.threads,
                "decode_threads_cap": native_thread_cap(usable_cpus()),
                "decoder": "opencv", "host_batch_layout": "float32 NCHW",
                "prefetch_buffer": self.prefetch_buffer}

    def next(self) -> mx.io.DataBatch:
        try:
            return next_batch(self.it)
        except mx.base.MXNetError as exc:
            if "OpenCV" not in str(exc):
                raise
            # OpenCV's assertion names neither the file nor the record; the gluon reader
            # and the dataset check do.
            raise CellError(f"{self.rec}: MXNet's native reader met a record OpenCV cannot "
                            "decode; python -m dlbench.datasets check --format recordio "
                            f"{self.rec.parent} names it (or --data_reader gluon)") from None

    def to_devices(self, batch: mx.io.DataBatch, ctxs: list[mx.Context],
                   dtype: str) -> list[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        return to_devices(batch, ctxs, dtype)

    def close(self) -> None:
        pass


def open_reader(kind: str, rec: Path, idx: Path, *, batch_size: int,
                input_shape: tuple[int, ...], threads: int, part_index: int = 0,
                num_parts: int = 1, seed: int = 0, prefetch: int | None = None):
    """A ``native`` or ``gluon`` reader (see ``choose_reader``); both give ``next()`` host
    batches, ``to_devices(batch, ctxs, dtype)`` -> [(data, float32 label)] per device,
    ``facts()`` for the measurement and ``close()``; ``prefetch``: batches decoded ahead
    (DLBS's --prefetch_buffer; None: each reader's own)."""
    common = {"batch_size": batch_size, "input_shape": tuple(input_shape),
              "part_index": part_index, "num_parts": num_parts, "seed": seed}
    if kind == "native":
        return NativeReader(rec, idx, threads=threads, prefetch_buffer=prefetch, **common)
    if kind == "gluon":
        from dlbench.mxnet.record_loader import GluonRecordReader

        return GluonRecordReader(rec, idx, workers=threads, prefetch=prefetch, **common)
    raise CellError(f"--data_reader {kind!r} is not one of {', '.join(READERS)}")
