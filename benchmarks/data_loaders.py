"""Images/s of the real-data readers against the decode bound of the same cores.

One command: prepares a synthetic ImageNet-like set (JPEGs, shorter side 375) in the three
storage formats, then measures, in interleaved rounds (median reported):

* ``bound``: the reader's own per-image work (read + JPEG decode + RandomResizedCrop + flip)
  done by a ``multiprocessing.Pool`` of k processes with no loader around it;
* each backend through ``dlbench.pytorch.datasets.make_loader`` with k decoding threads
  (the runner's default) and with k DataLoader worker processes (``*_processes``):
  image_folder, caffe_lmdb raw, caffe_lmdb encoded, and each one's ratio to the bound
  (``caffe_lmdb_raw`` holds decoded pixels and pays no JPEG decode: its ratio is
  reported, not judged against the target);
* ``synthetic``: a DataLoader over one ready uint8 image (the loader's own cost, from
  which ``dataloader_ceiling_ratio`` = 1 / (1 + bound / synthetic) follows: the best
  ratio any reader behind a DataLoader can reach on these cores);
* the MXNet runner's two RecordIO readers on the RecordIO copy, in the MXNet environment:
  ``mxnet_recordio_native`` (``ImageRecordIter`` with k decode threads asked; MXNet reports
  how many it used) and ``mxnet_recordio_gluon`` (``gluon.data.DataLoader`` with k worker
  processes decoding with Pillow), host batches as each reader yields them;
* single-core decode + crop rates of torchvision.io and Pillow (the decoder choice), and in
  the MXNet environment of the gluon reader's Pillow path vs ``mx.image`` (OpenCV) on the
  RecordIO payloads and of the Pillow path on the image folder's files.

The RecordIO copy is re-encoded at the source JPEGs' quality (``synthetic.JPEG_QUALITY``),
so that its readers decode images costing what the bound's files cost.

    python benchmarks/data_loaders.py [--out results/benchmarks/data_loaders.json]

Only the standard library is imported at the top: ``--mxnet-child`` runs this file in the
MXNet environment, which has no torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import positive_float, positive_int, positive_ints, provenance  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MXNET_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"
TARGET_RATIO = 0.9
# Readers the decode bound does not bound: their work is not the bound's work.
NOT_JUDGED = {
    "caffe_lmdb_raw": "stores decoded pixels, so pays no JPEG decode: the decode bound is "
                      "no bound for it (its ratio is reported, not judged)",
    "caffe_lmdb_raw_processes": "as caffe_lmdb_raw, with DataLoader worker processes",
}


# --- MXNet child (runs in the MXNet environment) ------------------------------------------

def _mxnet_rate(next_batch: Any, batch: int, seconds: float, warmup: int,
                clock_type: Any) -> list[float]:
    for _ in range(warmup):  # threads or workers started, first buffers filled
        next_batch()
    n, clock = 0, clock_type()
    while time.perf_counter() - clock.start_wall < seconds:
        next_batch()
        n += batch
    return list(clock.stop(n))


def mxnet_native(rec: str, k: int, seconds: float, batch: int, size: int) -> list[float]:
    import mxnet as mx

    it = mx.io.ImageRecordIter(
        path_imgrec=rec, data_shape=(3, size, size), batch_size=batch, shuffle=True,
        preprocess_threads=k, random_resized_crop=True, min_random_area=0.08,
        max_random_area=1.0, min_aspect_ratio=3 / 4, max_aspect_ratio=4 / 3,
        rand_mirror=True, prefetch_buffer=4)

    def batches():
        while True:
            yield from it
            it.reset()

    gen = batches()
    return _mxnet_rate(lambda: next(gen).data[0].wait_to_read(), batch, seconds, 4, CpuClock)


def mxnet_gluon(rec: str, k: int, seconds: float, batch: int, size: int) -> list[float]:
    from dlbench.mxnet.record_loader import GluonRecordReader

    reader = GluonRecordReader(Path(rec), Path(rec).with_suffix(".idx"), batch_size=batch,
                               input_shape=(3, size, size), workers=k)
    try:
        return _mxnet_rate(reader.next, batch, seconds,
                           max(k, 1) * 4 + 2, CpuClock)
    finally:
        reader.close()


def mxnet_decoders(rec: str, folder: str, size: int, seconds: float) -> dict[str, Any]:
    """Single-core read + decode + RandomResizedCrop + flip in the MXNet environment."""
    import random

    import mxnet as mx

    from dlbench.datasets.imageops import random_resized_crop
    from dlbench.mxnet.record_loader import RecordImages, decode_crop_flip

    images = RecordImages(Path(rec), Path(rec).with_suffix(".idx"), (size, size))
    payloads = [images.record(i)[1] for i in range(min(len(images), 64))]
    files = [p.read_bytes() for p in sorted(Path(folder).rglob("*.jpg"))[:64]]
    rng = random.Random(0)

    def with_pillow(data: bytes) -> Any:
        return decode_crop_flip(data, size, size, rng, "record")

    def with_mx_image(data: bytes) -> Any:  # OpenCV, as ImageRecordIter decodes
        img = mx.image.imdecode(data)
        left, top, w, h = random_resized_crop(img.shape[1], img.shape[0], rng)
        out = mx.image.fixed_crop(img, left, top, w, h, (size, size), interp=1)
        if rng.random() < 0.5:
            out = mx.nd.flip(out, axis=1)
        return out.asnumpy()

    return single_core_rates((("pillow_recordio", with_pillow, payloads),
                              ("mx_image_recordio", with_mx_image, payloads),
                              ("pillow_image_folder", with_pillow, files)), seconds)


def single_core_rates(cases: Any, seconds: float) -> dict[str, dict[str, float]]:
    """Per (name, fn, items): calls of fn over items in this thread for ``seconds``, after
    8 warm-up calls, as images per second and per CPU-second."""
    rates = {}
    for name, fn, items in cases:
        for item in items[:8]:
            fn(item)
        n, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            fn(items[n % len(items)])
            n += 1
        rates[name] = {"images_per_s": round(n / (time.perf_counter() - start), 1),
                       "images_per_cpu_s": round(n / (time.process_time() - cpu), 1)}
    return rates


def mxnet_child(rec: str, threads: list[int], seconds: float, batch: int, size: int,
                decoders_from: str | None) -> None:
    out: dict[str, Any] = {"native": {}, "gluon": {}}
    for k in threads:
        out["native"][str(k)] = mxnet_native(rec, k, seconds, batch, size)
        out["gluon"][str(k)] = mxnet_gluon(rec, k, seconds, batch, size)
    if decoders_from:
        out["decoders"] = mxnet_decoders(rec, decoders_from, size, seconds)
    print(json.dumps(out))


def run_mxnet(python: Path, rec: Path, threads: list[int], seconds: float, batch: int,
              size: int, decoders_from: Path | None = None,
              ) -> tuple[dict[str, Any], dict[str, int]]:
    cmd = [str(python), str(Path(__file__).resolve()), "--mxnet-child", str(rec),
           "--threads", ",".join(map(str, threads)), "--seconds", str(seconds),
           "--batch-size", str(batch), "--image-size", str(size)]
    if decoders_from is not None:
        cmd += ["--decoders-from", str(decoders_from)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"MXNet child failed: {proc.stderr.strip().splitlines()[-1:]}")
    used = [int(m) for m in re.findall(r"use (\d+) threads for decoding", proc.stderr)]
    return json.loads(proc.stdout.strip().splitlines()[-1]), dict(
        zip(map(str, threads), used, strict=False))


# --- preparation -------------------------------------------------------------------------

def prepare(work: Path, args: argparse.Namespace, mxnet_python: Path | None) -> dict[str, Any]:
    from dlbench.datasets import lmdb_writer, synthetic

    timings = {}
    paths = {"image_folder": work / "images", "lmdb_raw": work / "lmdb_raw",
             "lmdb_encoded": work / "lmdb_encoded", "recordio": work / "recordio"}
    spec = synthetic.Spec(args.classes, args.images_per_class, args.source_size, seed=0)
    start = time.perf_counter()
    synthetic.generate(paths["image_folder"], spec, workers=2)
    timings["synthetic"] = time.perf_counter() - start
    for name, encoded in (("lmdb_raw", False), ("lmdb_encoded", True)):
        start = time.perf_counter()
        lmdb_writer.write(paths["image_folder"], paths[name], encoded=encoded, workers=2)
        timings[name] = time.perf_counter() - start
    if mxnet_python is not None:
        start = time.perf_counter()
        subprocess.run([str(mxnet_python), "-m", "dlbench.datasets", "recordio", "--source",
                        str(paths["image_folder"]), "--out", str(paths["recordio"]),
                        "--quality", str(synthetic.JPEG_QUALITY), "--workers", "2"],
                       check=True, capture_output=True, cwd=REPO)
        timings["recordio"] = time.perf_counter() - start
    count = args.classes * args.images_per_class
    return {"paths": paths, "prepare_images_per_s": {k: count / v for k, v in timings.items()}}


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- measurements ------------------------------------------------------------------------

class CpuClock:
    """CPU seconds used by this process and its live children (loader or pool workers):
    on a shared machine, images per CPU-second are steadier than images per second."""

    def __init__(self) -> None:
        import psutil

        self.me = psutil.Process()
        self.start_cpu = self._total()
        self.start_wall = time.perf_counter()

    def _total(self) -> float:
        import psutil

        total = 0.0
        for proc in [self.me, *self.me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system
        return total

    def stop(self, images: int) -> tuple[float, float]:
        """(images per second, images per CPU-second) since the clock started."""
        wall = time.perf_counter() - self.start_wall
        cpu = self._total() - self.start_cpu
        return images / wall, images / cpu if cpu > 0 else float("nan")


_POOL_DATASET: Any = None


def _pool_init() -> None:
    import torch

    torch.set_num_threads(1)  # as in DataLoader workers


def _pool_work(indices: list[int]) -> int:
    for i in indices:
        _POOL_DATASET[i]
    return len(indices)


def bound_rate(dataset: Any, processes: int, images: int,
               chunk: int = 8) -> tuple[float, float]:
    """Per-image reader work in a pool of ``processes``, with no loader machinery."""
    global _POOL_DATASET
    _POOL_DATASET = dataset
    n = len(dataset)
    order = [(i * 7919) % n for i in range(images)]  # a fixed scatter over the set
    chunks = [order[i:i + chunk] for i in range(0, images, chunk)]
    with multiprocessing.get_context("fork").Pool(processes, initializer=_pool_init) as pool:
        list(pool.imap_unordered(_pool_work, chunks[:processes * 2]))  # warm-up
        clock = CpuClock()
        return clock.stop(sum(pool.imap_unordered(_pool_work, chunks)))


def loader_rate(loader: Any, batch: int, seconds: float, workers: int) -> tuple[float, float]:
    """Steady-state images/s: batches prefetched while warming up are not counted."""
    def batches():
        while True:
            yield from loader

    gen = batches()
    for _ in range(max(workers, 1) * 4 + 2):
        next(gen)
    n, clock = 0, CpuClock()
    while time.perf_counter() - clock.start_wall < seconds:
        next(gen)
        n += batch
    rates = clock.stop(n)
    del gen
    return rates


class OneImage:
    """A dataset of one ready uint8 image: what the DataLoader costs by itself."""

    def __init__(self, size: int, length: int):
        import torch

        self.image = torch.randint(0, 256, (3, size, size), dtype=torch.uint8)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[Any, int]:
        return self.image.clone(), i % 10


def synthetic_rate(size: int, batch: int, workers: int, seconds: float) -> tuple[float, float]:
    import torch
    from torch.utils.data import DataLoader

    extra = {"persistent_workers": True, "prefetch_factor": 4} if workers else {}
    loader = DataLoader(OneImage(size, 4096), batch_size=batch, shuffle=True,
                        num_workers=workers, drop_last=True,
                        generator=torch.Generator().manual_seed(0), **extra)
    return loader_rate(loader, batch, seconds, workers)


def decoder_rates(files: list[Path], size: int, seconds: float) -> dict[str, dict[str, float]]:
    """Single-core read + decode + RandomResizedCrop + flip, torchvision.io vs Pillow."""
    import numpy as np
    import torch
    from PIL import Image
    from torchvision.transforms import RandomResizedCrop

    from dlbench.pytorch.datasets import RATIO, SCALE, CropFlip, decode

    torch.set_num_threads(1)
    crop = CropFlip(size)

    def with_torchvision(path: Path) -> Any:
        return crop(decode(bytearray(path.read_bytes()), str(path)))

    def with_pillow(path: Path) -> Any:
        with Image.open(io.BytesIO(path.read_bytes())) as img:
            img = img.convert("RGB")
            top, left, h, w = RandomResizedCrop.get_params(img, SCALE, RATIO)
            out = img.resize((size, size), Image.Resampling.BILINEAR,
                             box=(left, top, left + w, top + h))
        if torch.rand(1).item() < 0.5:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(out)).permute(2, 0, 1)

    return single_core_rates((("torchvision", with_torchvision, files),
                              ("pillow", with_pillow, files)), seconds)


# --- driver --------------------------------------------------------------------------------

def verdicts(table: dict[str, dict[str, Any]], top: str
             ) -> tuple[dict[str, bool], dict[str, str]]:
    """Which readers reach TARGET_RATIO of the bound at ``top`` workers, and those left
    unjudged (with why): the bound and the synthetic source are no readers, raw pixels pay
    no decode."""
    meets = {name: entries[top]["ratio_to_bound"] >= TARGET_RATIO
             for name, entries in table.items()
             if name not in ("bound", "synthetic", *NOT_JUDGED) and top in entries}
    return meets, {name: why for name, why in NOT_JUDGED.items() if name in table}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from dlbench.datasets import synthetic
    from dlbench.pytorch import datasets as readers

    mxnet_python = Path(args.mxnet_python) if args.mxnet_python else DEFAULT_MXNET_PYTHON
    if not (mxnet_python.exists() and not args.no_mxnet):
        mxnet_python = None
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dlbench-loaders-"))
    try:
        load_before = os.getloadavg()
        prep = prepare(work, args, mxnet_python)
        paths = prep["paths"]
        for p in paths.values():  # into the page cache: measure decoding, not the disk
            for f in p.rglob("*"):
                if f.is_file():
                    f.read_bytes()
        workers = args.workers
        backends = {"image_folder": ("image_folder", paths["image_folder"]),
                    "caffe_lmdb_raw": ("caffe_lmdb", paths["lmdb_raw"]),
                    "caffe_lmdb_encoded": ("caffe_lmdb", paths["lmdb_encoded"])}
        files = sorted(paths["image_folder"].rglob("*.jpg"))
        single = decoder_rates(files, args.image_size, args.seconds)
        folder = readers.ImageFolderSamples(paths["image_folder"], args.image_size)
        samples: dict[str, list[tuple[float, float]]] = {}

        def record(key: str, value: tuple[float, float]) -> None:
            samples.setdefault(key, []).append(tuple(value))
            print(f"  {key}: {value[0]:.1f} images/s, {value[1]:.1f} images/cpu-s",
                  file=sys.stderr, flush=True)

        mx_threads: dict[str, int] = {}
        mx_decoders: dict[str, Any] = {}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for k in workers:
                images = int(single["torchvision"]["images_per_s"] * k * args.seconds)
                record(f"bound/{k}", bound_rate(folder, k, images))
                record(f"synthetic/{k}", synthetic_rate(args.image_size, args.batch_size, k,
                                                        args.seconds))
                for name, (backend, path) in backends.items():
                    # Decoding threads (the runner's default) and DataLoader worker processes.
                    for kind, suffix in (("threads", ""), ("processes", "_processes")):
                        loader, _ = readers.make_loader(
                            path, backend, batch_size=args.batch_size,
                            image_size=args.image_size, shuffle=True, num_workers=k, seed=r,
                            workers=kind)
                        record(f"{name}{suffix}/{k}",
                               loader_rate(loader, args.batch_size, args.seconds, k))
                        if kind == "threads":
                            loader.close()
                        del loader
            if mxnet_python is not None:
                rates, mx_threads = run_mxnet(
                    mxnet_python, paths["recordio"] / "data.rec", workers, args.seconds,
                    args.batch_size, args.image_size,
                    decoders_from=paths["image_folder"] if r == 0 else None)
                mx_decoders = rates.pop("decoders", mx_decoders)
                for reader, by_k in rates.items():
                    for k, v in by_k.items():
                        record(f"mxnet_recordio_{reader}/{k}", v)
        load_after = os.getloadavg()
        median = {key: statistics.median(r for r, _ in v) for key, v in samples.items()}
        per_cpu = {key: statistics.median(c for _, c in v) for key, v in samples.items()}
        table: dict[str, dict[str, Any]] = {}
        for key, value in median.items():
            name, k = key.split("/")
            entry = {"images_per_s": round(value, 1),
                     "images_per_cpu_s": round(per_cpu[key], 1),
                     "rounds_images_per_s": [round(r, 1) for r, _ in samples[key]]}
            if name != "bound":
                entry["ratio_to_bound"] = round(value / median[f"bound/{k}"], 3)
                entry["cpu_efficiency_vs_bound"] = round(per_cpu[key] / per_cpu[f"bound/{k}"],
                                                         3)
            if name == "mxnet_recordio_native":
                entry["decode_threads_used"] = mx_threads.get(k)
            if name == "mxnet_recordio_gluon":
                entry["worker_processes"] = int(k)
            table.setdefault(name, {})[k] = entry
        # What the DataLoader's own per-image cost (the synthetic source: shared-memory
        # batches, IPC) leaves of the bound when added to the decode work on the same cores.
        ceiling = {str(k): round(1.0 / (1.0 + median[f"bound/{k}"] / median[f"synthetic/{k}"]),
                                 3) for k in workers}
        top = str(max(workers))
        meets, not_judged = verdicts(table, top)
        return {
            "benchmark": "data_loaders",
            "what": "images/s of each reader (decode + RandomResizedCrop + flip to uint8) "
                    "vs the same per-image work in a process pool (the bound)",
            "config": {"classes": args.classes, "images_per_class": args.images_per_class,
                       "source_shorter_side": args.source_size, "image_size": args.image_size,
                       "batch_size": args.batch_size, "seconds": args.seconds,
                       "rounds": args.rounds, "workers": workers,
                       "recordio_quality": synthetic.JPEG_QUALITY},
            **provenance(),
            "environment": {"torch": torch.__version__, "decoder": readers.DECODER,
                            "loadavg_before": [round(x, 2) for x in load_before],
                            "loadavg_after": [round(x, 2) for x in load_after]},
            "dataset_bytes": {name: dir_bytes(p) for name, p in paths.items() if p.exists()},
            "prepare_images_per_s": {k: round(v, 1)
                                     for k, v in prep["prepare_images_per_s"].items()},
            "single_core_decode_crop": single,
            "mxnet_single_core_decode_crop": mx_decoders,
            "results": table,
            "dataloader_ceiling_ratio": ceiling,
            "target_ratio": TARGET_RATIO,
            "meets_target_at_max_workers": meets, "not_judged": not_judged,
        }
    finally:
        if not args.work or args.cleanup:
            shutil.rmtree(work, ignore_errors=True)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "results" / "benchmarks" / "data_loaders.json"))
    ap.add_argument("--work", help="folder for the prepared data (default: a temp folder)")
    ap.add_argument("--cleanup", action="store_true", help="remove --work afterwards")
    ap.add_argument("--classes", type=positive_int, default=8)
    ap.add_argument("--images-per-class", type=positive_int, default=128)
    ap.add_argument("--source-size", type=positive_int, default=375,
                    help="shorter side of the JPEGs")
    ap.add_argument("--image-size", type=positive_int, default=224)
    ap.add_argument("--batch-size", type=positive_int, default=32)
    ap.add_argument("--workers", type=positive_ints, default="1,2",
                    help="loader workers to measure, e.g. 1,2")
    ap.add_argument("--seconds", type=positive_float, default=4.0, help="per measurement")
    ap.add_argument("--rounds", type=positive_int, default=3)
    ap.add_argument("--mxnet-python", help=f"default {DEFAULT_MXNET_PYTHON} (skipped where "
                    "that is missing)")
    ap.add_argument("--no-mxnet", action="store_true")
    ap.add_argument("--mxnet-child", help=argparse.SUPPRESS)
    ap.add_argument("--threads", help=argparse.SUPPRESS)
    ap.add_argument("--decoders-from", help=argparse.SUPPRESS)
    return ap


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = parser()
    args = ap.parse_args(argv)
    # Only the default may be missing (no MXNet environment built): a path given and not
    # there is a typo, not a reason to measure without MXNet.
    if args.mxnet_python and not args.no_mxnet and not Path(args.mxnet_python).is_file():
        ap.error(f"argument --mxnet-python: {args.mxnet_python} does not exist")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.mxnet_child:
        mxnet_child(args.mxnet_child, [int(t) for t in args.threads.split(",")], args.seconds,
                    args.batch_size, args.image_size, args.decoders_from)
        return 0
    doc = measure(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for name, entries in doc["results"].items():
        cells = ", ".join(f"{k}w {e['images_per_s']:.0f}/s ({e.get('ratio_to_bound', 1):.2f})"
                          for k, e in entries.items())
        print(f"{name:20s} {cells}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
