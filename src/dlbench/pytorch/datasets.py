"""PyTorch readers of prepared datasets: an ImageFolder tree or a Caffe LMDB of Datums.

Per sample: decode, RandomResizedCrop(image_size), random horizontal flip; the result is a
uint8 CHW RGB tensor and an int64 label. Conversion to float and normalisation are left to
the device (``dlbench.pytorch.data.RealImages``), where they are cheapest.

Images are decoded by ``torchvision.io.decode_image`` (libjpeg-turbo straight into a
tensor; ``benchmarks/data_loaders.py`` measures it against Pillow's decode + crop on the
same files); it also decodes WebP. Formats it cannot decode (BMP, TIFF, PBM/PGM/PPM,
JPEG 2000: Caffe's encoded Datums may hold any), GIFs (torchvision decodes every frame of an
animated one; Pillow its first, the frame OpenCV reads), and torchvision builds without its
image extension, go through Pillow; one neither reads (OpenEXR, Radiance HDR) is a one-line
error naming the record.
PNGs go through Pillow too: torchvision 0.29's PNG decoder kills the process with SIGSEGV
on a damaged data stream (one flipped byte in an IDAT chunk) where Pillow raises an error
(Pillow took 1.2x torchvision's time on a 500x375 PNG; JPEGs are unaffected).
Decodes wider than 8 bits (16-bit PNG, 10/12-bit AVIF) are scaled to uint8, as
``dlbench.datasets.imageops.to_rgb`` does for the writers.
"""

from __future__ import annotations

import os
import random
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
)
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms.v2 import functional as F

from dlbench.cellrun import CellError
from dlbench.datasets import failure, imageops
from dlbench.datasets import manifest as manifest_mod
from dlbench.datasets.errors import DatasetError
from dlbench.pytorch.threaded_loader import ThreadedLoader

BACKENDS = ("image_folder", "caffe_lmdb")
SCALE = list(imageops.CROP_SCALE)  # RandomResizedCrop's defaults, as every reader crops
RATIO = list(imageops.CROP_RATIO)
PREFETCH_BATCHES = 4  # per worker: evens out slow images without much memory

# torchvision 0.29 deprecates its image codecs in favour of TorchCodec and warns on every
# call; they remain the fastest decoder installed, so the notice is silenced here only.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of "
                        "TorchVision are deprecated", category=DeprecationWarning)


def _torchvision_decodes() -> bool:
    try:
        from torchvision.io.image import _has_image_ops
    except ImportError:
        return False
    return bool(_has_image_ops())


DECODER = "torchvision" if _torchvision_decodes() else "pillow"


class CropFlip:
    """RandomResizedCrop(size) + horizontal flip with probability 1/2 on a uint8 CHW tensor.

    Random numbers come from ``rng`` where given (the threaded loader gives each sample
    its own, ``threaded_loader.sample_rng``), else from torch's generator, which the
    DataLoader seeds per worker process."""

    def __init__(self, size: int):
        self.size = [size, size]

    def __call__(self, chw: torch.Tensor, rng: random.Random | None = None) -> torch.Tensor:
        if rng is None:
            top, left, h, w = RandomResizedCrop.get_params(chw, SCALE, RATIO)
            flip = torch.rand(1).item() < 0.5
        else:
            left, top, w, h = imageops.random_resized_crop(chw.shape[-1], chw.shape[-2], rng)
            flip = rng.random() < 0.5
        out = F.resized_crop(chw, top, left, h, w, self.size, antialias=True)
        if flip:
            out = out.flip(-1)
        return out


PNG_MAGIC = b"\x89PNG"
# An animated GIF: torchvision decodes every frame (a 60-frame 500x375 GIF: 204 ms and
# 34 MB a record) where Pillow decodes the first alone (3 ms), the frame OpenCV reads.
GIF_MAGIC = b"GIF8"


def decode(data: bytes | bytearray, where: str) -> torch.Tensor:
    """Encoded image bytes to a uint8 RGB CHW tensor."""
    # PNG: module docstring; GIF: GIF_MAGIC
    if DECODER == "torchvision" and not data.startswith((PNG_MAGIC, GIF_MAGIC)):
        try:
            # bytearray: torch.frombuffer wants a writable buffer (it is only read).
            buf = data if isinstance(data, bytearray) else bytearray(data)
            image = decode_image(torch.frombuffer(buf, dtype=torch.uint8),
                                 mode=ImageReadMode.RGB)
        except (RuntimeError, ValueError):
            pass  # a format it does not know, or a broken or empty file: Pillow decides
        else:
            if image.ndim == 4:  # an animated WebP's frames: the first, as Pillow gives it
                image = image[0]
            # A wider decode (uint16) copied into the uint8 batch would keep its low byte.
            if image.dtype != torch.uint8:
                image = F.to_dtype(image, torch.uint8, scale=True)
            return image
    return decode_with_pillow(data, where)


def decode_with_pillow(data: bytes | bytearray, where: str) -> torch.Tensor:
    import io

    from PIL import Image

    from dlbench.datasets.imageops import DECODE_ERRORS, to_rgb, unreadable

    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = np.array(to_rgb(img))
    except DECODE_ERRORS as exc:
        raise unreadable(where, exc) from None
    return torch.from_numpy(rgb).permute(2, 0, 1)


class ImageFolderSamples(Dataset):
    """``<root>/<class>/<image>``; labels by sorted class name, as torchvision's ImageFolder.

    Paths and labels are numpy arrays, not lists of Python objects, so that forked workers
    share them instead of copying pages as reference counts change. Paths are the names'
    bytes on disk (``os.fsencode``): a name need not be UTF-8."""

    def __init__(self, root: str | Path, image_size: int):
        from dlbench.datasets.imagefolder import scan

        listing = scan(root)
        self.classes = listing.classes
        self.paths = np.array([os.fsencode(listing.path(it)) for it in listing.items])
        self.labels = np.array([it.label for it in listing.items], dtype=np.int64)
        self.transform = CropFlip(image_size)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.load(i, None)

    def load(self, i: int, rng: random.Random | None) -> tuple[torch.Tensor, int]:
        """Sample ``i``, its crop and flip drawn from ``rng`` (None: torch's generator)."""
        path = self.paths[i]
        try:
            with open(path, "rb") as fh:
                data = bytearray(os.fstat(fh.fileno()).st_size)
                fh.readinto(data)
        except OSError as exc:
            raise DatasetError(f"{os.fsdecode(path)}: cannot read ({exc.strerror})") from None
        return self.transform(decode(data, os.fsdecode(path)), rng), int(self.labels[i])


class CaffeLmdbSamples(Dataset):
    """A Caffe LMDB of ``Datum`` records, raw (uint8 CHW BGR) or encoded (image bytes).

    Each process opens the environment itself, lazily (read-only, no lock, no readahead:
    many readers, random access); an environment is never used across a fork."""

    def __init__(self, path: str | Path, image_size: int):
        self.path = str(Path(path).absolute())
        self.key_bytes, self.key_ends, first = _lmdb_keys(self.path)
        self.encoded = bool(first.encoded)
        self.transform = CropFlip(image_size)

    def __len__(self) -> int:
        return len(self.key_ends)

    def key(self, i: int) -> bytes:
        start = int(self.key_ends[i - 1]) if i else 0
        return self.key_bytes[start:int(self.key_ends[i])].tobytes()

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.load(i, None)

    def load(self, i: int, rng: random.Random | None) -> tuple[torch.Tensor, int]:
        """Sample ``i``, its crop and flip drawn from ``rng`` (None: torch's generator)."""
        from dlbench.datasets import datum

        key = self.key(i)
        where = f"{self.path} key {key.decode(errors='replace')}"
        value = _lmdb_get(self.path, key, where)
        if value is None:
            raise DatasetError(f"{where}: key vanished from the LMDB")
        d = datum.parse(value, where)
        if d.encoded:
            image = decode(d.data, where)
            return self.transform(image, rng), int(d.label)
        chw = torch.frombuffer(bytearray(d.data), dtype=torch.uint8)
        chw = chw.view(d.channels, d.height, d.width)
        out = self.transform(chw, rng)
        # Caffe stores BGR; crop and resize act per channel, so reorder the small result.
        out = out.expand(3, -1, -1) if d.channels == 1 else out.flip(0)
        return out.contiguous(), int(d.label)


# One environment per (process, LMDB): py-lmdb refuses a second open of the same files in
# a process, and a forked child inherits that refusal, so the parent closes its own
# environments before loader workers are forked (``release_lmdb_envs``).
_ENVS: dict[str, tuple[int, Any]] = {}


def lmdb_env(path: str) -> Any:
    entry = _ENVS.get(path)
    if entry is not None and entry[0] == os.getpid():
        return entry[1]
    import lmdb

    try:
        env = lmdb.open(path, readonly=True, lock=False, readahead=False, meminit=False,
                        subdir=True)
    except lmdb.Error as exc:
        raise DatasetError(f"{path}: not an LMDB ({exc})") from None
    _ENVS[path] = (os.getpid(), env)
    return env


def _lmdb_get(path: str, key: bytes, where: str) -> bytes | None:
    """The value of ``key``; an lmdb.Error (a damaged page, an I/O error: no OSError) is a
    one-line DatasetError naming the LMDB and the key, in a loader worker too."""
    import lmdb

    try:
        with lmdb_env(path).begin() as txn:
            return txn.get(key)
    except lmdb.Error as exc:
        raise DatasetError(f"{where}: {exc}") from None


def release_lmdb_envs() -> None:
    """Close this process's environments (they reopen on demand)."""
    for path, (pid, env) in list(_ENVS.items()):
        if pid == os.getpid():
            env.close()
        del _ENVS[path]


def _lmdb_keys(path: str) -> tuple[np.ndarray, np.ndarray, Any]:
    """All keys, concatenated (uint8) with each one's end offset (int64), and the first
    record, checked to be an image Datum. Two flat arrays: forked workers share them as
    they would a numpy bytes array, which would drop keys' trailing NUL bytes (its
    fixed-width items are NUL-padded), and keys of other writers may end in NUL."""
    import lmdb

    from dlbench.datasets import datum

    data = Path(path) / "data.mdb"
    if not data.is_file():
        raise DatasetError(f"{path}: not an LMDB (no data.mdb)")
    try:
        with lmdb_env(path).begin() as txn:
            keys = list(txn.cursor().iternext(keys=True, values=False))
            value = txn.get(keys[0]) if keys else None
    except lmdb.Error as exc:  # a damaged page met while listing: no key to name
        raise DatasetError(f"{data}: {exc}") from None
    if not keys:
        raise DatasetError(f"{path}: empty LMDB")
    first = datum.parse(value, f"{path} key {keys[0].decode(errors='replace')}")
    ends = np.cumsum([len(k) for k in keys], dtype=np.int64)
    return np.frombuffer(b"".join(keys), dtype=np.uint8), ends, first


class _Loader(DataLoader):
    """A DataLoader whose worker failures surface as the worker's own one-line error.

    PyTorch re-raises a worker's exception with a multi-line message starting "Caught ...
    in DataLoader worker process N"; the result file wants the original line. The workers
    are shut down at once: left to garbage collection, their shutdown waits out a 5 s
    timeout per worker."""

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers > 0 and self._iterator is None:
            release_lmdb_envs()  # workers are about to be forked
        it = super().__iter__()
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except BaseException as exc:
                shutdown = getattr(it, "_shutdown_workers", None)
                if shutdown is not None:
                    shutdown()
                    self._iterator = None
                if isinstance(exc, CellError):
                    raise type(exc)(_original_line(str(exc))) from None
                raise
            yield batch


_QUALIFIED_PREFIX = re.compile(r"^[\w.]+: ")


def _original_line(message: str) -> str:
    lines = [ln for ln in message.strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].startswith("Caught "):
        return _QUALIFIED_PREFIX.sub("", lines[-1], count=1)
    return lines[0] if lines else message


def _dataset(data_dir: Path, backend: str, image_size: int) -> Dataset:
    if backend == "image_folder":
        return ImageFolderSamples(data_dir, image_size)
    return CaffeLmdbSamples(data_dir, image_size)


def _manifest(data_dir: Path, backend: str, dataset: Dataset) -> dict[str, Any]:
    doc = manifest_mod.read(data_dir)
    if doc is not None:
        if doc["format"] != backend:
            raise DatasetError(f"{data_dir / manifest_mod.FILENAME}: dataset format is "
                               f"{doc['format']!r}, not {backend!r}")
        if doc["count"] != len(dataset):
            raise DatasetError(f"{data_dir / manifest_mod.FILENAME}: manifest says "
                               f"{doc['count']} images, found {len(dataset)}")
        return doc
    classes = getattr(dataset, "classes", None)
    return {"format": backend, "count": len(dataset),
            "num_classes": len(classes) if classes is not None else None,
            "classes": classes, "source": None, "derived": True}


WORKER_KINDS = ("threads", "processes")


def make_loader(data_dir: str | Path, backend: str, *, batch_size: int, image_size: int,
                shuffle: bool, num_workers: int, rank: int = 0, world_size: int = 1,
                pin_memory: bool = False, seed: int = 0, drop_last: bool = True,
                workers: str = "threads") -> tuple[Any, dict[str, Any]]:
    """A loader of ``(uint8 [B,3,S,S], int64 [B])`` batches and the dataset manifest.

    ``workers`` "threads": ``num_workers`` decoding threads in this process
    (``ThreadedLoader``, the faster on few cores); "processes": a DataLoader with
    ``num_workers`` worker processes."""
    if workers not in WORKER_KINDS:
        raise CellError(f"loader workers {workers!r} is not one of {', '.join(WORKER_KINDS)}")
    failure.raise_if_failed(data_dir)
    if backend not in BACKENDS:
        raise CellError(f"data backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "caffe_lmdb" and Path(data_dir).is_dir():
        from dlbench.datasets.quick import lmdb_problem

        # A cut-short data.mdb kills a reader with SIGBUS when it maps it: say it first.
        problem = lmdb_problem(Path(data_dir))
        if problem:
            raise CellError(problem)
    for name, value, low in (("batch_size", batch_size, 1), ("image_size", image_size, 1),
                             ("num_workers", num_workers, 0), ("world_size", world_size, 1)):
        if value < low:
            raise CellError(f"{name} must be >= {low}, got {value}")
    if not 0 <= rank < world_size:
        raise CellError(f"rank {rank} is outside 0..{world_size - 1}")
    path = Path(data_dir)
    if not path.is_dir():
        what = "not a directory" if path.exists() else "no such directory"
        raise DatasetError(f"{path}: {what} (data_dir for backend {backend})")
    dataset = _dataset(path, backend, image_size)
    manifest = _manifest(path, backend, dataset)
    per_rank = len(dataset) // world_size
    if drop_last and per_rank < batch_size:
        raise DatasetError(f"{path}: {len(dataset)} images give {per_rank} per rank, "
                           f"fewer than one batch of {batch_size}")
    # The generator orders the shuffle and seeds each worker's augmentation, per rank.
    generator = torch.Generator().manual_seed(seed + 7919 * rank)
    sampler = None
    if world_size > 1:
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                     shuffle=shuffle, seed=seed, drop_last=drop_last)
    if workers == "threads":
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        loader = ThreadedLoader(dataset, sampler=sampler, batch_size=batch_size,
                                threads=num_workers, drop_last=drop_last,
                                sample_shape=(3, image_size, image_size), pin_memory=pin_memory,
                                seed=seed)
        return loader, manifest
    options = {"persistent_workers": True, "prefetch_factor": PREFETCH_BATCHES} \
        if num_workers > 0 else {}
    loader = _Loader(dataset, batch_size=batch_size, shuffle=shuffle if sampler is None else None,
                     sampler=sampler, num_workers=num_workers, pin_memory=pin_memory,
                     drop_last=drop_last, generator=generator, **options)
    return loader, manifest
