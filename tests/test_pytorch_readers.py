"""PyTorch readers: ImageFolder and Caffe LMDB (raw and encoded Datums) into DataLoaders.

Colour checks use solid-colour images: any RandomResizedCrop and flip of a solid image is
that colour, so the RGB order and labels can be asserted exactly through the augmentation.
The LMDB of the foreign-writer test is written with a protobuf wire encoder written here,
not with the project's writer.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import lmdb
import numpy as np
import pytest
import torch
from PIL import Image
from pytorch_cell import run_runner
from torch.utils.data import DistributedSampler
from wire_datum import wire_datum

from dlbench.cellrun import CellError, one_line
from dlbench.datasets import lmdb_writer, synthetic
from dlbench.pytorch.datasets import make_loader
from dlbench.pytorch.threaded_loader import ThreadedLoader

# torchvision 0.29 deprecates its codecs; the reader silences that notice, pytest resets filters.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities")

SPEC = synthetic.Spec(classes=4, images_per_class=8, image_size=64, seed=2)
SIZE = 32


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("readers")
    folder = root / "images"
    synthetic.generate(folder, SPEC)
    lmdb_writer.write(folder, root / "raw", resize=48)
    lmdb_writer.write(folder, root / "encoded", encoded=True)
    return {"image_folder": folder, "raw": root / "raw", "encoded": root / "encoded"}


def _backend(name: str) -> str:
    return "image_folder" if name == "image_folder" else "caffe_lmdb"


@pytest.mark.parametrize("kind", ["threads", "processes"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", ["image_folder", "raw", "encoded"])
def test_loader_yields_uint8_chw_batches_and_int64_labels(prepared, name, workers, kind):
    loader, manifest = make_loader(prepared[name], _backend(name), batch_size=5, image_size=SIZE,
                                   shuffle=True, num_workers=workers, seed=1, workers=kind)
    assert manifest["count"] == 32 and manifest["num_classes"] == SPEC.classes
    if kind == "processes":
        assert loader.persistent_workers == (workers > 0)
    else:
        assert isinstance(loader, ThreadedLoader) and loader.threads == workers
    batches = list(loader)
    assert len(batches) == len(loader) == 32 // 5  # drop_last
    labels = []
    for images, y in batches:
        assert images.shape == (5, 3, SIZE, SIZE) and images.dtype == torch.uint8
        assert y.shape == (5,) and y.dtype == torch.int64
        assert images.float().std() > 5  # decoded content, not zeros
        labels += y.tolist()
    assert set(labels) <= set(range(SPEC.classes))
    assert labels != sorted(labels)  # shuffled
    again = [y.tolist() for _, y in make_loader(
        prepared[name], _backend(name), batch_size=5, image_size=SIZE, shuffle=True,
        num_workers=workers, seed=1, workers=kind)[0]]
    assert sum(again, []) == labels  # the seed fixes the order


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_distributed_sampler_rank_1_of_2(prepared, kind):
    loader, _ = make_loader(prepared["encoded"], "caffe_lmdb", batch_size=4, image_size=SIZE,
                            shuffle=True, num_workers=2, rank=1, world_size=2, workers=kind)
    assert isinstance(loader.sampler, DistributedSampler)
    assert (loader.sampler.rank, loader.sampler.num_replicas) == (1, 2)
    assert len(loader) == (32 // 2) // 4
    other, _ = make_loader(prepared["encoded"], "caffe_lmdb", batch_size=4, image_size=SIZE,
                           shuffle=True, num_workers=0, rank=0, world_size=2)
    mine, theirs = set(loader.sampler), set(other.sampler)
    assert not mine & theirs and len(mine | theirs) == 32  # the ranks split the data
    for images, labels in loader:
        assert images.shape == (4, 3, SIZE, SIZE) and labels.dtype == torch.int64


# --- colours through the augmentation --------------------------------------------------------

def _colour(label: int) -> tuple[int, int, int]:
    return (200, 40 + 50 * label, 10 + 30 * label)  # RGB, distinct per label


def _write_foreign_lmdb(path: Path, *, encoded: bool) -> None:
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(8):
            label = i % 3
            rgb = np.full((40, 56, 3), _colour(label), dtype=np.uint8)
            if encoded:
                buf = io.BytesIO()
                Image.fromarray(rgb).save(buf, format="PNG")
                value = wire_datum(label=label, data=buf.getvalue(), encoded=True)
            else:
                bgr_chw = rgb[:, :, ::-1].transpose(2, 0, 1)
                value = wire_datum(label=label, channels=3, height=40, width=56,
                                    data=bgr_chw.tobytes())
            txn.put(f"{i:08d}_x{i}.png".encode(), value)
    env.close()


@pytest.mark.parametrize("encoded", [False, True])
def test_foreign_datum_lmdb_is_read_with_rgb_order_and_labels(tmp_path, encoded):
    path = tmp_path / "foreign"
    _write_foreign_lmdb(path, encoded=encoded)
    loader, manifest = make_loader(path, "caffe_lmdb", batch_size=4, image_size=SIZE,
                                   shuffle=False, num_workers=0)
    assert manifest["count"] == 8 and manifest.get("derived") is True
    seen = 0
    for images, labels in loader:
        for image, label in zip(images, labels.tolist(), strict=True):
            want = torch.tensor(_colour(label), dtype=torch.uint8).view(3, 1, 1)
            assert torch.equal(image, want.expand(3, SIZE, SIZE)), (label, image[:, 0, 0])
            seen += 1
    assert seen == 8
    assert [label for _, y in loader for label in y.tolist()] == [i % 3 for i in range(8)]


def test_image_folder_colours_survive_decode_and_crop(tmp_path):
    for label in range(2):
        (tmp_path / f"c{label}").mkdir()
        for i in range(3):
            Image.new("RGB", (50 + 7 * i, 40), _colour(label)).save(
                tmp_path / f"c{label}" / f"{i}.jpg", quality=95)
    loader, _ = make_loader(tmp_path, "image_folder", batch_size=3, image_size=SIZE,
                            shuffle=False, num_workers=0)
    for images, labels in loader:
        for image, label in zip(images, labels.tolist(), strict=True):
            want = torch.tensor(_colour(label), dtype=torch.int16).view(3, 1, 1)
            assert (image.to(torch.int16) - want).abs().max() <= 3  # JPEG rounding only


# --- bad input -----------------------------------------------------------------------------

def _error(**kwargs) -> str:
    args = {"batch_size": 2, "image_size": SIZE, "shuffle": False, "num_workers": 0} | kwargs
    data_dir, backend = args.pop("data_dir"), args.pop("backend")
    with pytest.raises(CellError) as info:
        loader, _ = make_loader(data_dir, backend, **args)
        for _ in loader:
            pass
    message = one_line(info.value)
    assert message == str(info.value) and "\n" not in message
    return message


def test_bad_inputs_are_one_line_cell_errors(prepared, tmp_path):
    missing = tmp_path / "nope"
    assert _error(data_dir=missing, backend="image_folder") == \
        f"{missing}: no such directory (data_dir for backend image_folder)"
    assert "not one of image_folder, caffe_lmdb" in _error(data_dir=prepared["raw"],
                                                           backend="tfrecord")
    assert f"{prepared['image_folder']}: not an LMDB (no data.mdb)" == _error(
        data_dir=prepared["image_folder"], backend="caffe_lmdb")
    assert "no class subfolders" in _error(data_dir=prepared["raw"], backend="image_folder")
    assert "fewer than one batch of 64" in _error(data_dir=prepared["raw"], backend="caffe_lmdb",
                                                  batch_size=64)
    assert "rank 2 is outside 0..1" in _error(data_dir=prepared["raw"], backend="caffe_lmdb",
                                              rank=2, world_size=2)
    other = tmp_path / "other"
    env = lmdb.open(str(other), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"a", b'{"label": 1}')
    env.close()
    assert _error(data_dir=other, backend="caffe_lmdb").startswith(f"{other} key a: not ")


def test_manifest_of_another_format_is_rejected(prepared, tmp_path):
    copy = tmp_path / "lmdb"
    copy.mkdir()
    for p in prepared["raw"].iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    text = (copy / "manifest.json").read_text().replace('"caffe_lmdb"', '"recordio"')
    (copy / "manifest.json").write_text(text)
    assert "dataset format is 'recordio', not 'caffe_lmdb'" in _error(data_dir=copy,
                                                                     backend="caffe_lmdb")


def _tree_with_manifest(tmp_path: Path, text: str) -> Path:
    """A user's ImageFolder (2 classes of 3 images) holding ``text`` as manifest.json."""
    for label in range(2):
        (tmp_path / f"c{label}").mkdir()
        for i in range(3):
            Image.new("RGB", (40, 40), _colour(label)).save(tmp_path / f"c{label}" / f"{i}.jpg")
    (tmp_path / "manifest.json").write_text(text)
    return tmp_path


@pytest.mark.parametrize("text", [
    '{"name": "pets", "licence": "cc-by"}',  # another tool's JSON, none of our fields
    '{"format": "coco", "count": 999}',  # our field names, another tool's meaning
    '[{"file": "c0/0.jpg"}]',
    '{"meta": {"manifest_version": 3}}',  # the key, but not where ours has it
    "null",
])
def test_image_folder_ignores_a_manifest_json_another_tool_left(tmp_path, text):
    root = _tree_with_manifest(tmp_path, text)
    loader, manifest = make_loader(root, "image_folder", batch_size=3, image_size=SIZE,
                                   shuffle=False, num_workers=0)
    assert manifest["derived"] is True and (manifest["count"], manifest["num_classes"]) == (6, 2)
    assert sorted(label for _, y in loader for label in y.tolist()) == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize(("edit", "words"), [
    pytest.param(lambda t: t[:len(t) // 2], "not a readable JSON manifest (", id="cut_short"),
    pytest.param(lambda t: "\x00" * len(t), "not a readable JSON manifest (", id="zeroed"),
    pytest.param(lambda t: t.replace('"count"', '"counted"'),
                 "manifest lacks 'format' or 'count'", id="field_lost"),
    pytest.param(lambda t: t.replace('"image_folder"', '"caffe_lmdb"'),
                 "dataset format is 'caffe_lmdb', not 'image_folder'", id="other_format"),
    pytest.param(lambda t: re.sub(r'"count": \d+', '"count": 7', t),
                 "manifest says 7 images, found 32", id="other_count"),
])
def test_a_damaged_or_mismatching_manifest_of_ours_fails_naming_it(prepared, tmp_path, edit,
                                                                    words):
    root = tmp_path / "images"
    shutil.copytree(prepared["image_folder"], root)
    manifest = root / "manifest.json"
    manifest.write_text(edit(manifest.read_text()))
    message = _error(data_dir=root, backend="image_folder")
    assert message.startswith(f"{manifest}: ") and words in message, message


def test_a_cell_records_the_folder_it_read_resolved(tmp_path):
    """Two trees given one dataset name are told apart by the folder each result records,
    with links resolved; a cell that fails reading its tree records it too."""
    images = tmp_path / "images"
    synthetic.generate(images, synthetic.Spec(classes=2, images_per_class=2, image_size=32,
                                              seed=1))
    (tmp_path / "link").symlink_to(images)
    (tmp_path / "empty").mkdir()
    common = ["--model=resnet18", "--batch_size=2", "--device=cpu", "--num_batches=1",
              "--num_warmup_batches=0", "--data_loader_only=true", "--data_name=pets",
              "--data_backend=image_folder", "--monitor_interval_ms=0"]
    proc, res = run_runner(tmp_path, *common, f"--data_dir={tmp_path / 'link'}", name="a.json")
    assert proc.returncode == 0 and res["status"] == "ok", proc.stderr[-2000:]
    assert res["extra"]["data_source"] == str(images.resolve())
    proc, res = run_runner(tmp_path, *common, f"--data_dir={tmp_path / 'empty'}", name="b.json")
    assert res["status"] == "failed" and res["cell"]["data"] == "pets"
    assert res["extra"]["data_source"] == str((tmp_path / "empty").resolve())


@pytest.mark.parametrize("kind", ["threads", "processes"])
@pytest.mark.parametrize(("content", "workers"), [(b"\xff\xd8\xff\xe0 not a jpeg", 2),
                                                  (b"", 2), (b"GIF89a junk", 0)])
def test_unreadable_image_names_the_file(tmp_path, content, workers, kind):
    synthetic.generate(tmp_path / "d", synthetic.Spec(2, 4, 32, 0))
    broken = tmp_path / "d" / "class_0001" / "img_0001_000002.jpg"
    broken.write_bytes(content)
    message = _error(data_dir=tmp_path / "d", backend="image_folder", num_workers=workers,
                     workers=kind)
    assert message.startswith(f"{broken}: unreadable image ("), message


def test_threaded_batches_stay_valid_until_two_more_are_drawn(prepared):
    """The ring of reused batch tensors: a batch is not overwritten while the consumer can
    still be reading it (the next one is drawn), only two draws later."""
    loader, _ = make_loader(prepared["image_folder"], "image_folder", batch_size=4,
                            image_size=SIZE, shuffle=False, num_workers=2)
    it = iter(loader)
    first, _ = next(it)
    snapshot = first.clone()
    next(it)
    assert torch.equal(first, snapshot)
    buffers = {id(b) for b in loader._buffers}
    assert len(buffers) == 4 and first.data_ptr() in {b.data_ptr() for b in loader._buffers}


class _Probe(torch.utils.data.Dataset):
    """Sample i is an image filled with i; records the intra-op thread count it ran under."""

    def __init__(self, n: int):
        self.n, self.seen = n, set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        self.seen.add(torch.get_num_threads())
        return torch.full((1, 2, 2), i, dtype=torch.uint8), i


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_threaded_loader_chunks_land_in_order_and_ops_run_single_threaded(threads):
    """Chunked hand-out puts every sample in its own row, in sampler order; inside loader
    threads torch ops get one intra-op thread while the caller keeps its own count."""
    torch.set_num_threads(2)
    probe = _Probe(23)
    loader = ThreadedLoader(probe, sampler=torch.utils.data.SequentialSampler(probe),
                            batch_size=10, threads=threads, drop_last=False,
                            sample_shape=(1, 2, 2))
    rows = []
    for images, labels in loader:
        assert torch.equal(images[:, 0, 0, 0].long(), labels)
        rows += labels.tolist()
    loader.close()
    assert rows == list(range(23))
    assert probe.seen == ({2} if threads == 0 else {1})
    assert torch.get_num_threads() == 2
