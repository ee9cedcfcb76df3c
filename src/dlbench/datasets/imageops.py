"""Image operations shared by the writers (Pillow and numpy only: the MXNet environment runs
them too).

Resizing follows im2rec: an optional square center crop of the shorter side first, then
the shorter side scaled to ``resize`` (the longer side by integer floor, as im2rec).
"""

from __future__ import annotations

import io
import math
import os
import random
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from dlbench.datasets.errors import DatasetError

RESAMPLE = Image.Resampling.BILINEAR
JPEG_MAGIC = b"\xff\xd8\xff"


@dataclass(frozen=True)
class Transform:
    """What a writer does to each source image before storing it."""

    resize: int = 0  # shorter side in pixels; 0 keeps the source size
    center_crop: bool = False
    quality: int = 95  # JPEG quality when an image is re-encoded

    @property
    def changes_pixels(self) -> bool:
        return bool(self.resize or self.center_crop)


# What Pillow raises for a file that is not a (complete) image, or one whose declared size
# is beyond Image.MAX_IMAGE_PIXELS twice over (DecompressionBombError is no OSError).
DECODE_ERRORS = (OSError, UnidentifiedImageError, ValueError, SyntaxError,
                 Image.DecompressionBombError)

# Pillow's modes for 16-bit greyscale ("I": what older Pillow makes of a 16-bit PNG).
_WIDE_GREY = ("I", "I;16", "I;16L", "I;16B", "I;16N")


def load_rgb(path: str | os.PathLike) -> Image.Image:
    """Decode an image file to RGB; an unreadable file is a one-line error naming it."""
    try:
        with Image.open(path) as img:
            img.load()
            return to_rgb(img) if img.mode != "RGB" else img.copy()
    except DECODE_ERRORS as exc:
        raise unreadable(path, exc) from None


def to_rgb(img: Image.Image) -> Image.Image:
    """``img`` as 8-bit RGB. 16-bit greyscale is scaled (value / 256), as OpenCV's imread
    (im2rec, Caffe's convert_imageset) and torchvision's to_dtype do: Pillow's own convert
    clips it at 255, which turns most such images white. 16-bit RGB opens as 8-bit RGB
    already (Pillow keeps the high byte, the same scaling)."""
    if img.mode in _WIDE_GREY:
        wide = np.asarray(img).astype(np.int64)  # "I" is signed 32-bit
        return Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8)).convert("RGB")
    with warnings.catch_warnings():
        # A palette PNG with transparency: Pillow advises RGBA first, which gives the same
        # RGB here (transparency is dropped either way, as torchvision's loader drops it);
        # the advice, once per image, only buried the conversion's log lines.
        warnings.filterwarnings("ignore", "Palette images with Transparency", UserWarning)
        return img.convert("RGB")


def unreadable(where: str | os.PathLike, exc: BaseException) -> DatasetError:
    """The one-line error for an image that does not decode."""
    if isinstance(exc, UnidentifiedImageError):
        reason = "not a recognised image format"
    else:
        text = str(exc).strip().splitlines()
        reason = text[0] if text else type(exc).__name__
    return DatasetError(f"{where}: unreadable image ({reason})")


def center_crop_square(img: Image.Image) -> Image.Image:
    w, h = img.size
    side = min(w, h)
    left, top = (w - side) // 2, (h - side) // 2
    return img.crop((left, top, left + side, top + side))


def resized_size(width: int, height: int, shorter: int) -> tuple[int, int]:
    """im2rec's new size: the shorter side becomes ``shorter``, the other scales by floor."""
    if height > width:
        return shorter, height * shorter // width
    return width * shorter // height, shorter


def apply(img: Image.Image, transform: Transform) -> Image.Image:
    if transform.center_crop:
        img = center_crop_square(img)
    if transform.resize:
        size = resized_size(img.width, img.height, transform.resize)
        if size != img.size:
            img = img.resize(size, RESAMPLE)
    return img


def encode_jpeg(img: Image.Image, quality: int) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def is_jpeg_file(path: str | os.PathLike) -> bool:
    with open(path, "rb") as fh:
        return fh.read(3) == JPEG_MAGIC


# RandomResizedCrop's defaults (the ImageNet training recipe), as every reader crops.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)


def random_resized_crop(width: int, height: int, rng: random.Random
                        ) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` as (left, top, width, height),
    drawing from ``rng`` (one per sample: a reader's crops do not depend on which thread
    or process decodes which sample). The PyTorch and MXNet readers both crop with it."""
    area = width * height
    log_ratio = (math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    # Fallback: the central crop with the aspect ratio clamped into CROP_RATIO.
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, int(round(width / CROP_RATIO[0]))
    elif ratio > CROP_RATIO[1]:
        w, h = int(round(height * CROP_RATIO[1])), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h
