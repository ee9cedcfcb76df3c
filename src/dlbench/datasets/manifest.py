"""``manifest.json``: what a prepared dataset holds. Written last, so its presence means
the preparation finished."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dlbench import atomic
from dlbench.datasets import failure
from dlbench.datasets.errors import DatasetError
from dlbench.result import now_iso

FILENAME = "manifest.json"
LIST_FILENAME = "data.lst"
VERSION = 1
MARKER = "manifest_version"  # in every manifest ``build`` makes: tells ours from others'


def check_replaceable(out: str | os.PathLike[str]) -> None:
    """A preparation replaces ``out`` whole: refuse it unless it is missing, an empty
    folder, a prepared dataset (a manifest dlbench wrote) or a failed preparation's marker
    alone, so that a folder of the user's is never deleted for a typo."""
    path = Path(out)
    if not path.exists():
        return
    if not path.is_dir():
        raise DatasetError(f"{out}: exists and is not a folder; give a new folder to prepare")
    names = {p.name for p in path.iterdir()}
    if not names or names == {failure.FILENAME}:
        return
    if FILENAME not in names:
        why = f"no {FILENAME}"
    else:
        # A user's tree may hold another tool's manifest.json: only ours makes it ours. One
        # no JSON reader reads is ours damaged only where it names our marker (written
        # atomically, ours rarely is); a JSONC file, an empty or unreadable one is not.
        try:
            why = None if read(path) is not None else f"its {FILENAME} is another tool's"
        except DatasetError:
            why = None if _names_marker(path / FILENAME) else (
                f"its {FILENAME} is not one dlbench wrote")
    if why:
        raise DatasetError(f"{out}: a folder that is not a prepared dataset ({why}) would "
                           "be replaced whole; give a new or empty folder, or remove it "
                           "first")


def _names_marker(path: Path) -> bool:
    try:
        return f'"{MARKER}"'.encode() in path.read_bytes()
    except OSError:
        return False


class ShapeRange:
    """Smallest and largest stored image (CHW) seen while writing."""

    def __init__(self) -> None:
        self.channels: set[int] = set()
        self.height = [0, 0]
        self.width = [0, 0]
        self.seen = False

    def add(self, channels: int, height: int, width: int) -> None:
        self.channels.add(channels)
        if not self.seen:
            self.height, self.width, self.seen = [height, height], [width, width], True
            return
        self.height = [min(self.height[0], height), max(self.height[1], height)]
        self.width = [min(self.width[0], width), max(self.width[1], width)]

    def as_dict(self) -> dict[str, Any]:
        return {"channels": sorted(self.channels), "height": self.height, "width": self.width}


def build(*, fmt: str, count: int, classes: list[str], shapes: ShapeRange | None,
          source: str | os.PathLike | None, options: dict[str, Any], list_sha256: str | None,
          files: dict[str, str]) -> dict[str, Any]:
    return {
        MARKER: VERSION,
        "format": fmt,
        "count": count,
        "num_classes": len(classes),
        "classes": classes,
        "shapes": shapes.as_dict() if shapes else None,
        "source": str(Path(source).absolute()) if source else None,
        "options": options,
        "list_sha256": list_sha256,
        "files": files,
        "created_at": now_iso(timespec="seconds"),
    }


def write(folder: str | os.PathLike, manifest: dict[str, Any]) -> Path:
    return atomic.write_text(Path(folder) / FILENAME,
                             json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest dlbench wrote in ``folder``, or None when it has none.

    A JSON ``manifest.json`` of another tool's (without ``manifest_version`` at its top,
    which every manifest written here holds) says nothing of the data and counts as none:
    a user's ImageFolder tree may hold one. A file that is not JSON, as a damaged one of
    ours (cut short, say), or one of ours lacking a field, is a one-line DatasetError
    naming the file."""
    path = Path(folder) / FILENAME
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: not a readable JSON manifest ({exc})") from None
    if not isinstance(doc, dict) or MARKER not in doc:
        return None  # another tool's
    if "format" not in doc or "count" not in doc:
        raise DatasetError(f"{path}: manifest lacks 'format' or 'count'")
    return doc
