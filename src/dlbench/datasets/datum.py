"""Caffe's ``Datum`` message, built from its descriptor with the protobuf library.

The descriptor is caffe.proto's (proto2, package ``caffe``)::

    message Datum {
      optional int32 channels = 1;  optional int32 height = 2;  optional int32 width = 3;
      optional bytes data = 4;      // uint8 CHW, BGR for colour images (or encoded bytes)
      optional int32 label = 5;
      repeated float float_data = 6;
      optional bool encoded = 7 [default = false];
    }
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from dlbench.datasets.errors import DatasetError

_F = descriptor_pb2.FieldDescriptorProto
_FIELDS = (
    ("channels", 1, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
    ("height", 2, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
    ("width", 3, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
    ("data", 4, _F.TYPE_BYTES, _F.LABEL_OPTIONAL),
    ("label", 5, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
    ("float_data", 6, _F.TYPE_FLOAT, _F.LABEL_REPEATED),
    ("encoded", 7, _F.TYPE_BOOL, _F.LABEL_OPTIONAL),
)
# Signatures of the encodings Caffe's ``convert_imageset --encoded`` can store: it keeps the
# source file's own bytes, of any format OpenCV's imdecode reads. Whether one decodes is
# the reader's to say (in one line naming the record); this only tells an image Datum apart.
_IMAGE_MAGICS = (
    b"\xff\xd8\xff",  # JPEG
    b"\x89PNG",  # PNG
    b"BM",  # BMP
    b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+",  # TIFF, BigTIFF
    b"GIF87a", b"GIF89a",  # GIF (OpenCV builds with its GIF codec)
    b"\x00\x00\x00\x0cjP  \r\n\x87\n", b"\xff\x4f\xff\x51",  # JPEG 2000 file, codestream
    b"\x59\xa6\x6a\x95",  # Sun raster
    b"\x76\x2f\x31\x01",  # OpenEXR
    b"#?RADIANCE", b"#?RGBE",  # Radiance HDR
)
# PBM, PGM, PPM (P1-P6), PAM (P7) and PFM (Pf, PF): "P", the kind, then whitespace.
_PNM_KINDS = b"1234567fF"


def is_image(data: bytes) -> bool:
    """Whether ``data`` starts with the signature of one of the image formats above (those
    OpenCV's imdecode reads but JPEG XL, which has none of these, and AVIF files whose major
    brand is not avif/avis; such a record's error says no signature matched)."""
    if data.startswith(_IMAGE_MAGICS):
        return True
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":  # WebP: a RIFF container
        return True
    if data[4:12] in (b"ftypavif", b"ftypavis"):  # AVIF: an ISO media file
        return True
    return len(data) > 2 and data[0] == ord("P") and data[1] in _PNM_KINDS \
        and data[2:3].isspace()


def _message_class() -> Any:
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="dlbench/caffe_datum.proto", package="caffe", syntax="proto2")
    msg = file_proto.message_type.add(name="Datum")
    for name, number, ftype, label in _FIELDS:
        field = msg.field.add(name=name, number=number, type=ftype, label=label)
        if name == "encoded":
            field.default_value = "false"
    # A private pool: a process that also loads caffe_pb2 keeps its own caffe.Datum.
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("caffe.Datum"))


Datum = _message_class()


def raw(chw: np.ndarray, label: int) -> Any:
    """A raw Datum from a uint8 CHW array (channels already in Caffe's BGR order)."""
    if chw.dtype != np.uint8 or chw.ndim != 3:
        raise ValueError(f"raw Datum needs a uint8 CHW array, got {chw.dtype} {chw.shape}")
    c, h, w = chw.shape
    return Datum(channels=c, height=h, width=w, data=np.ascontiguousarray(chw).tobytes(),
                 label=label)


def encoded(image_bytes: bytes, label: int, shape: tuple[int, int, int]) -> Any:
    """An encoded Datum; channels/height/width are informative (Caffe decodes the bytes)."""
    c, h, w = shape
    return Datum(channels=c, height=h, width=w, data=image_bytes, label=label, encoded=True)


def parse(value: bytes, where: str) -> Any:
    """Parse and check one record; anything that is not an image Datum is a one-line error."""
    try:
        d = Datum.FromString(value)
    except DecodeError:
        raise DatasetError(f"{where}: not a Caffe Datum record (protobuf decode failed)") from None
    check(d, where)
    return d


def check(d: Any, where: str) -> None:
    # Protobuf parses many byte strings without complaint, so a Datum is recognised by its
    # content: encoded image bytes with a known magic, or pixels matching the shape.
    if d.encoded:
        if not is_image(d.data):
            raise DatasetError(f"{where}: encoded Datum whose data starts with no image "
                               f"format's signature ({d.data[:8]!r})")
        return
    if d.channels not in (1, 3) or d.height < 1 or d.width < 1:
        raise DatasetError(f"{where}: not an image Datum (channels={d.channels}, "
                           f"height={d.height}, width={d.width})")
    if not d.data:
        what = "float_data only (unsupported)" if len(d.float_data) else "no data"
        raise DatasetError(f"{where}: Datum has {what}")
    if len(d.data) != d.channels * d.height * d.width:
        raise DatasetError(f"{where}: Datum data has {len(d.data)} bytes, expected "
                           f"channels*height*width = {d.channels * d.height * d.width}")


def pixels_chw(d: Any) -> np.ndarray:
    """The stored uint8 CHW array of a raw Datum (BGR for colour images)."""
    return np.frombuffer(d.data, dtype=np.uint8).reshape(d.channels, d.height, d.width)
