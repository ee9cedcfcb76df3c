"""Image files and dataset records as other tools write them, read as those tools read them:

- 16-bit PNGs are scaled to 8 bits (value / 256, as OpenCV and torchvision's to_dtype),
  in the writers and the PyTorch readers alike;
- an ImageFolder is listed as torchvision's ImageFolder lists it (class folders walked
  recursively, through linked folders, in its order);
- file names that are not UTF-8 are kept as their bytes, in LMDB keys and ``.lst`` files;
- LMDB keys of other writers that end in NUL bytes are read back whole;
- damaged files (a full disk under the LMDB writer, a decompression bomb, a damaged PNG
  stream, a RecordIO header counting labels that are not there, a damaged LMDB page) are
  one line naming the file, never a traceback or a crashed process;
- the threaded PyTorch loader's crops and flips depend on (seed, epoch, sample) only;
- conversion options reach only the writer that has them, and the schema refuses the rest.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import lmdb
import numpy as np
import pytest
import torch
from PIL import Image

from dlbench import config_schema, workflow_support
from dlbench.cellrun import CellError, one_line
from dlbench.datasets import __main__ as cli
from dlbench.datasets import check, datum, failure, imagefolder, imageops, lmdb_writer, synthetic
from dlbench.datasets import recordio_format as rf
from dlbench.datasets.errors import DatasetError
from dlbench.pytorch import datasets as pt
from dlbench.pytorch.datasets import make_loader

# torchvision 0.29 deprecates its codecs; the reader silences that notice, pytest resets filters.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities")

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
SIZE = 16


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(pixels: np.ndarray, bit_depth: int = 16, *, width: int = 0, height: int = 0,
        idat: bytes | None = None) -> bytes:
    """A PNG written here from the specification (Pillow writes no 48-bit RGB): greyscale
    for a 2-D array, RGB for 3-D. ``width``/``height``/``idat`` override what the header
    declares and the compressed stream, for damaged files."""
    h, w = pixels.shape[:2]
    colour = 2 if pixels.ndim == 3 else 0
    big = pixels.astype(">u2" if bit_depth == 16 else "u1")
    raw = b"".join(b"\x00" + big[y].tobytes() for y in range(h))
    header = struct.pack(">IIBBBBB", width or w, height or h, bit_depth, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw) if idat is None else idat)
            + _chunk(b"IEND", b""))


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(CellError) as info:
        fn(*args, **kwargs)
    message = one_line(info.value)
    assert message == str(info.value) and "\n" not in message
    return message


def _read_all(*args, **kwargs) -> None:
    loader, _ = make_loader(*args, **kwargs)
    for _ in loader:
        pass


# --- 16-bit PNGs ---------------------------------------------------------------------------

RGB8 = (250, 10, 60)
GREY16 = 40000  # 156 in 8 bits (40000 / 256); Pillow's own convert makes it 255


def _wide_folder(root: Path) -> Path:
    """Class 0: 48-bit RGB PNGs of RGB8 (each byte doubled, v * 257); class 1: 16-bit grey."""
    for label in range(2):
        (root / f"c{label}").mkdir(parents=True)
    rgb = np.empty((20, 28, 3), dtype=np.uint16)
    rgb[...] = [v * 257 for v in RGB8]
    grey = np.full((24, 20), GREY16, dtype=np.uint16)
    for i in range(2):
        (root / "c0" / f"{i}.png").write_bytes(png(rgb))
        (root / "c1" / f"{i}.png").write_bytes(png(grey))
    return root


WANT = {0: RGB8, 1: (GREY16 >> 8,) * 3}


@pytest.mark.parametrize("kind", ["threads", "processes"])
@pytest.mark.parametrize("decoder", ["pillow", "torchvision"])
def test_16_bit_pngs_are_scaled_to_8_bits_by_the_pytorch_reader(tmp_path, monkeypatch, kind,
                                                                 decoder):
    if decoder == "torchvision":
        if pt.DECODER != "torchvision":
            pytest.skip("this torchvision has no image decoders")
        # PNGs go to Pillow (a damaged one crashes torchvision's decoder); the scaling of
        # torchvision's wide decodes (10/12-bit AVIF, HEIC) is tested on these files.
        monkeypatch.setattr(pt, "PNG_MAGIC", b"not a magic number")
    root = _wide_folder(tmp_path / "wide")
    loader, _ = make_loader(root, "image_folder", batch_size=4, image_size=SIZE, shuffle=False,
                            num_workers=0, workers=kind)
    (images, labels), = list(loader)
    assert images.dtype == torch.uint8
    for image, label in zip(images, labels.tolist(), strict=True):
        want = torch.tensor(WANT[label], dtype=torch.uint8).view(3, 1, 1).expand(3, SIZE, SIZE)
        assert torch.equal(image, want), (label, image[:, 0, 0])


def test_16_bit_greyscale_is_scaled_not_clipped_by_the_writers(tmp_path):
    root = _wide_folder(tmp_path / "wide")
    assert imageops.load_rgb(root / "c1" / "0.png").getpixel((0, 0)) == WANT[1]
    assert imageops.load_rgb(root / "c0" / "0.png").getpixel((0, 0)) == RGB8
    lmdb_writer.write(root, tmp_path / "raw")
    env = lmdb.open(str(tmp_path / "raw"), readonly=True, lock=False)
    with env.begin() as txn:
        for key, value in txn.cursor():
            d = datum.parse(value, key.decode())
            bgr = np.frombuffer(d.data, np.uint8).reshape(d.channels, d.height, d.width)
            assert tuple(bgr[::-1, 0, 0]) == WANT[d.label], (key, bgr[:, 0, 0])
    env.close()


# --- the ImageFolder listing ---------------------------------------------------------------

def _tree(root: Path) -> Path:
    """Nested folders, some ordered differently as paths than as names ("a-b/" sorts before
    "a/sub/"), and a linked folder outside the tree."""
    for rel in ("c0/b.jpg", "c0/a/x.jpg", "c0/a/sub/w.png", "c0/a-b/y.jpg", "c0/A/z.JPG",
                "c1/top.jpg", "c1/.hidden/no.jpg", "c1/notes.txt", "../elsewhere/deep/l.jpg"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (len(rel) * 9 % 256, 0, 0)).save(path, format="JPEG")
    (root / "c1" / "linked").symlink_to(root.parent / "elsewhere")
    return root


def test_class_folders_are_walked_recursively_in_torchvision_order(tmp_path):
    folder = pytest.importorskip("torchvision.datasets.folder")
    root = _tree(tmp_path / "tree")
    listing = imagefolder.scan(root)
    classes, class_to_idx = folder.find_classes(str(root))
    samples = folder.make_dataset(str(root), class_to_idx, extensions=folder.IMG_EXTENSIONS)
    # torchvision lists hidden names, dlbench leaves them out (module docstring).
    theirs = [(os.path.relpath(p, root), label) for p, label in samples
              if "/." not in os.path.relpath(p, root)]
    assert classes == listing.classes == ["c0", "c1"]
    assert [(it.relpath, it.label) for it in listing.items] == theirs
    assert [it.relpath for it in listing.items if it.label == 0] == [
        "c0/b.jpg", "c0/A/z.JPG", "c0/a/x.jpg", "c0/a-b/y.jpg", "c0/a/sub/w.png"]
    assert "c1/linked/deep/l.jpg" in [it.relpath for it in listing.items]
    # The readers list what the writers list.
    reader = pt.ImageFolderSamples(root, SIZE)
    assert [os.fsdecode(p) for p in reader.paths] == [str(root / it.relpath)
                                                        for it in listing.items]


def test_a_linked_folder_looping_back_is_one_line(tmp_path):
    root = tmp_path / "loop"
    (root / "c" / "sub").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "c" / "a.jpg")
    (root / "c" / "sub" / "up").symlink_to("..")
    loop = root / "c" / "sub" / "up"
    assert _error(imagefolder.scan, root) == \
        f"{loop}: linked folder loops back to {root.resolve() / 'c'}"


def test_a_failed_synthetic_source_reports_its_reason_when_converted(tmp_path):
    source = tmp_path / "synthetic"
    source.mkdir()
    failure.record(source, "classes must be >= 1, got 0")
    assert _error(lmdb_writer.write, source, tmp_path / "lmdb") == \
        f"{source}: dataset was not prepared: classes must be >= 1, got 0"


# --- names that are not UTF-8 --------------------------------------------------------------

NAME = b"caf\xe9.png"  # Latin-1 "café": not UTF-8


@pytest.fixture
def latin1_tree(tmp_path) -> Path:
    if sys.getfilesystemencoding().lower().replace("-", "") != "utf8":
        pytest.skip("file names are not UTF-8 here")
    root = tmp_path / "names"
    for label in range(2):
        (root / f"c{label}").mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (12, 10), (200, 40 * label, 0)).save(root / f"c{label}" / f"{i}.png")
    Image.new("RGB", (12, 10), (200, 0, 0)).save(os.fsencode(root / "c0") + b"/" + NAME)
    return root


def test_names_that_are_not_utf8_keep_their_bytes(latin1_tree, tmp_path):
    out = tmp_path / "lmdb"
    doc = lmdb_writer.write(latin1_tree, out)
    assert doc["count"] == 5
    env = lmdb.open(str(out), readonly=True, lock=False)
    with env.begin() as txn:
        keys = [bytes(k) for k, _ in txn.cursor()]
    env.close()
    assert b"00000002_c0/" + NAME in keys  # the name on disk, as convert_imageset keys it
    lst = (out / "data.lst").read_bytes()
    assert b"2\t0.000000\tc0/" + NAME + b"\n" in lst
    assert hashlib.sha256(lst).hexdigest() == doc["list_sha256"]
    items = imagefolder.read_lst(out / "data.lst")
    assert os.fsencode(items[2].relpath) == b"c0/" + NAME
    assert (latin1_tree / items[2].relpath).is_file()
    assert check.check("image_folder", latin1_tree)["count"] == 5
    loader, _ = make_loader(latin1_tree, "image_folder", batch_size=5, image_size=SIZE,
                            shuffle=False, num_workers=0)
    assert [y.tolist() for _, y in loader] == [[0, 0, 0, 1, 1]]


def test_an_unreadable_image_with_such_a_name_is_recorded_in_one_line(latin1_tree, tmp_path):
    bad = os.fsencode(latin1_tree / "c0") + b"/" + NAME
    Path(os.fsdecode(bad)).write_bytes(b"\x89PNG\r\n\x1a\n broken")
    out = tmp_path / "lmdb"
    assert cli.main(["lmdb", "--source", str(latin1_tree), "--out", str(out),
                     "--record-failure"]) == 0
    want = f"{latin1_tree}/c0/caf\\xe9.png: unreadable image ("
    assert (out / failure.FILENAME).read_text().startswith(want)
    for kind in ("threads", "processes"):
        message = _error(_read_all, latin1_tree, "image_folder", batch_size=2, image_size=SIZE,
                         shuffle=False, num_workers=0, workers=kind)
        assert message.startswith(want), message


# --- LMDB keys of other writers ------------------------------------------------------------

def test_lmdb_keys_ending_in_nul_bytes_are_read(tmp_path):
    path = tmp_path / "foreign"
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(4):
            value = datum.raw(np.full((3, 8, 8), 10 * i, dtype=np.uint8), i).SerializeToString()
            txn.put(struct.pack(">I", 256 * i), value)  # 00 00 00 00, 00 00 01 00, ...
    env.close()
    for kind in ("threads", "processes"):
        loader, _ = make_loader(path, "caffe_lmdb", batch_size=4, image_size=SIZE,
                                shuffle=False, num_workers=0, workers=kind)
        (images, labels), = list(loader)
        assert labels.tolist() == [0, 1, 2, 3]
        assert images[:, 0, 0, 0].tolist() == [0, 10, 20, 30]


# --- damaged files -------------------------------------------------------------------------

def test_a_full_disk_under_the_lmdb_writer_is_recorded_in_one_line(tmp_path):
    source = tmp_path / "images"
    synthetic.generate(source, synthetic.Spec(classes=2, images_per_class=6, image_size=48))
    out = tmp_path / "lmdb"
    # A file size limit makes LMDB's writes fail as a full disk does (EFBIG, not ENOSPC).
    script = textwrap.dedent("""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        from dlbench.datasets.__main__ import main
        sys.exit(main(sys.argv[1:]))
    """)
    argv = [sys.executable, "-c", script, "lmdb", "--source", str(source), "--out", str(out)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"error: {out}/data.mdb: mdb_")
    assert run.stderr.count("\n") == 1, run.stderr
    run = subprocess.run([*argv, "--record-failure"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert (out / failure.FILENAME).read_text().startswith(f"{out}/data.mdb: mdb_")


def test_a_damaged_lmdb_page_is_one_line_in_check(tmp_path):
    path = tmp_path / "lmdb"
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(200):
            txn.put(f"{i:08d}_x".encode(),
                    datum.raw(np.zeros((3, 16, 16), np.uint8), i).SerializeToString())
    psize = env.stat()["psize"]
    env.close()
    with open(path / "data.mdb", "r+b") as fh:  # a leaf page's header overwritten
        fh.seek(3 * psize)
        fh.write(b"\xff" * 16)
    assert _error(check.check, "caffe_lmdb", path).startswith(
        f"{path}/data.mdb: mdb_cursor_get: MDB_CORRUPTED")


def _bomb() -> bytes:
    """A PNG declaring 20000 x 20000 pixels (beyond Pillow's decompression-bomb limit)."""
    return png(np.zeros((1, 1, 3), np.uint8), 8, width=20000, height=20000,
               idat=zlib.compress(b""))


def test_a_decompression_bomb_is_one_line_in_the_writers_and_check(tmp_path):
    root = tmp_path / "bomb"
    (root / "c").mkdir(parents=True)
    (root / "c" / "b.png").write_bytes(_bomb())
    want = f"{root}/c/b.png: unreadable image (Image size (400000000 pixels) exceeds limit"
    assert _error(lmdb_writer.write, root, tmp_path / "lmdb").startswith(want)
    assert _error(check.check, "image_folder", root, sample=0).startswith(want)


def test_damaged_pngs_are_one_line_in_the_pytorch_reader_not_a_crash(tmp_path):
    """torchvision's PNG decoder kills the process (SIGSEGV) on a damaged data stream: the
    reader is run in a child, whose death would fail the test without ending the session."""
    good = png(np.full((16, 16, 3), 90, np.uint8), 8)
    flipped = bytearray(good)
    idat = good.index(b"IDAT") + 4
    flipped[idat + 2] ^= 0xFF  # inside the zlib stream; the chunk CRC is not checked
    files = {"bomb": _bomb(), "flipped": bytes(flipped),
             "short": png(np.zeros((64, 64, 3), np.uint8), 8, idat=zlib.compress(b"\x00" * 9))}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from dlbench.cellrun import CellError
        from dlbench.pytorch.datasets import decode
        for path in sys.argv[1:]:
            try:
                decode(Path(path).read_bytes(), path)
                print(path, "decoded")
            except CellError as exc:
                print(exc)
    """)
    run = subprocess.run([sys.executable, "-c", script, *(str(tmp_path / n) for n in files)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    lines = run.stdout.splitlines()
    assert len(lines) == len(files), run.stdout
    for name, line in zip(files, lines, strict=True):
        assert line.startswith(f"{tmp_path / name}: unreadable image ("), line


def _recordio(folder: Path, payload: bytes) -> Path:
    folder.mkdir()
    pad = b"\x00" * ((4 - len(payload) % 4) % 4)
    (folder / "data.rec").write_bytes(struct.pack("<II", rf.MAGIC, len(payload)) + payload + pad)
    (folder / "data.idx").write_text("0\t0\n")
    return folder / "data.rec"


def test_a_recordio_header_counting_missing_labels_is_one_line(tmp_path):
    header = struct.pack("<IfQQ", 5, 1.0, 0, 0)  # 5 labels declared, 1 present
    rec = _recordio(tmp_path / "rec", header + struct.pack("<f", 1.0))
    assert _error(check.check, "recordio", rec.parent) == (
        f"{rec} record 0: IRHeader declares 5 labels (flag 5), more than its 28-byte record "
        "holds")
    good = header + struct.pack("<5f", 3.0, 0, 0, 0, 0) + b"jpeg"
    record = rf.unpack_image_record(good, "w")
    assert (record.label, record.image) == (3.0, b"jpeg")


# --- the threaded loader's random numbers ---------------------------------------------------

@pytest.mark.parametrize("backend", ["image_folder", "caffe_lmdb"])
def test_threaded_crops_depend_on_seed_epoch_and_sample_only(tmp_path, backend):
    source = tmp_path / "images"
    synthetic.generate(source, synthetic.Spec(classes=2, images_per_class=6, image_size=40))
    data = source
    if backend == "caffe_lmdb":
        data = tmp_path / "lmdb"
        lmdb_writer.write(source, data, encoded=True)

    def epochs(threads: int, seed: int = 5) -> list[torch.Tensor]:
        loader, _ = make_loader(data, backend, batch_size=4, image_size=SIZE, shuffle=True,
                                num_workers=threads, seed=seed)
        out = [torch.cat([images.clone() for images, _ in loader]) for _ in range(2)]
        loader.close()
        return out

    first, second = epochs(2)
    again = epochs(2)
    alone = epochs(0)
    assert torch.equal(first, again[0]) and torch.equal(second, again[1])
    assert torch.equal(first, alone[0]) and torch.equal(second, alone[1])
    assert not torch.equal(first, second)  # a new epoch, new crops (and order)
    assert not torch.equal(first, epochs(0, seed=6)[0])


def test_crops_stay_inside_the_image_and_keep_torchvision_ranges():
    import random

    from dlbench.datasets import imageops

    rng = random.Random(0)
    for height, width in ((40, 56), (7, 300), (300, 7), (1, 1)):
        for _ in range(200):
            left, top, w, h = imageops.random_resized_crop(width, height, rng)
            assert h > 0 and w > 0 and top + h <= height and left + w <= width
    # Beyond RATIO every try fails: torchvision's fallback, a centred crop at the ratio.
    assert imageops.random_resized_crop(300, 7, random.Random(0)) == (145, 0, 9, 7)


# --- conversion options --------------------------------------------------------------------

SYNTHETIC = {"classes": 2, "images_per_class": 3, "image_size": 32, "seed": 0}


def test_encoded_under_convert_reaches_only_the_lmdb_writer():
    config = {"datasets": {"d": {"synthetic": SYNTHETIC,
                                 "convert": {"encoded": True, "seed": 4}}}}
    lmdb_args = workflow_support.conversion_args(config, "d", "lmdb")
    recordio_args = workflow_support.conversion_args(config, "d", "recordio")
    assert lmdb_args == ["--seed", "4", "--encoded"]
    assert recordio_args == ["--seed", "4"]
    for fmt, args in (("lmdb", lmdb_args), ("recordio", recordio_args)):
        cli.parser().parse_args([fmt, "--source", "s", "--out", "o", *args])  # no SystemExit


@pytest.mark.parametrize(("extra", "message"), [
    ({"convert": {"seed": -1}}, "datasets.d.convert.seed: -1 is less than the minimum of 0"),
    ({"lmdb": {"seed": -1}}, "datasets.d.lmdb.seed: -1 is less than the minimum of 0"),
    ({"recordio": {"encoded": True}},
     "datasets.d.recordio: unknown key 'encoded' (valid: center_crop, quality, resize, seed, "
     "shuffle, subset, workers)")])
def test_conversion_options_no_writer_takes_are_refused_by_the_schema(extra, message):
    config = {"studies": {"s": {"grid": {"model": "deep_mnist", "device": "cpu"}}},
              "datasets": {"d": {"synthetic": SYNTHETIC, **extra}}}
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    assert str(info.value) == message
    config["datasets"]["d"] = {"synthetic": SYNTHETIC, "convert": {"encoded": True, "seed": 0}}
    config_schema.validate_config(config, SCHEMA)


def test_dataset_errors_are_valid_utf8():
    assert str(DatasetError(os.fsdecode(b"/d/caf\xe9.png") + ": bad")) == "/d/caf\\xe9.png: bad"
