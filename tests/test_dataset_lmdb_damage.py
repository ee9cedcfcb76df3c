"""A damaged Caffe LMDB under the PyTorch reader: one line naming the LMDB (and the key).

py-lmdb raises lmdb.Error (MDB_CORRUPTED, MDB_PAGE_NOTFOUND, an I/O error), not OSError, so
the reader turns it into a DatasetError itself, in the loader's own process and in a
DataLoader worker alike. The LMDB is the project's writer's, its data.mdb damaged here.
"""

from __future__ import annotations

import mmap
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlbench.cellrun import CellError, one_line
from dlbench.datasets import lmdb_writer, synthetic
from dlbench.pytorch.datasets import make_loader

# torchvision 0.29 deprecates its codecs; the reader silences that notice, pytest resets filters.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities")

SIZE = 8
# LMDB's pages are the operating system's, at most 32 KiB (mdb.c's MAX_PAGESIZE): a host
# with 64 KiB pages (aarch64, ppc64le kernels) has LMDB pages of 32 KiB.
PAGE_SIZE = min(mmap.PAGESIZE, 0x8000)
P_META = 0x10  # mp_flags of a meta page (lmdb.h's P_META)
WORKERS = [("processes", 0), ("processes", 2), ("threads", 0), ("threads", 2)]
CORRUPTED = "MDB_CORRUPTED: Located page was wrong type"


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("damage") / "images"
    # 16-pixel raw records (768 bytes) share pages: a B-tree of several leaves under a root.
    synthetic.generate(root, synthetic.Spec(classes=2, images_per_class=20, image_size=16))
    return root


@pytest.fixture
def folder(source, tmp_path) -> Path:
    out = tmp_path / "caffe_lmdb"
    lmdb_writer.write(source, out)
    return out


def _damage_every_tree_page(folder: Path) -> None:
    """Mark every page after the two meta pages as a meta page: LMDB finds its root (and any
    leaf) of the wrong type. The file keeps its size, so the structural check passes."""
    data = folder / "data.mdb"
    pages = data.stat().st_size // PAGE_SIZE
    assert pages > 4
    with open(data, "r+b") as fh:
        for page in range(2, pages):
            fh.seek(page * PAGE_SIZE + 10)  # after mp_pgno (8 bytes) and mp_pad (2)
            fh.write(struct.pack("<H", P_META))


def _loader(folder: Path, kind: str, workers: int):
    loader, _ = make_loader(folder, "caffe_lmdb", batch_size=4, image_size=SIZE, shuffle=False,
                            num_workers=workers, workers=kind)
    return loader


def _error_line(run) -> str:
    with pytest.raises(CellError) as info:
        run()
    message = one_line(info.value)  # what the cell records
    assert message == str(info.value) and "\n" not in message
    return message


@pytest.mark.parametrize(("kind", "workers"), WORKERS)
def test_a_damaged_page_met_while_listing_the_keys_names_the_data_file(folder, kind, workers):
    _damage_every_tree_page(folder)
    message = _error_line(lambda: _loader(folder, kind, workers))
    assert message == f"{folder / 'data.mdb'}: mdb_cursor_get: {CORRUPTED}"


@pytest.mark.parametrize(("kind", "workers"), WORKERS)
def test_a_page_damaged_while_records_are_read_names_the_lmdb_and_key(folder, kind, workers):
    """The keys were listed from an intact file; the pages went bad before the records were
    read (a failing disk, the dataset rewritten under a running cell): the first batch's
    first record, in this process or in a loader worker, names the folder and its key."""
    loader = _loader(folder, kind, workers)
    _damage_every_tree_page(folder)

    def read_all() -> None:
        for _ in loader:
            pass

    message = _error_line(read_all)
    first = "00000000_class_0000/img_0000_000000.jpg"
    assert message == f"{folder} key {first}: mdb_get: {CORRUPTED}"


_READ = textwrap.dedent("""
    import sys
    from dlbench.cellrun import CellError, one_line
    from dlbench.pytorch.datasets import make_loader
    try:
        loader, _ = make_loader(sys.argv[1], "caffe_lmdb", batch_size=4, image_size=8,
                                shuffle=False, num_workers=int(sys.argv[2]), workers="processes")
        for _ in loader:
            pass
    except CellError as exc:
        print(one_line(exc))
""")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_truncated_data_file_is_one_line_not_a_bus_error(folder, workers):
    """Mapped and read, a data.mdb cut short kills the reader with SIGBUS: the loader says
    so before it maps the file (in a child process, whose death would fail the test)."""
    data = folder / "data.mdb"
    full = data.stat().st_size
    with open(data, "r+b") as fh:
        fh.truncate(full - 2 * PAGE_SIZE)
    run = subprocess.run([sys.executable, "-c", _READ, str(folder), str(workers)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout == (f"{data}: truncated LMDB: its meta page declares {full} bytes "
                          f"({full // PAGE_SIZE} pages of {PAGE_SIZE}), the file has "
                          f"{full - 2 * PAGE_SIZE}\n")
