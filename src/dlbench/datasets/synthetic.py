"""A deterministic JPEG ImageFolder: the same spec gives byte-identical files.

Each image is drawn from its own seed (spec seed, class, image), so the result does not
depend on the order or the number of processes that make it. Content is a smooth colour
gradient, a few filled shapes and grain: JPEG sizes and decode cost are close to photos',
unlike flat colour or pure noise.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from dlbench.atomic import prepared_dir
from dlbench.datasets import manifest
from dlbench.datasets.encode_jobs import process_pool
from dlbench.datasets.errors import DatasetError
from dlbench.datasets.imagefolder import scan, write_lst

JPEG_QUALITY = 90
MAX_ASPECT = 1.5  # longer side is up to this many times the shorter one


@dataclass(frozen=True)
class Spec:
    classes: int
    images_per_class: int
    image_size: int  # shorter side in pixels
    seed: int = 0

    def validate(self) -> None:
        for name in ("classes", "images_per_class", "image_size"):
            if getattr(self, name) < 1:
                raise DatasetError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.image_size < 8:
            raise DatasetError(f"image_size must be >= 8, got {self.image_size}")
        if self.seed < 0:
            raise DatasetError(f"seed must be >= 0, got {self.seed}")


def class_name(c: int) -> str:
    return f"class_{c:04d}"


def image_name(c: int, i: int) -> str:
    return f"img_{c:04d}_{i:06d}.jpg"


def render(spec: Spec, c: int, i: int) -> Image.Image:
    rng = np.random.default_rng([spec.seed, c, i])
    short = spec.image_size
    long_ = int(short * rng.uniform(1.0, MAX_ASPECT))
    w, h = (long_, short) if rng.random() < 0.5 else (short, long_)
    # Bilinear blend of four corner colours; the class shifts the palette a little so that
    # classes differ in their statistics as real ones do.
    corners = rng.uniform(0, 255, size=(4, 3)) * 0.8 + 0.2 * (c * 37 % 256)
    ys = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    xs = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :, None]
    top = corners[0] * (1 - xs) + corners[1] * xs
    bottom = corners[2] * (1 - xs) + corners[3] * xs
    base = top * (1 - ys) + bottom * ys
    img = Image.fromarray(base.astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 9))):
        x0, x1 = sorted(rng.integers(0, w, size=2).tolist())
        y0, y1 = sorted(rng.integers(0, h, size=2).tolist())
        fill = tuple(int(v) for v in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1 + 1, y1 + 1), fill=fill)
        else:
            draw.rectangle((x0, y0, x1, y1), fill=fill)
    grain = rng.normal(0.0, 10.0, size=(h, w, 3)).astype(np.float32)
    pixels = np.clip(np.asarray(img, dtype=np.float32) + grain, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")


def _write_one(job: tuple[Spec, str, int, int]) -> tuple[int, int]:
    spec, out, c, i = job
    path = Path(out) / class_name(c) / image_name(c, i)
    img = render(spec, c, i)
    # No EXIF, no optimisation pass: the bytes depend only on the pixels and the quality.
    img.save(path, format="JPEG", quality=JPEG_QUALITY)
    return img.size


def generate(out: str | os.PathLike, spec: Spec, *, workers: int = 1) -> dict:
    """Write ``<out>/<class>/<image>.jpg`` plus ``data.lst`` and ``manifest.json``."""
    spec.validate()
    if workers < 1:
        raise DatasetError(f"workers must be >= 1, got {workers}")
    manifest.check_replaceable(out)
    with prepared_dir(out) as tmp:
        for c in range(spec.classes):
            (tmp / class_name(c)).mkdir()
        jobs = [(spec, str(tmp), c, i) for c in range(spec.classes)
                for i in range(spec.images_per_class)]
        shapes = manifest.ShapeRange()
        if workers > 1:
            with process_pool(workers) as pool:
                sizes = list(pool.imap_unordered(_write_one, jobs, chunksize=16))
        else:
            sizes = [_write_one(job) for job in jobs]
        for w, h in sizes:
            shapes.add(3, h, w)
        listing = scan(tmp)
        sha = write_lst(listing, tmp / manifest.LIST_FILENAME)
        doc = manifest.build(
            fmt="image_folder", count=len(listing), classes=listing.classes, shapes=shapes,
            source=None, options={"synthetic": asdict(spec), "jpeg_quality": JPEG_QUALITY},
            list_sha256=sha, files={"list": manifest.LIST_FILENAME})
        manifest.write(tmp, doc)
    return doc
