"""Image formats beyond JPEG: Caffe's encoded Datums, the writers' sources, MXNet's reader.

Caffe's ``convert_imageset --encoded`` stores each source file's own bytes, of any format
OpenCV's imdecode reads; im2rec's ``--pass-through`` does the same in a RecordIO. The files
here are written by Pillow, solid colours: any crop and flip of one is its colour, so what a
reader decodes is checked exactly (within the loss of the lossy formats). The LMDBs are
written with the protobuf wire encoder of the tests, as another writer would.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import lmdb
import numpy as np
import pytest
import torch
from PIL import Image, features
from wire_datum import wire_datum

from dlbench.cellrun import CellError, one_line
from dlbench.datasets import check, datum, imageops, lmdb_writer
from dlbench.datasets import recordio_format as rf
from dlbench.datasets.imagefolder import scan
from dlbench.pytorch import datasets as pt
from dlbench.pytorch.datasets import make_loader

# torchvision 0.29 deprecates its codecs; the reader silences that notice, pytest resets filters.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities")

REPO = Path(__file__).resolve().parents[1]
MXNET_PYTHON = Path(os.environ.get("DLBENCH_MXNET_PYTHON")
                    or REPO / ".venvs" / "mxnet" / "bin" / "python")
SIZE = 8
CLASSES = 3


@dataclass(frozen=True)
class Format:
    pillow: str  # Pillow's name of the format
    suffix: str
    tolerance: int = 0  # lossy formats: the largest channel difference to the colour drawn
    grey: bool = False
    options: dict = field(default_factory=dict)


FORMATS = {
    "jpeg": Format("JPEG", ".jpg", 4, options={"quality": 95}),
    "png": Format("PNG", ".png"),
    "bmp": Format("BMP", ".bmp"),
    "tiff": Format("TIFF", ".tif"),
    "webp": Format("WEBP", ".webp", 4, options={"quality": 90}),
    "webp-lossless": Format("WEBP", ".webp", options={"lossless": True}),
    "ppm": Format("PPM", ".ppm"),
    "pgm": Format("PPM", ".pgm", grey=True),
}
# Formats an ImageFolder does not list (torchvision's extensions) but a Datum may hold.
DATUM_ONLY = {"gif": Format("GIF", ".gif"), "jpeg2000": Format("JPEG2000", ".jp2")}


def colour(label: int, grey: bool = False) -> tuple[int, int, int]:
    if grey:
        return (60 + 60 * label,) * 3
    return (200, 40 + 50 * label, 10 + 30 * label)  # RGB, distinct per label


def encode(fmt: Format, label: int) -> bytes:
    rgb = colour(label, fmt.grey)
    img = Image.new("L", (40, 24), rgb[0]) if fmt.grey else Image.new("RGB", (40, 24), rgb)
    buf = io.BytesIO()
    img.save(buf, format=fmt.pillow, **fmt.options)
    return buf.getvalue()


def write_datums(path: Path, payloads: list[bytes]) -> list[str]:
    """An LMDB of encoded Datums, record i labelled i % CLASSES; its keys."""
    keys = [f"{i:08d}_c{i % CLASSES}/{i}.img" for i in range(len(payloads))]
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, (key, data) in enumerate(zip(keys, payloads, strict=True)):
            txn.put(key.encode(), wire_datum(label=i % CLASSES, data=data, encoded=True))
    env.close()
    return keys


def assert_colours(images: torch.Tensor, labels: torch.Tensor, fmt: Format) -> None:
    for image, label in zip(images, labels.tolist(), strict=True):
        want = torch.tensor(colour(label, fmt.grey), dtype=torch.int16).view(3, 1, 1)
        diff = (image.to(torch.int16) - want).abs().max().item()
        assert diff <= fmt.tolerance, (label, image[:, 0, 0].tolist())


def _read(path: Path, backend: str, batch_size: int, **kwargs) -> list:
    options = {"image_size": SIZE, "shuffle": False, "num_workers": 0} | kwargs
    loader, _ = make_loader(path, backend, batch_size=batch_size, **options)
    return list(loader)


def one_line_of(fn, *args, **kwargs) -> str:
    """The line a cell records for the error ``fn`` raises: one, and the error's own."""
    with pytest.raises(CellError) as info:
        fn(*args, **kwargs)
    message = one_line(info.value)
    assert message == str(info.value) and "\n" not in message
    return message


def _error(path: Path, backend: str, **kwargs) -> str:
    return one_line_of(_read, path, backend, 2, **kwargs)


@pytest.fixture(params=["torchvision", "pillow"])
def decoder(request, monkeypatch) -> str:
    """torchvision's decoders first (Pillow for what they lack), or Pillow alone (a
    torchvision built without its image extension)."""
    if request.param == "torchvision" and pt.DECODER != "torchvision":
        pytest.skip("this torchvision has no image decoders")
    monkeypatch.setattr(pt, "DECODER", request.param)
    return request.param


# --- Caffe encoded Datums, PyTorch reader ----------------------------------------------------

@pytest.mark.parametrize("name", [*FORMATS, *DATUM_ONLY])
def test_encoded_datums_of_each_format_decode_to_their_colours(tmp_path, decoder, name):
    fmt = {**FORMATS, **DATUM_ONLY}[name]
    if name == "jpeg2000" and not features.check("jpg_2000"):
        pytest.skip("this Pillow reads no JPEG 2000 (built without OpenJPEG)")
    path = tmp_path / "lmdb"
    write_datums(path, [encode(fmt, i % CLASSES) for i in range(6)])
    assert check.check("caffe_lmdb", path, sample=0) == {
        "format": "caffe_lmdb", "path": str(path), "count": 6, "labels": CLASSES}
    (images, labels), = _read(path, "caffe_lmdb", 6)
    assert labels.tolist() == [i % CLASSES for i in range(6)]
    assert_colours(images, labels, fmt)


@pytest.mark.parametrize("kind", ["GIF", "WEBP"])
def test_an_animated_datum_gives_its_first_frame(tmp_path, decoder, kind):
    frames = [Image.new("RGB", (40, 24), colour(label)) for label in range(CLASSES)]
    buf = io.BytesIO()
    frames[0].save(buf, format=kind, save_all=True, append_images=frames[1:],
                   **({"lossless": True} if kind == "WEBP" else {}))
    write_datums(tmp_path / "lmdb", [buf.getvalue()] * 3)  # labelled 0, 1, 2: all frame 0
    (images, _), = _read(tmp_path / "lmdb", "caffe_lmdb", 3)
    assert_colours(images, torch.zeros(3, dtype=torch.int64), FORMATS["png"])


def test_a_gif_is_decoded_by_pillow_which_reads_its_first_frame_alone(monkeypatch):
    """torchvision decodes every frame of an animated GIF (60 frames of 500x375: 34 MB and
    65x Pillow's time a record, in the loader workers): GIFs go to Pillow."""
    from dlbench.pytorch import datasets

    frames = [Image.new("RGB", (40, 24), colour(label)) for label in range(CLASSES)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    called = []
    monkeypatch.setattr(datasets, "DECODER", "torchvision")
    monkeypatch.setattr(datasets, "decode_image", lambda *a, **k: called.append(a))
    image = datasets.decode(buf.getvalue(), "a.gif")
    assert called == [] and tuple(image.shape) == (3, 24, 40)


def _radiance_hdr() -> bytes:
    """A 2x2 Radiance RGBE picture: OpenCV reads it, torchvision and Pillow do not."""
    return b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 2 +X 2\n" + bytes([128, 64, 32, 128]) * 4


@pytest.mark.parametrize(("kind", "workers"), [("threads", 0), ("processes", 2)])
def test_an_image_format_no_decoder_here_reads_is_one_line_naming_the_key(tmp_path, kind,
                                                                          workers):
    good = encode(FORMATS["png"], 0)
    keys = write_datums(tmp_path / "lmdb", [good, good, _radiance_hdr(), good])
    want = f"{tmp_path / 'lmdb'} key {keys[2]}: unreadable image (not a recognised image format)"
    # check first: py-lmdb refuses a second open of an LMDB the reader holds in this process
    assert one_line_of(check.check, "caffe_lmdb", tmp_path / "lmdb", sample=0) == want
    assert _error(tmp_path / "lmdb", "caffe_lmdb", workers=kind, num_workers=workers) == want


@pytest.mark.parametrize(("kind", "workers"), [("threads", 0), ("processes", 2)])
def test_a_datum_of_no_image_format_is_one_line_naming_the_key(tmp_path, kind, workers):
    """A Targa file: Pillow would read it, but OpenCV (so Caffe) does not."""
    good = encode(FORMATS["png"], 0)
    targa = encode(Format("TGA", ".tga"), 1)
    keys = write_datums(tmp_path / "lmdb", [good, good, targa, good])
    want = (f"{tmp_path / 'lmdb'} key {keys[2]}: encoded Datum whose data starts with no "
            f"image format's signature ({targa[:8]!r})")
    assert _error(tmp_path / "lmdb", "caffe_lmdb", workers=kind, num_workers=workers) == want


def test_signatures_of_what_opencv_reads_and_of_what_it_does_not():
    assert all(datum.is_image(encode(fmt, 0)) for fmt in [*FORMATS.values(),
                                                           *DATUM_ONLY.values()])
    for data in (b"P5\n4 4\n255\n", b"Pf\n2 2\n-1\n", b"P7\nWIDTH 1\n", _radiance_hdr(),
                 b"\x00\x00\x00\x1cftypavif", b"II*\x00", b"MM\x00*"):
        assert datum.is_image(data), data
    for data in (b"", b"P", b"P5", b"P9\n", b"PNG", b"RIFF\x00\x00\x00\x00WAVE",
                 b'{"label": 1}', encode(Format("TGA", ".tga"), 0)):
        assert not datum.is_image(data), data


# --- the writers, from an ImageFolder of every format ------------------------------------------

@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory) -> Path:
    """Class ``cL`` holds one file of each format in colour L."""
    root = tmp_path_factory.mktemp("mixed") / "images"
    for label in range(CLASSES):
        (root / f"c{label}").mkdir(parents=True)
        for name, fmt in FORMATS.items():
            (root / f"c{label}" / f"{name}{fmt.suffix}").write_bytes(encode(fmt, label))
    return root


def test_the_lmdb_writer_keeps_source_jpegs_and_reencodes_every_other_format(mixed_folder,
                                                                           tmp_path):
    """Caffe reads what the writer stores whatever the source's format: JPEG bytes (the
    source file itself when it is a JPEG), or raw pixels."""
    encoded, raw = tmp_path / "encoded", tmp_path / "raw"
    lmdb_writer.write(mixed_folder, encoded, encoded=True)
    lmdb_writer.write(mixed_folder, raw)
    env = lmdb.open(str(encoded), readonly=True, lock=False)
    with env.begin() as txn:
        records = list(txn.cursor())
    env.close()
    assert len(records) == CLASSES * len(FORMATS)
    for key, value in records:
        d = datum.parse(value, key.decode())
        relpath = key.decode().split("_", 1)[1]
        source = (mixed_folder / relpath).read_bytes()
        assert d.encoded and d.data.startswith(imageops.JPEG_MAGIC), key
        assert (d.data == source) == relpath.endswith(".jpg"), key
    # Records in list order, as the files: each one's colour, within JPEG's loss where the
    # writer re-encoded it.
    formats = [FORMATS[Path(item.relpath).stem] for item in scan(mixed_folder).items]
    for backend, path in (("caffe_lmdb", encoded), ("caffe_lmdb", raw),
                          ("image_folder", mixed_folder)):
        (images, labels), = _read(path, backend, len(formats))
        for image, label, fmt in zip(images, labels, formats, strict=True):
            lossy = Format(fmt.pillow, fmt.suffix, 4, fmt.grey)
            assert_colours(image[None], label[None], fmt if path == raw else lossy)


@pytest.mark.parametrize("name", ["tiff", "webp", "ppm"])
def test_a_source_file_cut_short_is_one_line_naming_it_in_the_writer(tmp_path, name):
    root = tmp_path / "images"
    (root / "c0").mkdir(parents=True)
    bad = root / "c0" / f"bad{FORMATS[name].suffix}"
    whole = encode(FORMATS[name], 0)
    bad.write_bytes(whole[:len(whole) // 2])
    message = one_line_of(lmdb_writer.write, root, tmp_path / "out", encoded=True)
    assert message.startswith(f"{bad}: unreadable image ("), message
    assert not (tmp_path / "out").exists()


# --- the MXNet reader: a RecordIO of each format's own bytes -----------------------------------

_READ_RECORDIO = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from mxnet import recordio
    from dlbench.cellrun import CellError
    from dlbench.mxnet import record_loader

    folder = Path(sys.argv[1])
    payloads = json.loads((folder / "payloads.json").read_text())
    rec, idx = folder / "data.rec", folder / "data.idx"
    out = recordio.MXIndexedRecordIO(str(idx), str(rec), "w")
    for i, (label, data) in enumerate(payloads):  # im2rec --pass-through: the file's bytes
        header = recordio.IRHeader(0, float(label), i, 0)
        out.write_idx(i, recordio.pack(header, bytes.fromhex(data)))
    out.close()
    seen = {}
    for decoder in ("opencv", "pillow"):
        if decoder == "pillow":
            record_loader.cv2 = None
        images = record_loader.RecordImages(rec, idx, (8, 8))
        rows = []
        for i in range(len(images)):
            try:
                image, label = images[(i, i)]
                rows.append([label, image.reshape(-1, 3).min(0).tolist(),
                             image.reshape(-1, 3).max(0).tolist()])
            except CellError as exc:
                rows.append(str(exc))
        seen[decoder] = rows
    print(json.dumps(seen))
""")


@pytest.mark.mxnet
@pytest.mark.skipif(not MXNET_PYTHON.exists(),
                    reason=f"MXNet environment {MXNET_PYTHON} absent (make mxnet-env)")
def test_the_mxnet_reader_decodes_each_format_as_the_pytorch_reader(tmp_path):
    names = list(FORMATS)
    payloads = [[label, encode(FORMATS[name], label).hex()]
                for name in names for label in range(CLASSES)]
    payloads.append([0, b"\x00 no image".hex()])
    (tmp_path / "payloads.json").write_text(json.dumps(payloads))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([str(MXNET_PYTHON), "-c", _READ_RECORDIO, str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    rec = tmp_path / "data.rec"
    for decoder, rows in seen.items():
        *decoded, broken = rows
        for (name, label), row in zip([(n, c) for n in names for c in range(CLASSES)], decoded,
                                      strict=True):
            fmt = FORMATS[name]
            got_label, low, high = row
            want = np.array(colour(label, fmt.grey))
            assert got_label == label
            assert np.abs(np.array([low, high]) - want).max() <= fmt.tolerance, \
                (decoder, name, row)
        reason = "OpenCV cannot decode it" if decoder == "opencv" \
            else "not a recognised image format"
        assert broken == f"{rec} record {len(payloads) - 1}: unreadable image ({reason})"


@pytest.mark.mxnet
@pytest.mark.skipif(not MXNET_PYTHON.exists(),
                    reason=f"MXNet environment {MXNET_PYTHON} absent (make mxnet-env)")
def test_the_recordio_writer_reencodes_every_format_as_jpeg(mixed_folder, tmp_path):
    out = tmp_path / "recordio"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([str(MXNET_PYTHON), "-m", "dlbench.datasets", "recordio", "--source",
                          str(mixed_folder), "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    index = rf.read_index(out / "data.idx")
    items = scan(mixed_folder).items
    assert sorted(index) == [item.index for item in items]
    with open(out / "data.rec", "rb") as fh:
        for item in items:
            record = rf.unpack_image_record(rf.read_payload(fh, index[item.index], "t"), "t")
            assert record.image.startswith(imageops.JPEG_MAGIC), item.relpath
            fmt = FORMATS[Path(item.relpath).stem]
            pixels = np.asarray(Image.open(io.BytesIO(record.image)).convert("RGB"), np.int16)
            want = np.array(colour(item.label, fmt.grey))
            assert np.abs(pixels - want).max() <= 4, (item.relpath, pixels[0, 0])
