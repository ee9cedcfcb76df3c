"""Scan an ImageFolder tree (``<root>/<class>/<image>``) into a labelled list.

Labels follow torchvision's ImageFolder: the index of the class folder in sorted order.
The list can be written and read in im2rec's ``.lst`` format (``index\\tlabel\\trelpath``,
the label as im2rec prints it, ``%f``).
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.datasets.errors import DatasetError

# The extensions torchvision's ImageFolder accepts.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class Item:
    index: int  # position in the list (the RecordIO id, the LMDB key prefix)
    label: int
    relpath: str  # "<class>/<file>", always with "/"


@dataclass
class ImageList:
    root: Path
    classes: list[str]
    items: list[Item] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.items)

    def lst_text(self) -> str:
        return "".join(f"{it.index}\t{float(it.label):f}\t{it.relpath}\n" for it in self.items)

    def sha256(self) -> str:
        return hashlib.sha256(self.lst_text().encode()).hexdigest()

    def path(self, item: Item) -> Path:
        return self.root / item.relpath


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def scan(root: str | os.PathLike, *, subset: int = 0, shuffle: bool = False,
         seed: int = 0) -> ImageList:
    """List ``root``'s images with labels; ``subset`` keeps the first N per class (sorted).

    ``shuffle`` permutes the list with ``random.Random(seed)``; indices are then renumbered
    so that index order is storage order, as im2rec's ``--shuffle`` does.
    """
    root = Path(root)
    if not root.exists():
        raise DatasetError(f"{root}: no such directory")
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory")
    if subset < 0:
        raise DatasetError(f"subset must be >= 0, got {subset}")
    entries = sorted(os.scandir(root), key=lambda e: e.name)
    classes = [e.name for e in entries if e.is_dir() and not e.name.startswith(".")]
    if not classes:
        if any(e.is_file() for e in entries):
            raise DatasetError(f"{root}: no class subfolders (expected <root>/<class>/<image>)")
        raise DatasetError(f"{root}: empty folder")
    pairs: list[tuple[int, str]] = []
    for label, name in enumerate(classes):
        files = sorted(e.name for e in os.scandir(root / name) if e.is_file() and _is_image(e.name))
        if not files:
            raise DatasetError(f"{root / name}: class folder has no images "
                               f"({', '.join(IMAGE_EXTENSIONS)})")
        if subset:
            files = files[:subset]
        pairs.extend((label, f"{name}/{f}") for f in files)
    if shuffle:
        random.Random(seed).shuffle(pairs)
    items = [Item(i, label, rel) for i, (label, rel) in enumerate(pairs)]
    return ImageList(root=root, classes=classes, items=items)


def write_lst(image_list: ImageList, path: str | os.PathLike) -> str:
    """Write the im2rec list; returns its sha256."""
    text = image_list.lst_text()
    Path(path).write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def read_lst(path: str | os.PathLike) -> list[Item]:
    """Read an im2rec ``.lst``: ``index``, one or more labels, relative path (tab separated)."""
    items = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                raise DatasetError(f"{path}:{lineno}: expected 'index<TAB>label<TAB>path'")
            try:
                items.append(Item(int(parts[0]), int(float(parts[1])), parts[-1]))
            except ValueError:
                raise DatasetError(f"{path}:{lineno}: index or label is not a number") from None
    return items
