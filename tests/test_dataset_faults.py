"""Prepared datasets that went wrong on disk, sources edited in place, and a missing MXNet
environment: each is one line naming the file, never a bus error or a job exiting 127.

- a truncated Caffe LMDB or RecordIO is found by its headers and sizes (``quick``), before
  anything maps it;
- a source tree's fingerprint changes with any file replaced or added inside it;
- ``recordio --python PY`` converts in PY, and records a failure naming PY (and the
  reason its set-up left) when PY is missing.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import lmdb
import pytest
from PIL import Image

from dlbench.datasets import __main__ as cli
from dlbench.datasets import check, failure, fingerprint, lmdb_writer, quick, synthetic
from dlbench.datasets import recordio_format as rf

REPO = Path(__file__).resolve().parents[1]
MXNET_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("faults") / "images"
    synthetic.generate(out, synthetic.Spec(classes=2, images_per_class=6, image_size=48, seed=3))
    return out


@pytest.fixture
def prepared_lmdb(source, tmp_path) -> Path:
    out = tmp_path / "caffe_lmdb"
    lmdb_writer.write(source, out)  # raw pixels: many pages beyond the meta pages
    return out


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlbench.datasets", *argv],
                          capture_output=True, text=True, timeout=120)


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


# --- item 9: a truncated LMDB ----------------------------------------------------------------

def test_meta_pages_read_by_hand_agree_with_lmdb(prepared_lmdb):
    data = prepared_lmdb / "data.mdb"
    env = lmdb.open(str(prepared_lmdb), readonly=True, lock=False)
    try:
        declared = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    finally:
        env.close()
    assert data.stat().st_size == declared > 2 * 4096
    assert quick.quick_problem(prepared_lmdb) is None
    _truncate(data, declared - 1)
    assert f"declares {declared} bytes" in quick.quick_problem(prepared_lmdb)


def test_check_of_a_truncated_lmdb_is_one_line_not_a_bus_error(prepared_lmdb):
    data = prepared_lmdb / "data.mdb"
    full = data.stat().st_size
    _truncate(data, full // 2)
    run = _cli("check", "--format", "caffe_lmdb", str(prepared_lmdb))
    assert run.returncode == 2, (run.returncode, run.stderr)  # -7 (SIGBUS) before
    assert run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"error: {data}: truncated LMDB")
    assert f"declares {full} bytes" in run.stderr and f"the file has {full // 2}" in run.stderr
    assert check.quick_problem(prepared_lmdb) == run.stderr.removeprefix("error: ").strip()


@pytest.mark.parametrize(("size", "words"), [
    (4096 + 100, "truncated LMDB: at least 8192 bytes expected, the file has 4196"),
    (100, "not an LMDB (no LMDB meta page at the start; 100 bytes)"),
    (0, "not an LMDB (no LMDB meta page at the start; 0 bytes)"),
])
def test_lmdb_cut_within_its_meta_pages(prepared_lmdb, size, words):
    _truncate(prepared_lmdb / "data.mdb", size)
    assert quick.quick_problem(prepared_lmdb) == f"{prepared_lmdb / 'data.mdb'}: {words}"


def test_lmdb_written_in_several_transactions_uses_the_current_meta_page(tmp_path):
    folder = tmp_path / "caffe_lmdb"
    env = lmdb.open(str(folder), map_size=1 << 24)
    for n in range(3):  # each commit writes the other meta page, with a larger txn id
        with env.begin(write=True) as txn:
            txn.put(f"k{n}".encode(), bytes(20000))
    declared = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    env.close()
    assert quick.quick_problem(folder) is None
    _truncate(folder / "data.mdb", declared - 4096)
    assert f"declares {declared} bytes" in quick.quick_problem(folder)


# --- item 9: RecordIO and the other formats --------------------------------------------------

def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, format="JPEG")
    return buf.getvalue()


def _write_recordio(folder: Path, count: int) -> list[int]:
    """A RecordIO set as im2rec lays it out, by hand: its records' offsets."""
    folder.mkdir(parents=True)
    stream, offsets, index = b"", [], ""
    for key in range(count):
        payload = struct.pack("<IfQQ", 0, float(key % 2), key, 0) + _jpeg()
        offsets.append(len(stream))
        index += f"{key}\t{len(stream)}\n"
        stream += struct.pack("<II", rf.MAGIC, len(payload)) + payload
        stream += b"\0" * ((4 - len(payload) % 4) % 4)
    (folder / "data.rec").write_bytes(stream)
    (folder / "data.idx").write_text(index)
    return offsets


def test_recordio_cut_before_or_inside_its_last_record(tmp_path):
    folder = tmp_path / "recordio"
    offsets = _write_recordio(folder, 5)
    rec = folder / "data.rec"
    assert quick.quick_problem(folder) is None
    assert check.check("recordio", folder, sample=0)["count"] == 5
    _truncate(rec, offsets[-1] + 8 + 10)  # inside the last record's payload
    problem = quick.quick_problem(folder)
    assert problem.startswith(f"{rec} record 4: truncated record at offset {offsets[-1]}")
    _truncate(rec, offsets[-1])  # the last record's offset is now past the end
    assert quick.quick_problem(folder) == (
        f"{rec}: truncated RecordIO: data.idx puts record 4 at byte {offsets[-1]}, "
        f"the file has {offsets[-1]} bytes")
    run = _cli("check", "--format", "recordio", str(folder))
    assert run.returncode == 2 and run.stderr == f"error: {quick.quick_problem(folder)}\n"


def test_recordio_with_an_index_cut_mid_line_or_empty(tmp_path):
    folder = tmp_path / "recordio"
    _write_recordio(folder, 3)
    idx = folder / "data.idx"
    idx.write_text(idx.read_text() + "3\t")
    assert quick.quick_problem(folder) == f"{idx}: last line is not 'key<TAB>offset': " \
                                           "'3\\t' (a truncated index)"
    idx.write_text("")
    assert quick.quick_problem(folder) == f"{idx}: empty index"


def test_image_folder_and_recorded_failures_have_no_structural_problem(source, tmp_path):
    assert quick.structural_problem(source, "image_folder") is None
    failed = tmp_path / "caffe_lmdb"
    failure.record(failed, "x.jpg: unreadable image")
    assert quick.quick_problem(failed) is None  # the cells report the failure itself


def test_a_dangling_image_link_fails_naming_it_and_check_quotes_a_recorded_failure(
        source, tmp_path):
    """A link to a removed image was left out without a word (torchvision lists it, then
    fails on it): the conversion now fails naming it. `check` of a folder whose
    preparation failed said "not an LMDB (no data.mdb)" instead of the recorded reason."""
    tree = tmp_path / "tree"
    shutil.copytree(source, tree)
    cat = next(p for p in tree.iterdir() if p.is_dir())
    dangling = cat / "gone.jpg"
    dangling.symlink_to(tmp_path / "nonexistent.jpg")
    out = tmp_path / "lmdb"
    done = _cli("lmdb", "--record-failure", "--source", str(tree), "--out", str(out))
    assert done.returncode == 0, done.stderr
    reason = (out / failure.FILENAME).read_text().strip()
    assert str(dangling) in reason, reason
    checked = _cli("check", "--format", "caffe_lmdb", str(out))
    assert checked.returncode == 2
    assert checked.stderr.strip().splitlines()[-1] == (
        f"error: {out}: dataset was not prepared: {reason}")


def test_broken_prepared_sees_each_workflow_folder_once(prepared_lmdb, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = Path("results/datasets")
    bad, good = root / "bad" / "caffe_lmdb", root / "good" / "caffe_lmdb"
    for folder in (bad, good):
        folder.parent.mkdir(parents=True)
        prepared_lmdb.rename(folder) if folder == bad else os.symlink(tmp_path / bad, folder)
    _truncate(bad / "data.mdb", 8192)
    user_tree = tmp_path / "elsewhere" / "caffe_lmdb"  # a user's folder: never removed
    user_tree.mkdir(parents=True)
    dirs = [str(bad), str(bad), "", str(root / "absent" / "recordio"), str(user_tree)]
    found = quick.broken_prepared(dirs)
    assert [(folder, problem.split(": ")[1]) for folder, problem in found] == \
        [(bad, "truncated LMDB")]
    assert quick.prepared_folders([*dirs, str(good)]) == [bad, good]

    def io_error(path):
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setitem(quick.PROBES, "caffe_lmdb", io_error)  # a network filesystem's
    assert quick.broken_prepared([str(bad)]) == []  # no proof of a truncation: left alone


def test_remove_broken_prepared_says_each_in_one_line(prepared_lmdb, tmp_path, monkeypatch,
                                                     capsys):
    monkeypatch.chdir(tmp_path)
    bad = Path("results/datasets/bad/caffe_lmdb")
    bad.parent.mkdir(parents=True)
    prepared_lmdb.rename(bad)
    asked = []
    assert quick.remove_broken_prepared([str(bad)], dry_run=lambda: asked.append(1)) == []
    assert asked == []  # Snakemake's command line is parsed only when something is broken
    _truncate(bad / "data.mdb", 8192)
    # A dry run removes nothing but returns what it would remove: its cells would run
    # again, which the dry run says too (it said "Nothing to be done").
    assert quick.remove_broken_prepared([str(bad)], dry_run=lambda: True) == [bad]
    assert capsys.readouterr().err.startswith(f"dlbench: would remove {bad}: {bad}/data.mdb: ")
    assert bad.is_dir()

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(quick.shutil, "rmtree", refuse)
    with pytest.raises(quick.DatasetError, match=rf"truncated LMDB.*; cannot remove {bad} "
                                                 r"\(Permission denied\)$"):
        quick.remove_broken_prepared([str(bad)], dry_run=lambda: False)
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert quick.remove_broken_prepared([str(bad)], dry_run=lambda: False) == [bad]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dlbench: removed {bad} to prepare it")
    assert not bad.exists()


# --- item 10: a source tree's fingerprint ----------------------------------------------------

def test_fingerprint_changes_with_a_file_replaced_or_added_deep_in_the_tree(source, tmp_path):
    tree = tmp_path / "tree"
    synthetic.generate(tree, synthetic.Spec(2, 2, 16, 0))
    before = fingerprint.tree_fingerprint(tree)
    assert fingerprint.tree_fingerprint(tree) == before
    root_mtime = tree.stat().st_mtime_ns
    image = next((tree / "class_0001").glob("*.jpg"))
    image.write_bytes((source / "class_0000" / "img_0000_000000.jpg").read_bytes())
    replaced = fingerprint.tree_fingerprint(tree)
    assert replaced != before
    (tree / "class_0000" / "new.jpg").write_bytes(image.read_bytes())
    added = fingerprint.tree_fingerprint(tree)
    assert added not in (before, replaced)
    assert tree.stat().st_mtime_ns == root_mtime  # what Snakemake sees of the input folder
    (tree / "class_0000" / ".new.jpg.swp").write_bytes(b"editor")
    assert fingerprint.tree_fingerprint(tree) == added  # hidden names are not read
    os.utime(image, ns=(image.stat().st_atime_ns, image.stat().st_mtime_ns + 10**9))
    assert fingerprint.tree_fingerprint(tree) != added  # touched: same size, new mtime


def test_fingerprint_follows_linked_folders_once_and_misses_nothing_missing(tmp_path):
    tree = tmp_path / "tree"
    (tree / "cats").mkdir(parents=True)
    (tree / "cats" / "a.jpg").write_bytes(b"a")
    os.symlink(tree, tree / "cats" / "loop")  # a link loop ends
    linked = tmp_path / "dogs"
    linked.mkdir()
    (linked / "b.jpg").write_bytes(b"b")
    os.symlink(linked, tree / "dogs")
    first = fingerprint.tree_fingerprint(tree)
    (linked / "b.jpg").write_bytes(b"bb")
    assert fingerprint.tree_fingerprint(tree) != first
    assert fingerprint.tree_fingerprint(tmp_path / "nope") == "missing"
    assert fingerprint.source_fingerprint(None) == ""  # a synthetic source: none
    assert fingerprint.source_fingerprint(str(tree)) == fingerprint.tree_fingerprint(tree)


# --- item 13: recordio with MXNet's interpreter ----------------------------------------------

def _recordio_argv(source: Path, out: Path, python: Path | str, *extra: str) -> list[str]:
    return ["recordio", "--record-failure", "--python", str(python), "--source", str(source),
            "--out", str(out), *extra]


def test_missing_mxnet_interpreter_is_a_recorded_failure_with_its_reason(source, tmp_path,
                                                                          capsys):
    venv = tmp_path / "mxnet"
    venv.mkdir()
    (venv / "unavailable.txt").write_text("no Python 3.8-3.11 with venv on this machine\n")
    python = venv / "bin" / "python"
    out = tmp_path / "recordio"
    assert cli.main(_recordio_argv(source, out, python)) == 0  # argparse exit 2 before
    marker = (out / failure.FILENAME).read_text()
    assert marker == (f"recordio needs MXNet's interpreter {python}, which cannot be "
                      "started: no Python 3.8-3.11 with venv on this machine\n")
    assert sorted(p.name for p in out.iterdir()) == [failure.FILENAME]
    (venv / "unavailable.txt").unlink()
    assert cli.main(["recordio", "--python", str(python), "--source", str(source),
                     "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (f"error: recordio needs MXNet's interpreter {python}, which cannot be "
                   "started (no such executable; make mxnet-env builds it)")


def test_a_recordio_failed_for_want_of_mxnet_is_prepared_again_once_mxnet_is_there(
        source, tmp_path, monkeypatch, capsys):
    """The README's path: set up without MXNet, install it later. The marker stayed, and
    nothing the workflow compares (source, options, the interpreter's path) changed, so
    every MXNet cell failed for ever on "cannot be started". Once the interpreter is
    there the folder is broken in the start-up check's sense: removed, prepared again, its
    cells run again. Any other recorded failure still waits for a change of its source."""
    monkeypatch.chdir(tmp_path)
    out = Path("results/datasets/syn/recordio")
    python = tmp_path / "mxnet" / "bin" / "python"
    assert cli.main(_recordio_argv(source, out, python)) == 0
    assert quick.quick_problem(out) is None  # still no interpreter: the cells say why
    assert quick.remove_broken_prepared([str(out)], dry_run=lambda: False) == []
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert quick.quick_problem(out) == (f"its preparation failed for want of MXNet's "
                                        f"interpreter {python}, which is now there")
    capsys.readouterr()
    assert quick.remove_broken_prepared([str(out)], dry_run=lambda: False) == [out]
    assert not out.exists()
    assert capsys.readouterr().err.startswith(f"dlbench: removed {out} to prepare it again")
    out.mkdir(parents=True)
    failure.record(out, f"{source}/cat/a.jpg: unreadable image")
    assert quick.quick_problem(out) is None


def test_the_interpreter_given_converts_and_records_its_own_failures(source, tmp_path):
    if importlib.util.find_spec("mxnet") is not None:
        pytest.skip("mxnet importable here")
    out = tmp_path / "recordio"
    # This interpreter has no mxnet: the child records that, the options passed through.
    assert cli.main(_recordio_argv(source, out, sys.executable, "--resize", "8")) == 0
    assert "recordio needs mxnet" in (out / failure.FILENAME).read_text()


def test_an_interpreter_that_crashes_is_recorded_with_its_last_line(source, tmp_path):
    crash = tmp_path / "python"
    crash.write_text(f"#!{sys.executable}\nimport sys\nprint('Segfault in libmxnet.so', "
                     "file=sys.stderr)\nsys.exit(3)\n")
    crash.chmod(0o755)
    out = tmp_path / "recordio"
    assert cli.main(_recordio_argv(source, out, crash)) == 0
    assert (out / failure.FILENAME).read_text() == \
        f"{crash} -m dlbench.datasets recordio: Segfault in libmxnet.so\n"
    without_record = ["recordio", "--python", str(crash), "--source", str(source),
                      "--out", str(tmp_path / "r2")]
    assert cli.main(without_record) == 3  # the child's exit code: the job fails


def test_the_python_option_is_taken_out_of_what_the_interpreter_gets():
    assert cli._without_python_option(["recordio", "--python", "/x/python", "--out", "o",
                                   "--python=/y", "--resize", "8"]) == \
        ["recordio", "--out", "o", "--resize", "8"]


@pytest.mark.mxnet
@pytest.mark.skipif(not MXNET_PYTHON.exists(), reason="MXNet environment .venvs/mxnet absent")
def test_recordio_converts_in_the_mxnet_interpreter_given(source, tmp_path):
    out = tmp_path / "recordio"
    run = _cli(*_recordio_argv(source, out, MXNET_PYTHON, "--resize", "24"))
    assert run.returncode == 0, run.stderr
    assert not (out / failure.FILENAME).exists()
    assert check.check("recordio", out, sample=0)["count"] == 12


# --- a conversion stopped by SIGTERM ------------------------------------------------------------

def _as_a_job_starts() -> None:
    """The stop signals as a scheduler's job gets them, by their default action: not as
    this test process may hold them after earlier tests (one ignored is inherited, and a
    process keeps a stop it inherits ignored ignored, as nohup expects)."""
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGHUP})


def _blocking_stop_signals() -> None:
    _as_a_job_starts()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})


@pytest.mark.parametrize(("workers", "started"), [("1", _as_a_job_starts),
                                                  ("2", _as_a_job_starts),
                                                  ("1", _blocking_stop_signals)])
def test_a_conversion_ended_by_sigterm_leaves_no_temporary_folder(tmp_path, workers, started):
    """Slurm ends a job at its time limit (and Snakemake a stopped one) by SIGTERM: the
    half-written temporary folder beside the output is removed, the output never appears,
    and the exit code says the signal (128 + 15). Also when its parent started it with the
    stop signals blocked (a child inherits the mask): they stayed pending, and the
    conversion ran to its end."""
    out = tmp_path / "images"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlbench.datasets", "synthetic", "--out", str(out),
         "--classes", "40", "--images-per-class", "200", "--image-size", "128",
         "--workers", workers], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=started)
    try:
        deadline = time.monotonic() + 60
        while not any(p.is_dir() and any(p.iterdir()) for p in tmp_path.glob(".images.*.tmp")):
            assert proc.poll() is None, "the conversion ended before it could be stopped"
            assert time.monotonic() < deadline, "no temporary folder appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# A stand-in for MXNet's interpreter: it says it has started, then converts "forever"
# (until a signal, or until its parent is gone: a failed test leaves no orphan behind),
# and writes down the signal that stopped it.
STOPPABLE_INTERPRETER = """\
import os, signal, sys, time
marker = os.environ["STAND_IN_MARKER"]
parent = os.getppid()

def stopped(signum, frame):
    with open(marker, "w") as fh:
        fh.write(signal.Signals(signum).name)
    sys.exit(128 + signum)

signal.signal(signal.SIGTERM, stopped)
signal.signal(signal.SIGHUP, stopped)
with open(marker, "w") as fh:
    fh.write("started")
while os.getppid() == parent:
    time.sleep(0.2)
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_conversion_in_the_mxnet_interpreter_stops_with_its_parent(source, tmp_path, stop):
    """Snakemake stops a local job by SIGTERM to the process it started: the parent
    ``recordio --python PY``. The conversion runs in PY, which must get SIGTERM too (to
    remove its own temporary folder); the parent waits for it, then ends by the signal
    (128 + SIGTERM, as a conversion run here does) and records no failure: the stop is no
    bad input. MXNet itself is not run: the stand-in only waits for its signal."""
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\n{STOPPABLE_INTERPRETER}")
    stand_in.chmod(0o755)
    marker = tmp_path / "stand-in-signal"
    out = tmp_path / "recordio"
    # SIGHUP at its default, as in a job started from a terminal: under nohup (inherited
    # by everything the test suite starts) it is ignored, and stays so by design.
    parent = subprocess.Popen([sys.executable, "-m", "dlbench.datasets",
                               *_recordio_argv(source, out, stand_in)],
                              env={**os.environ, "STAND_IN_MARKER": str(marker)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(stop, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert parent.poll() is None, parent.stderr.read()
            assert time.monotonic() < deadline, "the stand-in interpreter never started"
            time.sleep(0.05)
        parent.send_signal(stop)
        _, err = parent.communicate(timeout=60)  # the stand-in alone would never end
    finally:
        parent.kill()
    assert marker.read_text() == "SIGTERM"
    assert parent.returncode == 128 + stop, err
    assert not out.exists()  # no preparation-error.txt: nothing was recorded


STOPPED_WHILE_FORKING = """
import os, signal, sys, time
from dlbench.datasets.encode_jobs import process_pool

def stop(signum, frame):
    raise SystemExit(128 + signum)

signal.signal(signal.SIGTERM, stop)
sent = []

def after_fork():  # SIGTERM arriving while the pool forks its workers
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)

os.register_at_fork(after_in_parent=after_fork)
try:
    with process_pool(2) as pool:
        pool.map(abs, range(4))
        time.sleep(20)  # never reached: the stop is delivered once the pool exists
except SystemExit:
    import multiprocessing
    print("workers left:", len(multiprocessing.active_children()), flush=True)
    raise
"""


def test_a_stop_signal_while_the_pool_forks_its_workers_is_not_lost(tmp_path):
    """SIGTERM handled while the conversion forks its pool's workers: an exception raised
    inside fork's hooks is dropped ("Exception ignored"), and the conversion went on. The
    pool's start holds the signal until the workers exist; it then ends the conversion
    inside the pool's block, whose exit ends the workers."""
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_WHILE_FORKING)
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert time.monotonic() - began < 15
    assert "Exception ignored" not in done.stderr
    assert done.stdout.strip() == "workers left: 0"  # the pool's exit ended them


def test_a_palette_image_with_transparency_converts_without_pillows_advice(tmp_path):
    """Pillow advised "Palette images with Transparency ... converted to RGBA" once per such
    PNG, burying the conversion log's lines; the pixels are those of RGBA then RGB."""
    import warnings

    from PIL import Image

    from dlbench.datasets import imageops

    path = tmp_path / "p.png"
    img = Image.new("P", (4, 4), 1)
    img.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    img.save(path, transparency=bytes([0, 128]))  # per-entry alpha: the advice
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rgb = imageops.load_rgb(path)
    with Image.open(path) as again:
        assert rgb.tobytes() == again.convert("RGBA").convert("RGB").tobytes()


def test_an_image_name_with_a_line_break_is_refused_for_im2recs_list(tmp_path):
    """im2rec's .lst is a line per image: such a name cut its line in two, and the list's
    reader then failed on a line of its own that named no image."""
    from dlbench.datasets.imagefolder import ImageList, Item

    listing = ImageList(tmp_path, ["cat"], [Item(0, 0, "cat/a.jpg"), Item(1, 0, "cat/b\nc.jpg")])
    with pytest.raises(quick.DatasetError, match=r"^'.*/cat/b\\nc.jpg': a file name with a line "
                                           r"break cannot be listed in im2rec's .lst; rename it$"):
        listing.lst_bytes()
    assert ImageList(tmp_path, ["cat"], listing.items[:1]).lst_bytes() == b"0\t0.000000\tcat/a.jpg\n"
