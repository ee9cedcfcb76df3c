"""A preparation that failed inside the workflow leaves a marker, not a missing folder.

Snakemake would otherwise hold back every cell that reads the dataset, and with them the
aggregate and the report. With ``--record-failure`` the preparing command writes the
one-line reason into ``<out>/preparation-error.txt`` and exits 0; each cell on that dataset
then fails in one line quoting it, and the rest of the study goes on. Fix the source and
run the workflow again: a change anywhere in a user's source tree prepares it again (the
tree's fingerprint is a params entry of the conversion rules, dlbench.datasets.fingerprint);
``snakemake --forcerun dataset_lmdb`` does it by hand.
"""

from __future__ import annotations

from pathlib import Path

from dlbench import atomic
from dlbench.datasets.errors import DatasetError, printable

FILENAME = "preparation-error.txt"


def record(out: str | Path, message: str) -> Path:
    # printable: an OSError's file name may hold bytes that are not UTF-8.
    return atomic.write_text(Path(out) / FILENAME, printable(message.strip()) + "\n")


def raise_if_failed(path: str | Path) -> None:
    """For readers: one line saying why the dataset at ``path`` was not prepared."""
    folder = Path(path)
    folder = folder if folder.is_dir() else folder.parent
    marker = folder / FILENAME
    if marker.is_file():
        raise DatasetError(f"{folder}: dataset was not prepared: {marker.read_text().strip()}")
