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

import re
import shutil
from pathlib import Path

from dlbench import atomic
from dlbench.datasets.errors import DatasetError, printable

FILENAME = "preparation-error.txt"
# The reason a RecordIO preparation records when MXNet's interpreter cannot be started
# (dlbench.datasets.__main__): the one failure that installing something mends, with no
# change to the source or the options that would prepare the dataset again.
MISSING_INTERPRETER = "recordio needs MXNet's interpreter {python}, which cannot be started"
_MISSING = re.compile("^" + re.escape(MISSING_INTERPRETER).replace(r"\{python\}", "(.+?)"))


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


def mended(folder: str | Path) -> str | None:
    """Why the failure recorded in ``folder`` no longer holds, in one line: MXNet's
    interpreter it lacked can now be started (make mxnet-env was run since). None for any
    other failure, or none recorded: the source or the options must change first."""
    try:
        reason = (Path(folder) / FILENAME).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    match = _MISSING.match(reason)
    if not match or shutil.which(match.group(1)) is None:
        return None
    return (f"its preparation failed for want of MXNet's interpreter {match.group(1)}, "
            "which is now there")
