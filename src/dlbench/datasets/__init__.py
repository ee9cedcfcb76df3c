"""Prepared datasets for the real-data benchmarks: one image set in three storage formats.

``python -m dlbench.datasets <subcommand>`` makes them: a deterministic synthetic
ImageFolder (``synthetic``), a Caffe LMDB of ``Datum`` records (``lmdb``), an MXNet
RecordIO set as im2rec makes it (``recordio``), and validates any of them (``check``).
Every prepared folder ends with a ``manifest.json`` written last.

Nothing heavy is imported here: the RecordIO writer runs in the MXNet environment, which
has neither torch, lmdb nor protobuf.
"""

from dlbench.datasets.errors import DatasetError

FORMATS = ("image_folder", "caffe_lmdb", "recordio")

__all__ = ["FORMATS", "DatasetError"]
