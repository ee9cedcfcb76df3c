"""Image operations shared by the writers (Pillow only: the MXNet environment runs them too).

Resizing follows im2rec: an optional square center crop of the shorter side first, then
the shorter side scaled to ``resize`` (the longer side by integer floor, as im2rec).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

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


def load_rgb(path: str | os.PathLike) -> Image.Image:
    """Decode an image file to RGB; an unreadable file is a one-line error naming it."""
    try:
        with Image.open(path) as img:
            img.load()
            return img.convert("RGB") if img.mode != "RGB" else img.copy()
    except DECODE_ERRORS as exc:
        raise unreadable(path, exc) from None


# What Pillow raises for a file that is not a (complete) image.
DECODE_ERRORS = (OSError, UnidentifiedImageError, ValueError, SyntaxError)


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
