"""Scan an ImageFolder tree (``<root>/<class>/<image>``) into a labelled list.

Labels and order follow torchvision's ImageFolder (``datasets.folder.make_dataset``): the
index of the class folder in sorted order; each class folder walked recursively, following
linked folders, folder by folder in sorted path order and files by sorted name. Unlike
torchvision, hidden names (``.DS_Store``, editor files) are left out, as everywhere in
dlbench (``dlbench.datasets.fingerprint``), and a linked folder that loops back is refused
where os.walk would go round the loop, listing its images again at each turn.

The list can be written and read in im2rec's ``.lst`` format (``index\\tlabel\\trelpath``,
the label as im2rec prints it, ``%f``). File names that are not UTF-8 are kept as their
bytes (``os.fsencode``): in the ``.lst``, as in LMDB keys, they are the names on disk.
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.datasets import failure
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
        """im2rec's list, a line per image; a name holding a line break would cut its
        line in two (a line of its own that no reader parses): refused, naming it."""
        for it in self.items:
            if "\n" in it.relpath or "\r" in it.relpath:
                raise DatasetError(f"{str(self.root / it.relpath)!r}: a file name with a line "
                                   "break cannot be listed in im2rec's .lst; rename it")
        return "".join(f"{it.index}\t{float(it.label):f}\t{it.relpath}\n" for it in self.items)

    def lst_bytes(self) -> bytes:
        # fsencode: a name that is not UTF-8 is written as the bytes it has on disk.
        return os.fsencode(self.lst_text())

    def sha256(self) -> str:
        return hashlib.sha256(self.lst_bytes()).hexdigest()

    def path(self, item: Item) -> Path:
        return self.root / item.relpath


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def _listdir(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError as exc:
        raise DatasetError(f"{folder}: cannot list the folder ({exc.strerror})") from None


def _class_images(root: str, name: str) -> list[str]:
    """The images under ``root/name``, as "name/sub/file" paths, in torchvision's order:
    ``sorted(os.walk(class_dir, followlinks=True))``, then sorted names in each folder.
    Written out rather than calling os.walk, which skips unreadable folders silently and
    walks a link loop until the path is too long to resolve."""
    found: list[tuple[str, list[str]]] = []  # (folder path as os.walk gives it, images)

    def walk(folder: str, rel: str, ancestors: tuple[tuple[int, int], ...]) -> None:
        images, subfolders = [], []
        for entry in _listdir(folder):
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():  # a link to a folder included, as followlinks=True
                    subfolders.append(entry)
                elif _is_image(entry.name) and (entry.is_file() or entry.is_symlink()):
                    # A dangling link too, as torchvision lists it: it then fails as an
                    # unreadable image naming it, not left out of the count unsaid.
                    images.append(entry.name)
            except OSError:
                continue  # removed while listed: not read either
        found.append((folder, sorted(f"{rel}/{f}" for f in images)))
        for entry in subfolders:
            try:
                st = entry.stat()
            except OSError:
                continue
            here = (st.st_dev, st.st_ino)
            if here in ancestors:
                raise DatasetError(f"{entry.path}: linked folder loops back to "
                                   f"{os.path.realpath(entry.path)}")
            walk(entry.path, f"{rel}/{entry.name}", (*ancestors, here))

    top = os.path.join(root, name)
    st = os.stat(top)
    walk(top, name, ((st.st_dev, st.st_ino),))
    found.sort(key=lambda pair: pair[0])
    return [rel for _, files in found for rel in files]


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
    # A synthetic source whose preparation failed holds only its marker: say why.
    failure.raise_if_failed(root)
    entries = sorted(_listdir(str(root)), key=lambda e: e.name)
    classes = [e.name for e in entries if e.is_dir() and not e.name.startswith(".")]
    if not classes:
        if any(e.is_file() for e in entries):
            raise DatasetError(f"{root}: no class subfolders (expected <root>/<class>/<image>)")
        raise DatasetError(f"{root}: empty folder")
    pairs: list[tuple[int, str]] = []
    for label, name in enumerate(classes):
        files = _class_images(str(root), name)
        if not files:
            raise DatasetError(f"{root / name}: class folder has no images "
                               f"({', '.join(IMAGE_EXTENSIONS)})")
        if subset:
            files = files[:subset]
        pairs.extend((label, f) for f in files)
    if shuffle:
        random.Random(seed).shuffle(pairs)
    items = [Item(i, label, rel) for i, (label, rel) in enumerate(pairs)]
    return ImageList(root=root, classes=classes, items=items)


def write_lst(image_list: ImageList, path: str | os.PathLike) -> str:
    """Write the im2rec list; returns its sha256."""
    data = image_list.lst_bytes()
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_lst(path: str | os.PathLike) -> list[Item]:
    """Read an im2rec ``.lst``: ``index``, one or more labels, relative path (tab separated)."""
    items = []
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:  # as lst_bytes
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                raise DatasetError(f"{path}:{lineno}: expected 'index<TAB>label<TAB>path'")
            try:
                items.append(Item(int(parts[0]), int(float(parts[1])), parts[-1]))
            except ValueError:
                raise DatasetError(f"{path}:{lineno}: index or label is not a number") from None
    return items
