"""Dataset preparation: synthetic ImageFolder, Caffe LMDB, MXNet RecordIO, ``check``.

Round trips go through the real libraries (Pillow, lmdb, protobuf, mxnet in its own
environment as a subprocess); expected values are computed here independently of the
writers (im2rec's resize rule, Caffe's BGR CHW layout, protobuf wire format by hand).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import lmdb
import numpy as np
import pytest
from PIL import Image
from wire_datum import wire_datum

from dlbench.datasets import check, datum, lmdb_writer, synthetic
from dlbench.datasets import recordio_format as rf
from dlbench.datasets.__main__ import main as cli_main
from dlbench.datasets.errors import DatasetError
from dlbench.datasets.imagefolder import read_lst, scan

REPO = Path(__file__).resolve().parents[1]
MXNET_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"
SPEC = synthetic.Spec(classes=4, images_per_class=8, image_size=64, seed=11)

needs_mxnet = pytest.mark.skipif(not MXNET_PYTHON.exists(),
                                 reason="MXNet environment .venvs/mxnet not present")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "images"
    synthetic.generate(out, SPEC)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jpg"))}


def _bgr_chw(img: Image.Image) -> np.ndarray:
    return np.asarray(img.convert("RGB"))[:, :, ::-1].transpose(2, 0, 1)


def _im2rec_size(w: int, h: int, shorter: int) -> tuple[int, int]:
    # im2rec.py: if h > w: (resize, h * resize // w) else (w * resize // h, resize), as (w, h)
    return (shorter, h * shorter // w) if h > w else (w * shorter // h, shorter)


def _records(path: Path) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    finally:
        env.close()


# --- synthetic ------------------------------------------------------------------------------

def test_synthetic_same_spec_gives_byte_identical_files(source, tmp_path):
    again = tmp_path / "again"
    synthetic.generate(again, SPEC, workers=2)  # order and process count must not matter
    assert _files(again) == _files(source)
    assert (again / "data.lst").read_bytes() == (source / "data.lst").read_bytes()
    other = tmp_path / "other"
    synthetic.generate(other, synthetic.Spec(4, 8, 64, seed=12))
    assert _files(other).keys() == _files(source).keys()
    assert _files(other) != _files(source)


def test_synthetic_images_are_jpegs_of_the_spec(source):
    files = sorted(source.rglob("*.jpg"))
    assert len(files) == SPEC.classes * SPEC.images_per_class
    sizes = set()
    for path in files:
        assert path.read_bytes()[:3] == b"\xff\xd8\xff"
        with Image.open(path) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert min(img.size) == SPEC.image_size
            sizes.add(img.size)
            pixels = np.asarray(img)
        assert pixels.std() > 10  # content, not a flat colour
    assert len(sizes) > 4  # varied aspect ratios and orientations
    doc = json.loads((source / "manifest.json").read_text())
    assert doc["format"] == "image_folder" and doc["count"] == len(files)
    assert doc["classes"] == [f"class_{c:04d}" for c in range(SPEC.classes)]


# --- image folder list --------------------------------------------------------------------

def test_scan_labels_subset_shuffle_and_lst(source, tmp_path):
    full = scan(source)
    assert full.classes == sorted(full.classes)
    assert [it.label for it in full.items] == sorted(it.label for it in full.items)
    assert all(it.relpath.split("/")[0] == full.classes[it.label] for it in full.items)
    sub = scan(source, subset=3)
    assert len(sub) == 3 * SPEC.classes
    assert [it.relpath for it in sub.items[:3]] == [it.relpath for it in full.items[:3]]
    shuffled = scan(source, shuffle=True, seed=5)
    assert [it.index for it in shuffled.items] == list(range(len(full)))
    assert sorted(it.relpath for it in shuffled.items) == [it.relpath for it in full.items]
    assert [it.relpath for it in shuffled.items] != [it.relpath for it in full.items]
    assert shuffled.items == scan(source, shuffle=True, seed=5).items
    lst = tmp_path / "x.lst"
    lst.write_text(shuffled.lst_text())
    first = lst.read_text().splitlines()[0].split("\t")
    assert first[0] == "0" and first[1] == f"{shuffled.items[0].label:.6f}"
    assert read_lst(lst) == shuffled.items


# --- Datum ---------------------------------------------------------------------------------

def test_datum_class_parses_hand_encoded_wire_format():
    data = bytes(range(24))
    wire = wire_datum(label=300, channels=3, height=2, width=4, data=data)
    d = datum.parse(wire, "hand")
    assert (d.channels, d.height, d.width, d.label, d.encoded) == (3, 2, 4, 300, False)
    assert d.data == data
    assert datum.Datum.DESCRIPTOR.full_name == "caffe.Datum"
    assert datum.raw(np.frombuffer(data, np.uint8).reshape(3, 2, 4), 300).SerializeToString() \
        == wire


# --- Caffe LMDB ----------------------------------------------------------------------------

@pytest.mark.parametrize("center_crop", [False, True])
def test_lmdb_raw_round_trip_pixels_and_labels(source, tmp_path, center_crop):
    out = tmp_path / "raw"
    doc = lmdb_writer.write(source, out, resize=40, center_crop=center_crop, workers=2)
    listing = read_lst(out / "data.lst")
    records = _records(out)
    assert len(records) == doc["count"] == len(listing) == 32
    for (key, value), item in zip(records, listing, strict=True):
        assert key == f"{item.index:08d}_{item.relpath}".encode()
        d = datum.parse(value, key.decode())
        assert d.label == item.label and not d.encoded
        img = Image.open(source / item.relpath).convert("RGB")
        if center_crop:
            side = min(img.size)
            left, top = (img.width - side) // 2, (img.height - side) // 2
            img = img.crop((left, top, left + side, top + side))
        img = img.resize(_im2rec_size(img.width, img.height, 40), Image.Resampling.BILINEAR)
        expected = _bgr_chw(img)
        assert (d.channels, d.height, d.width) == expected.shape
        np.testing.assert_array_equal(datum.pixels_chw(d), expected)
    if center_crop:
        assert doc["shapes"] == {"channels": [3], "height": [40, 40], "width": [40, 40]}


def test_lmdb_encoded_round_trip_keeps_source_jpegs(source, tmp_path):
    out = tmp_path / "enc"
    lmdb_writer.write(source, out, encoded=True, shuffle=True, seed=3)
    listing = read_lst(out / "data.lst")
    assert [it.label for it in listing] != sorted(it.label for it in listing)  # shuffled
    for (key, value), item in zip(_records(out), listing, strict=True):
        d = datum.parse(value, key.decode())
        assert d.encoded and d.label == item.label
        assert d.data == (source / item.relpath).read_bytes()
        decoded = np.asarray(Image.open(io.BytesIO(d.data)))
        np.testing.assert_array_equal(decoded, np.asarray(Image.open(source / item.relpath)))


def test_lmdb_encoded_with_resize_reencodes_at_quality(source, tmp_path):
    out = tmp_path / "enc"
    lmdb_writer.write(source, out, encoded=True, resize=32, quality=90, subset=2)
    records = _records(out)
    assert len(records) == 2 * SPEC.classes
    for key, value in records:
        d = datum.parse(value, key.decode())
        relpath = key.decode().split("_", 1)[1]
        src = Image.open(source / relpath).convert("RGB")
        want = src.resize(_im2rec_size(*src.size, 32), Image.Resampling.BILINEAR)
        got = Image.open(io.BytesIO(d.data))
        assert got.format == "JPEG" and got.size == want.size
        buf = io.BytesIO()
        want.save(buf, format="JPEG", quality=90)
        assert d.data == buf.getvalue()  # the resized image, encoded at the asked quality
        diff = np.abs(np.asarray(got, np.int16) - np.asarray(want, np.int16))
        assert diff.mean() < 10  # JPEG loss only


def test_failed_run_leaves_the_prepared_folder_untouched(source, tmp_path):
    bad = tmp_path / "bad"
    synthetic.generate(bad, synthetic.Spec(2, 2, 32, 1))
    out = tmp_path / "lmdb"
    lmdb_writer.write(bad, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    broken = next((bad / "class_0001").glob("*.jpg"))
    broken.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(DatasetError, match=rf"{broken.name}: unreadable image"):
        lmdb_writer.write(bad, out, resize=16)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "lmdb"]  # no temp left


def test_a_folder_that_is_no_dataset_is_never_replaced(source, tmp_path, capsys):
    """A preparation replaces its --out whole: a user's folder of other files (a typo) or
    a file is refused in one line and kept; a prepared dataset, an empty folder and a
    failed preparation's marker are replaced."""
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "important.txt").write_text("keep")
    for prepare in (lambda out: lmdb_writer.write(source, out),
                    lambda out: synthetic.generate(out, synthetic.Spec(2, 1, 16, 1))):
        with pytest.raises(DatasetError, match=r"mine: a folder that is not a prepared "
                                               r"dataset \(no manifest.json\)"):
            prepare(mine)
        with pytest.raises(DatasetError, match="important.txt: exists and is not a folder"):
            prepare(mine / "important.txt")
    assert (mine / "important.txt").read_text() == "keep" and (mine / "sub").is_dir()
    assert cli_main(["lmdb", "--source", str(source), "--out", str(mine)]) == 2
    assert "not a prepared dataset" in capsys.readouterr().err
    # Another tool's manifest.json, or one no JSON reader reads that does not name our
    # marker (JSONC, empty), does not make a user's tree a prepared dataset.
    for text, why in (('{"format": "coco", "count": 3}', "is another tool's"),
                      ('// notes\n{"a": 1}', "is not one dlbench wrote"),
                      ("", "is not one dlbench wrote")):
        (mine / "manifest.json").write_text(text)
        with pytest.raises(DatasetError, match=rf"mine: a folder that is not a prepared "
                                               rf"dataset \(its manifest.json {why}\)"):
            lmdb_writer.write(source, mine)
        assert (mine / "important.txt").read_text() == "keep"
    again = tmp_path / "again"
    lmdb_writer.write(source, again)
    assert lmdb_writer.write(source, again)["count"] == 32  # a dataset: replaced
    (again / "manifest.json").write_text('{"manifest_version": 1, "form')  # ours, cut short
    assert lmdb_writer.write(source, again)["count"] == 32  # still ours: replaced
    (tmp_path / "empty").mkdir()
    synthetic.generate(tmp_path / "empty", synthetic.Spec(2, 1, 16, 1))
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "preparation-error.txt").write_text("bad image\n")
    assert lmdb_writer.write(source, failed)["count"] == 32
    assert not (failed / "preparation-error.txt").exists()


# --- MXNet RecordIO --------------------------------------------------------------------------

def _mx(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "MXNET_CPU_WORKER_NTHREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(MXNET_PYTHON), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


_READ_ALL = """
import json, sys
import mxnet as mx
rec = sys.argv[1]
# round_batch=True: the last batch wraps around and reports its padding (False: pad 0)
it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 24, 24), batch_size=5,
                           shuffle=False, round_batch=True, preprocess_threads=1)
labels, shapes = [], set()
for batch in it:
    keep = batch.data[0].shape[0] - batch.pad
    labels += batch.label[0].asnumpy()[:keep].astype(int).tolist()
    shapes.add(tuple(batch.data[0].shape[1:]))
print(json.dumps({"labels": labels, "shapes": sorted(shapes)}))
"""


@pytest.mark.mxnet
@needs_mxnet
def test_recordio_written_by_mxnet_env_is_read_by_image_record_iter(source, tmp_path):
    out = tmp_path / "rec"
    run = _mx("-m", "dlbench.datasets", "recordio", "--source", str(source), "--out", str(out),
              "--resize", "30", "--shuffle", "--seed", "4", "--workers", "2")
    assert run.returncode == 0, run.stderr
    listing = read_lst(out / "data.lst")
    assert sorted(p.name for p in out.iterdir()) == ["data.idx", "data.lst", "data.rec",
                                                    "manifest.json"]
    read = _mx("-c", _READ_ALL, str(out / "data.rec"))
    assert read.returncode == 0, read.stderr
    got = json.loads(read.stdout.strip().splitlines()[-1])
    assert got["labels"] == [it.label for it in listing]  # every record, in .lst order
    assert got["shapes"] == [[3, 24, 24]]
    # The same file through the stdlib reader: ids, labels and the resized JPEGs.
    index = rf.read_index(out / "data.idx")
    assert sorted(index) == [it.index for it in listing]
    with open(out / "data.rec", "rb") as fh:
        for item in listing:
            rec = rf.unpack_image_record(rf.read_payload(fh, index[item.index], "t"), "t")
            assert (rec.flag, rec.id, rec.id2, rec.label) == (0, item.index, 0, item.label)
            src = Image.open(source / item.relpath)
            assert Image.open(io.BytesIO(rec.image)).size == _im2rec_size(*src.size, 30)
    summary = check.check("recordio", out, sample=0)
    assert (summary["count"], summary["labels"]) == (32, SPEC.classes)
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["format"] == "recordio" and doc["list_sha256"] == scan(
        source, shuffle=True, seed=4).sha256()


@pytest.mark.mxnet
@needs_mxnet
@pytest.mark.parametrize(("edit", "status"), [
    pytest.param(lambda t: '{"tool": "im2rec-wrapper", "count": 3}', "ok", id="another_tools"),
    pytest.param(lambda t: t[:len(t) // 2], "failed", id="ours_cut_short"),
])
def test_mxnet_cell_ignores_another_tools_manifest_and_names_a_damaged_one(source, tmp_path,
                                                                           edit, status):
    """The RecordIO reader's manifest as the PyTorch reader's: another tool's JSON beside
    the .rec is not recorded as the dataset's; a damaged one of ours fails the cell in one
    line naming it, before anything is measured."""
    out = tmp_path / "rec"
    run = _mx("-m", "dlbench.datasets", "recordio", "--source", str(source), "--out", str(out),
              "--resize", "30")
    assert run.returncode == 0, run.stderr
    manifest = out / "manifest.json"
    manifest.write_text(edit(manifest.read_text()))
    result = tmp_path / "result.json"
    cell = _mx("-m", "dlbench.mxnet", "--device", "cpu", "--model", "resnet18",
               "--batch_size", "4", "--data_dir", str(out), "--data_loader_only=true",
               "--preprocess_threads", "1", "--num_batches", "2", "--num_warmup_batches", "1",
               "--monitor_interval_ms", "0", "--output", str(result), timeout=300)
    res = json.loads(result.read_text())
    assert res["status"] == status, (res["error"], cell.stderr[-2000:])
    if status == "ok":
        assert res["extra"]["data_manifest"] is None
    else:
        assert res["error"].startswith(f"{manifest}: not a readable JSON manifest (")
        assert "\n" not in res["error"] and not res["measurements"]


def test_recordio_reader_joins_records_split_at_the_magic():
    payload = b"abcd" + rf._MAGIC_BYTES + b"efgh12"  # the magic at an aligned offset
    parts = [b"abcd", b"efgh12"]
    stream = b""
    for flag, part in zip((1, 3), parts, strict=True):
        stream += rf._MAGIC_BYTES + ((flag << 29) | len(part)).to_bytes(4, "little") + part
        stream += b"\0" * ((4 - len(part) % 4) % 4)
    assert rf.read_payload(io.BytesIO(stream), 0, "t") == payload


# --- check and the command line ------------------------------------------------------------

def test_check_accepts_each_prepared_format(source, tmp_path):
    lmdb_writer.write(source, tmp_path / "l", encoded=True)
    assert check.check("image_folder", source, sample=0)["count"] == 32
    assert check.check("caffe_lmdb", tmp_path / "l", sample=0)["labels"] == SPEC.classes


def _cli_error(capsys, *argv: str) -> str:
    assert cli_main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.strip()


def test_bad_inputs_give_one_line_errors(source, tmp_path, capsys):
    missing = tmp_path / "missing"
    assert f"{missing}: no such" in _cli_error(capsys, "lmdb", "--source", str(missing),
                                               "--out", str(tmp_path / "o"))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert f"{empty}: empty folder" in _cli_error(capsys, "check", "--format", "image_folder",
                                                   str(empty))
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.jpg").write_bytes((source / "class_0000" / "img_0000_000000.jpg").read_bytes())
    assert "no class subfolders" in _cli_error(capsys, "lmdb", "--source", str(flat),
                                               "--out", str(tmp_path / "o"))
    corrupt = tmp_path / "corrupt"
    synthetic.generate(corrupt, synthetic.Spec(2, 2, 32, 0))
    bad_file = corrupt / "class_0001" / "img_0001_000001.jpg"
    bad_file.write_bytes(b"not an image")
    assert f"{bad_file}: unreadable image" in _cli_error(
        capsys, "check", "--format", "image_folder", "--sample", "0", str(corrupt))
    assert f"{bad_file}: unreadable image" in _cli_error(
        capsys, "lmdb", "--source", str(corrupt), "--out", str(tmp_path / "o"), "--workers", "2")
    assert not (tmp_path / "o").exists()
    assert "output would replace the source folder" in _cli_error(
        capsys, "lmdb", "--source", str(corrupt / "class_0000"), "--out", str(corrupt))
    assert "output inside the source folder" in _cli_error(
        capsys, "lmdb", "--source", str(source), "--out", str(source / "lmdb"))


def test_non_datum_lmdb_and_recordio_without_index_are_rejected(source, tmp_path, capsys):
    other = tmp_path / "other"
    env = lmdb.open(str(other), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"k0", json.dumps({"not": "a datum"}).encode())
    env.close()
    err = _cli_error(capsys, "check", "--format", "caffe_lmdb", str(other))
    assert f"{other} key k0: not" in err
    assert "not an LMDB" in _cli_error(capsys, "check", "--format", "caffe_lmdb", str(source))
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "data.rec").write_bytes(rf._MAGIC_BYTES + bytes(4))
    assert "RecordIO without index (data.idx missing" in _cli_error(
        capsys, "check", "--format", "recordio", str(rec))


def test_cli_entry_point_exit_code_and_usage_errors(tmp_path):
    run = subprocess.run([sys.executable, "-m", "dlbench.datasets", "check", "--format",
                          "caffe_lmdb", str(tmp_path / "nope")], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr == f"error: {tmp_path / 'nope'}: no such file or directory\n"
    run = subprocess.run([sys.executable, "-m", "dlbench.datasets", "synthetic", "--out",
                          str(tmp_path / "s"), "--classes", "0", "--images-per-class", "1",
                          "--image-size", "8"], capture_output=True, text=True)
    assert run.returncode == 2 and "--classes: must be >= 1, got 0" in run.stderr
    run = subprocess.run([sys.executable, "-m", "dlbench.datasets", "synthetic", "--out",
                          str(tmp_path / "s"), "--classes", "2", "--images-per-class", "2",
                          "--image-size", "16"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"format": "image_folder", "count": 4, "num_classes": 2}


def test_recordio_outside_the_mxnet_env_is_a_one_line_error(source, tmp_path, capsys):
    pytest.importorskip("lmdb")  # i.e. this is the main environment
    if "mxnet" in sys.modules or _has_mxnet():
        pytest.skip("mxnet importable here")
    err = _cli_error(capsys, "recordio", "--source", str(source), "--out", str(tmp_path / "r"))
    assert "recordio needs mxnet" in err


def _has_mxnet() -> bool:
    try:
        import mxnet  # noqa: F401
    except ImportError:
        return False
    return True
