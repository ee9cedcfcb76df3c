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
# Magic numbers of the encodings Caffe's convert_imageset can store.
_IMAGE_MAGICS = (b"\xff\xd8\xff", b"\x89PNG", b"BM")


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
        if not d.data.startswith(_IMAGE_MAGICS):
            raise DatasetError(f"{where}: encoded Datum whose data is not a JPEG/PNG/BMP image")
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
