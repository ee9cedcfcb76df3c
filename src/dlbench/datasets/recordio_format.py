"""Reading MXNet RecordIO without mxnet (stdlib only), for ``check`` in any environment.

Layout (dmlc-core recordio): each record is ``magic 0xced7230a``, a uint32 whose top 3 bits
are the continuation flag and low 29 bits the length, the payload, padding to 4 bytes. A
payload containing the magic at an aligned offset is split into parts (flag 1 = first,
2 = middle, 3 = last) and the magic is re-inserted between them. An image record payload
starts with ``IRHeader`` (uint32 flag, float32 label, uint64 id, uint64 id2); flag > 0 means
``flag`` float32 labels follow it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dlbench.datasets.errors import DatasetError

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_IR_HEADER = struct.Struct("<IfQQ")


@dataclass(frozen=True)
class ImageRecord:
    flag: int
    label: float
    id: int
    id2: int
    image: bytes


def read_index(path: str | os.PathLike) -> dict[int, int]:
    """``.idx``: one ``key<TAB>offset`` line per record."""
    index = {}
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if len(parts) != 2:
                raise DatasetError(f"{path}:{lineno}: expected 'key<TAB>offset'")
            try:
                index[int(parts[0])] = int(parts[1])
            except ValueError:
                raise DatasetError(f"{path}:{lineno}: key or offset is not an integer") from None
    return index


def read_payload(fh: BinaryIO, offset: int, where: str) -> bytes:
    fh.seek(offset)
    parts = []
    while True:
        head = fh.read(8)
        if len(head) < 8:
            raise DatasetError(f"{where}: truncated record at offset {offset}")
        magic, lrec = struct.unpack("<II", head)
        if magic != MAGIC:
            raise DatasetError(f"{where}: no RecordIO magic at offset {fh.tell() - 8}")
        cflag, length = lrec >> 29, lrec & ((1 << 29) - 1)
        data = fh.read(length)
        if len(data) < length:
            raise DatasetError(f"{where}: truncated record at offset {offset}")
        fh.seek((4 - length % 4) % 4, 1)
        parts.append(data)
        if cflag in (0, 3):
            return _MAGIC_BYTES.join(parts)
        if cflag not in (1, 2):
            raise DatasetError(f"{where}: bad continuation flag {cflag} at offset {offset}")


def unpack_image_record(payload: bytes, where: str) -> ImageRecord:
    if len(payload) < _IR_HEADER.size:
        raise DatasetError(f"{where}: record shorter than an IRHeader")
    flag, label, rid, id2 = _IR_HEADER.unpack_from(payload)
    start = _IR_HEADER.size + 4 * flag
    if len(payload) < start:  # a damaged header: its flag counts labels not there
        raise DatasetError(f"{where}: IRHeader declares {flag} labels (flag {flag}), more "
                           f"than its {len(payload)}-byte record holds")
    if flag:
        labels = struct.unpack_from(f"<{flag}f", payload, _IR_HEADER.size)
        label = labels[0]
    return ImageRecord(flag, label, rid, id2, payload[start:])


def locate(path: str | os.PathLike) -> tuple[Path, Path]:
    """The ``.rec`` and ``.idx`` of ``path`` (a ``.rec`` file or a folder holding one)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    if path.is_dir():
        recs = sorted(path.glob("*.rec"))
        if not recs:
            raise DatasetError(f"{path}: no .rec file in the folder")
        if len(recs) > 1:
            names = ", ".join(r.name for r in recs)
            raise DatasetError(f"{path}: several .rec files ({names}); name one")
        rec = recs[0]
    else:
        rec = path
    idx = rec.with_suffix(".idx")
    if not idx.is_file():
        raise DatasetError(f"{rec}: RecordIO without index ({idx.name} missing; "
                           f"im2rec writes it beside the .rec)")
    return rec, idx
