"""RecordIO read by ``gluon.data.DataLoader`` worker processes, decoded with OpenCV
(``opencv-python-headless`` in envs/mxnet.txt) or, without it, Pillow.

``mx.io.ImageRecordIter`` caps its decoding threads at ``omp_get_num_procs() / 2 - 1`` (one on
a 4-core host) and decodes with OpenCV's libjpeg; this reader uses as many worker processes
as asked and Pillow's libjpeg-turbo (``benchmarks/data_loaders.py`` measures both decoders).

Per record: read from the ``.rec`` at the offset its ``.idx`` gives, decode, RandomResizedCrop
to the model's input (torchvision's sampling: area 0.08..1, aspect 3/4..4/3, bilinear with
antialiasing), horizontal flip with probability 1/2. Workers write uint8 NHWC batches into
a shared-memory ring (``BatchRing``) and return float32 labels; conversion to float, NCHW
and normalisation run on the device (``to_devices``), where they are cheapest.

Needs the ``fork`` start method (Linux's default): the ring is inherited, not pickled.
"""

from __future__ import annotations

import io
import mmap
import multiprocessing.pool
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import gluon
from PIL import Image

from dlbench.cellrun import CellError
from dlbench.datasets.errors import DatasetError
from dlbench.datasets.imageops import DECODE_ERRORS, random_resized_crop, unreadable
from dlbench.datasets.recordio_format import read_index, read_payload, unpack_image_record
from dlbench.mxnet.data import MEAN_RGB, STD_RGB

try:
    import cv2

    cv2.setNumThreads(1)  # one worker process is one decoding core
except ImportError:  # Pillow decodes instead, about 1.7x slower per core
    cv2 = None

NAME = "gluon"
DECODER = "opencv" if cv2 is not None else "pillow"
# How long close() waits for the prefetched batches still being decoded, in all (Gluon's
# own timeout for one batch).
PENDING_BATCH_WAIT_S = 120.0


def draft_factor(crop_w: int, crop_h: int, out_w: int, out_h: int) -> int:
    """The largest JPEG DCT downscale (8, 4, 2) that still leaves the crop at least the
    output size, so that decoding smaller loses no resolution the resize would keep."""
    for factor in (8, 4, 2):
        if crop_w >= factor * out_w and crop_h >= factor * out_h:
            return factor
    return 1


def decode_crop_flip(data: bytes, out_w: int, out_h: int, rng: random.Random,
                     where: str) -> np.ndarray:
    """Encoded image bytes to a uint8 HWC RGB crop of ``out_h x out_w``."""
    if cv2 is not None:
        return _decode_crop_flip_opencv(data, out_w, out_h, rng, where)
    return _decode_crop_flip_pillow(data, out_w, out_h, rng, where)


def _decode_crop_flip_opencv(data: bytes, out_w: int, out_h: int, rng: random.Random,
                             where: str) -> np.ndarray:
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR) if data else None
    if bgr is None:
        raise unreadable(where, ValueError("OpenCV cannot decode it"))
    height, width = bgr.shape[:2]
    left, top, w, h = random_resized_crop(width, height, rng)
    # Area averaging where the crop shrinks a lot (no aliasing), bilinear otherwise.
    shrink = w >= 2 * out_w or h >= 2 * out_h
    out = cv2.resize(bgr[top:top + h, left:left + w], (out_w, out_h),
                     interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    out = out[:, :, ::-1]  # BGR -> RGB
    if rng.random() < 0.5:
        out = out[:, ::-1]
    return np.ascontiguousarray(out)


def _decode_crop_flip_pillow(data: bytes, out_w: int, out_h: int, rng: random.Random,
                             where: str) -> np.ndarray:
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            left, top, w, h = random_resized_crop(width, height, rng)
            scale = 1.0
            factor = draft_factor(w, h, out_w, out_h)
            if factor > 1:
                drafted = img.draft("RGB", (width // factor, height // factor))
                if drafted is not None:  # JPEG: decoded at 1/factor of the size
                    scale = width / drafted[1][2]
            rgb = img if img.mode == "RGB" else img.convert("RGB")
            box = (left / scale, top / scale, (left + w) / scale, (top + h) / scale)
            out = rgb.resize((out_w, out_h), Image.Resampling.BILINEAR, box=box)
    except DECODE_ERRORS as exc:
        raise unreadable(where, exc) from None
    if rng.random() < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out)


class RecordImages(gluon.data.Dataset):
    """The image records of a ``.rec``, addressed through its ``.idx``.

    Items are looked up by ``(record, draw)``: ``draw`` (the position in the sample stream)
    seeds the crop and flip, so augmentation does not depend on which worker decodes it.
    Offsets are a numpy array, so forked workers share it instead of copying pages; each
    process opens the ``.rec`` itself."""

    def __init__(self, rec: Path, idx: Path, out_hw: tuple[int, int], seed: int = 0):
        self.rec = str(rec)
        index = read_index(idx)
        if not index:
            raise DatasetError(f"{idx}: empty RecordIO index")
        # File order: contiguous shares per kvstore worker, as ImageRecordIter splits.
        items = sorted(index.items(), key=lambda kv: kv[1])
        self.keys = np.array([k for k, _ in items], dtype=np.int64)
        self.offsets = np.array([off for _, off in items], dtype=np.int64)
        self.out_h, self.out_w = out_hw
        self.seed = seed
        self._fh: tuple[int, Any] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def _file(self) -> Any:
        if self._fh is None or self._fh[0] != os.getpid():
            try:
                self._fh = (os.getpid(), open(self.rec, "rb"))  # noqa: SIM115 (kept open)
            except OSError as exc:
                raise DatasetError(f"{self.rec}: cannot read ({exc.strerror})") from None
        return self._fh[1]

    def record(self, i: int) -> tuple[float, bytes]:
        """(label, encoded image) of record ``i`` in file order."""
        where = f"{self.rec} record {int(self.keys[i])}"
        # mxnet.recordio's layout; a multi-label record (flag > 0) gives its first label, the
        # class, as ImageRecordIter reads it with label_width 1.
        record = unpack_image_record(read_payload(self._file(), int(self.offsets[i]), where),
                                     where)
        return float(record.label), record.image

    def __getitem__(self, key: tuple[int, int]) -> tuple[np.ndarray, float]:
        i, draw = key
        label, image = self.record(i)
        rng = random.Random(self.seed * 1_000_003 + draw)
        where = f"{self.rec} record {int(self.keys[i])}"
        return decode_crop_flip(image, self.out_w, self.out_h, rng, where), label


class BatchRing:
    """Shared-memory slots for whole batches, mapped before the workers fork: a worker
    writes each decoded image straight into its batch's slot and returns only the labels,
    and the main process reads the slot in place. Slots are reused, so their pages fault in
    once; a fresh shared-memory array per batch (Gluon's default batchify) costs more in page
    faults and copies than the decoding it carries on small hosts."""

    def __init__(self, slots: int, batch_size: int, shape: tuple[int, int, int]):
        self.slots = slots
        self.shape = (batch_size, *shape)
        self._map = mmap.mmap(-1, slots * int(np.prod(self.shape)))  # MAP_SHARED, anonymous
        self._array = np.frombuffer(self._map, dtype=np.uint8).reshape((slots, *self.shape))

    def slot(self, batch_number: int) -> np.ndarray:
        return self._array[batch_number % self.slots]


class RingImages(gluon.data.Dataset):
    """``RecordImages`` whose samples land in a ``BatchRing``: keys are ``(record, draw,
    batch, position)`` and items ``(batch, label)``."""

    def __init__(self, images: RecordImages, ring: BatchRing):
        self.images = images
        self.ring = ring

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: tuple[int, int, int, int]) -> tuple[int, float | str]:
        record, draw, batch, position = key
        try:
            image, label = self.images[(record, draw)]
        except DatasetError as exc:
            # Returned, not raised: on a worker's exception Gluon terminates its pool at
            # once, and a worker stopped while it sends a prefetched batch back leaves the
            # pool's result queue locked, so that terminate waits for ever (see close).
            # GluonRecordReader.next raises it once the pool has stopped cleanly.
            return batch, str(exc)
        self.ring.slot(batch)[position] = image
        return batch, label


def ring_batchify(samples: list[tuple[int, float | str]]
                  ) -> tuple[int, int, np.ndarray | str]:
    """(batch number, images in it, float32 labels): the images are already in the ring.
    A batch with a record that could not be read is (batch number, -1, the first error)."""
    errors = [s[1] for s in samples if isinstance(s[1], str)]
    if errors:
        return samples[0][0], -1, errors[0]
    return samples[0][0], len(samples), np.array([s[1] for s in samples], dtype=np.float32)


class RecordBatches:
    """Batches of ``(record, draw, batch, position)`` keys over ``records``: a new seeded
    order each epoch and epochs joined, so every batch is full (ImageRecordIter's
    ``round_batch``) and workers never idle at an epoch's end. Endless unless ``epochs`` is
    given (then the last batch may be short). ``draw`` counts samples, ``batch`` batches."""

    def __init__(self, records: np.ndarray, batch_size: int, *, shuffle: bool, seed: int,
                 epochs: int | None = None):
        self.records = records
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epochs = epochs

    def __iter__(self) -> Iterator[list[tuple[int, int, int, int]]]:
        batch: list[tuple[int, int, int, int]] = []
        draw, number, epoch = 0, 0, 0
        while self.epochs is None or epoch < self.epochs:
            order = self.records
            if self.shuffle:
                order = np.random.default_rng([self.seed, epoch]).permutation(order)
            for record in order.tolist():
                batch.append((record, draw, number, len(batch)))
                draw += 1
                if len(batch) == self.batch_size:
                    yield batch
                    batch, number = [], number + 1
            epoch += 1
        if batch:
            yield batch

    def __len__(self) -> int:
        """Batches per epoch."""
        return -(-len(self.records) // self.batch_size)


def part(count: int, part_index: int, num_parts: int) -> np.ndarray:
    """Record numbers of share ``part_index`` of ``num_parts`` (contiguous in the file)."""
    if not 0 <= part_index < num_parts:
        raise CellError(f"part_index {part_index} is outside 0..{num_parts - 1}")
    records = np.arange(count * part_index // num_parts, count * (part_index + 1) // num_parts)
    if len(records) == 0:
        raise CellError(f"--data_dir: {count} records leave none for worker {part_index} "
                        f"of {num_parts}")
    return records


class GluonRecordReader:
    """Host batches ``(uint8 (B, H, W, 3), float32 (B,))`` from ``workers`` processes.

    ``next()`` returns a view into the shared ring: valid until the second ``next()`` after
    it (``to_devices`` copies it at once)."""

    name = NAME

    def __init__(self, rec: Path, idx: Path, *, batch_size: int, input_shape: tuple[int, ...],
                 workers: int, part_index: int = 0, num_parts: int = 1, seed: int = 0,
                 shuffle: bool = True, epochs: int | None = None, prefetch: int | None = None):
        if len(input_shape) != 3 or input_shape[0] != 3:
            raise CellError(f"--data_reader gluon decodes RGB images; the model's input "
                            f"shape is {tuple(input_shape)}")
        if workers < 1:
            raise CellError(f"--preprocess_threads must be >= 1, got {workers}")
        self.workers = workers
        images = RecordImages(rec, idx, (input_shape[1], input_shape[2]), seed)
        records = part(len(images), part_index, num_parts)
        sampler = RecordBatches(records, batch_size, shuffle=shuffle,
                                seed=seed + 7919 * part_index, epochs=epochs)
        # Batches in flight: `prefetch` queued (two per worker unless given) plus the one
        # asked for; the ring holds them and the batch the caller still reads.
        prefetch = 2 * workers if prefetch is None else max(1, prefetch)
        self.prefetch = prefetch
        self.ring = BatchRing(prefetch + 2, batch_size, (input_shape[1], input_shape[2], 3))
        self.loader = gluon.data.DataLoader(RingImages(images, self.ring), batch_sampler=sampler,
                                            batchify_fn=ring_batchify, num_workers=workers,
                                            prefetch=prefetch, thread_pool=False)
        self._batches = iter(self.loader)
        self._mean: dict[str, mx.nd.NDArray] = {}
        self._std: dict[str, mx.nd.NDArray] = {}

    def facts(self) -> dict[str, Any]:
        return {"data_reader": NAME, "loader_workers": self.workers, "decoder": DECODER,
                "host_batch_layout": "uint8 NHWC", "prefetch_buffer": self.prefetch}

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """The next host batch; raises StopIteration only when ``epochs`` were given."""
        number, count, labels = next(self._batches)
        if count < 0:  # a record a worker could not read: stop the workers, then say which
            self.close()
            raise DatasetError(labels)
        return self.ring.slot(number)[:count], labels

    def to_devices(self, batch: tuple[np.ndarray, np.ndarray], ctxs: list[mx.Context],
                   dtype: str) -> list[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """An even share of the uint8 batch copied to each device (4x fewer bytes than
        float32), then there: float32, NHWC -> NCHW, ImageNet mean/std, the model's dtype."""
        images, labels = batch
        out = []
        for part_images, part_labels, ctx in zip(np.array_split(images, len(ctxs)),
                                                 np.array_split(labels, len(ctxs)), ctxs,
                                                 strict=True):
            x = mx.nd.array(part_images, ctx=ctx, dtype=np.uint8)  # a synchronous copy
            mean, std = self._stats(ctx)
            x = (mx.nd.transpose(x.astype("float32"), axes=(0, 3, 1, 2)) - mean) / std
            out.append((x.astype(dtype, copy=False),
                        mx.nd.array(part_labels, ctx=ctx, dtype=np.float32)))
        return out

    def _stats(self, ctx: mx.Context) -> tuple[mx.nd.NDArray, mx.nd.NDArray]:
        key = str(ctx)
        if key not in self._mean:
            self._mean[key] = mx.nd.array(MEAN_RGB, ctx=ctx).reshape((1, 3, 1, 1))
            self._std[key] = mx.nd.array(STD_RGB, ctx=ctx).reshape((1, 3, 1, 1))
        return self._mean[key], self._std[key]

    def close(self) -> None:
        """Stop the worker processes now rather than at garbage collection (Gluon's
        DataLoader terminates its pool only in ``__del__``). The batches still being
        decoded (prefetched, never asked for) are waited for first: a worker stopped while
        it sends its batch back leaves the pool's result queue locked, and the pool's
        terminate then waits on that lock for ever (CPython's multiprocessing.Pool). Every
        task the pool still holds is waited for (Gluon's loader also prefetches the next
        epoch's first batches as soon as one ends)."""
        pool = getattr(self.loader, "_worker_pool", None)
        if pool is not None:
            # A pool already stopped (Gluon terminates it when a batch fails) never
            # finishes its tasks: nothing to wait for.
            if getattr(pool, "_state", None) == multiprocessing.pool.RUN:
                deadline = time.monotonic() + PENDING_BATCH_WAIT_S
                for pending in list(getattr(pool, "_cache", {}).values()):
                    pending.wait(max(0.0, deadline - time.monotonic()))
            pool.terminate()
            self.loader._worker_pool = None
