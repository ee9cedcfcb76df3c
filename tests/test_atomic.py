"""dlbench.atomic: the one way files and folders are put in place, and a check that no
hand-written temp-file-and-rename comes back elsewhere in src/."""

import ast
import os
from pathlib import Path

import pytest

from dlbench import atomic

SRC = Path(__file__).resolve().parents[1] / "src" / "dlbench"


def entries(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def fsyncs(monkeypatch):
    """Record what os.fsync is called on (as paths), still syncing for real."""
    calls = []
    real = os.fsync

    def recording(fd):
        calls.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", recording)
    return calls


def test_write_text_writes_creates_the_folder_and_leaves_no_temp(tmp_path):
    path = tmp_path / "a" / "b" / "out.txt"
    assert atomic.write_text(path, "héllo\n") == path
    assert path.read_text(encoding="utf-8") == "héllo\n"
    assert entries(path.parent) == ["out.txt"]
    atomic.write_text(path, "again\n")  # replaces
    assert path.read_text() == "again\n" and entries(path.parent) == ["out.txt"]


def test_write_bytes(tmp_path):
    path = tmp_path / "blob.bin"
    atomic.write_bytes(str(path), b"\x00\x01\xff")
    assert path.read_bytes() == b"\x00\x01\xff"
    assert entries(tmp_path) == ["blob.bin"]


def test_written_data_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src, dst):
        calls.append(("replace", Path(src)))
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(atomic.os, "replace", replace)
    atomic.write_text(path, "x")
    # the temporary beside the target is synced, then renamed onto it
    (step1, synced), (step2, renamed) = calls
    assert (step1, step2) == ("fsync", "replace")
    assert synced == renamed and synced.parent == tmp_path and synced != path


def test_temp_path_fsyncs_what_the_caller_wrote(tmp_path, fsyncs):
    path = tmp_path / "table.csv"
    with atomic.temp_path(path) as tmp:
        assert tmp.parent == tmp_path and not tmp.exists()
        tmp.write_text("a,b\n1,2\n")
    assert path.read_text() == "a,b\n1,2\n"
    assert fsyncs == [tmp] and entries(tmp_path) == ["table.csv"]


def test_temp_names_are_unique_per_process_and_call(tmp_path):
    names = []
    for _ in range(2):
        with atomic.temp_path(tmp_path / "x") as tmp:
            names.append(tmp.name)
            tmp.write_text("")
    assert names[0] != names[1]
    assert all(n.startswith(".x.") and f".{os.getpid()}." in n for n in names)


def test_an_exception_while_writing_keeps_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "out.parquet"
    path.write_text("old\n")
    with pytest.raises(RuntimeError, match="writer died"), atomic.temp_path(path) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("writer died")
    assert path.read_text() == "old\n"
    assert entries(tmp_path) == ["out.parquet"]


def test_a_failed_fsync_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    atomic.write_text(path, "old\n")

    def disk_full(fd):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "fsync", disk_full)
    with pytest.raises(OSError, match="disk full"):
        atomic.write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert entries(tmp_path) == ["out.txt"]


def test_a_writer_that_wrote_nothing_fails_without_touching_the_target(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(FileNotFoundError), atomic.temp_path(path):
        pass
    assert path.read_text() == "old\n" and entries(tmp_path) == ["out.txt"]


# Folders --------------------------------------------------------------------------------


def test_prepared_dir_replaces_the_old_folder_and_fsyncs_its_files(tmp_path, fsyncs):
    target = tmp_path / "data" / "set"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("old")
    with atomic.prepared_dir(target) as tmp:
        assert tmp.parent == target.parent and entries(tmp) == []
        assert f".{os.getpid()}." in tmp.name
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.bin").write_bytes(b"a")
        (tmp / "b.txt").write_text("b")
    assert entries(target) == ["b.txt", "sub"] and (target / "sub" / "a.bin").read_bytes() == b"a"
    assert entries(target.parent) == ["set"]  # neither the temporary nor the old folder left
    assert (target.stat().st_mode & 0o777) == 0o777 & ~atomic.umask()
    synced = {p.name for p in fsyncs}
    assert {"a.bin", "b.txt", "sub"} <= synced


def test_prepared_dir_failure_keeps_the_old_folder_and_no_temp(tmp_path):
    target = tmp_path / "set"
    target.mkdir()
    (target / "keep.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic.prepared_dir(target) as tmp:
        (tmp / "half.txt").write_text("new")
        raise KeyboardInterrupt
    assert entries(target) == ["keep.txt"]
    assert entries(tmp_path) == ["set"]


def test_prepared_dir_replaces_a_file_or_nothing(tmp_path):
    target = tmp_path / "set"
    target.write_text("a file where the folder goes")
    with atomic.prepared_dir(target) as tmp:
        (tmp / "x").write_text("x")
    assert target.is_dir() and entries(target) == ["x"]
    fresh = tmp_path / "new" / "set"
    with atomic.prepared_dir(fresh) as tmp:
        (tmp / "y").write_text("y")
    assert entries(fresh) == ["y"] and entries(fresh.parent) == ["set"]


def test_prepared_dir_through_a_link_replaces_the_folder_it_names_and_keeps_the_link(
        tmp_path):
    """A dataset folder linked to scratch storage became a real folder beside the link's
    place, the scratch folder left empty: the benchmark read another disk than meant."""
    scratch = tmp_path / "scratch" / "lmdb"
    scratch.mkdir(parents=True)
    (scratch / "old").write_text("old")
    link = tmp_path / "datasets" / "lmdb"
    link.parent.mkdir()
    link.symlink_to(scratch)
    with atomic.prepared_dir(link) as tmp:
        assert tmp.parent == scratch.parent  # written on the scratch disk
        (tmp / "data.mdb").write_text("new")
    assert link.is_symlink() and link.resolve() == scratch
    assert entries(scratch) == ["data.mdb"] and entries(scratch.parent) == ["lmdb"]


# Modes ----------------------------------------------------------------------------------


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request):
    """Run the test under this umask, restored after."""
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path):
    return path.stat().st_mode & 0o777


def test_files_and_folders_get_the_mode_a_plain_open_or_mkdir_gives(tmp_path, umask):
    file_mode, folder_mode = 0o666 & ~umask, 0o777 & ~umask
    assert (file_mode, folder_mode) == {0o022: (0o644, 0o755), 0o077: (0o600, 0o700)}[umask]
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert mode(plain) == file_mode  # what the atomic writers must agree with

    atomic.write_text(tmp_path / "result.json", "{}\n")
    atomic.write_bytes(tmp_path / "blob.bin", b"\x00")
    with atomic.temp_path(tmp_path / "table.csv") as tmp:
        tmp.write_text("a\n")
    with atomic.temp_path(tmp_path / "index.html") as tmp:
        # a writer that creates its file as tempfile.mkstemp does (0600)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with atomic.temp_path(tmp_path / "wide.txt") as tmp:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.chmod(tmp, 0o777)  # or one that makes it wider than the umask allows
    for name in ("result.json", "blob.bin", "table.csv", "index.html", "wide.txt"):
        assert mode(tmp_path / name) == file_mode, name

    with atomic.prepared_dir(tmp_path / "set") as tmp:
        (tmp / "x").write_text("x")
    assert mode(tmp_path / "set") == folder_mode
    with atomic.prepared_dir(tmp_path / "set") as tmp:  # replacing an older folder
        pass
    assert mode(tmp_path / "set") == folder_mode


def test_an_existing_targets_mode_is_not_kept(tmp_path, umask):
    """Like a fresh open(): the new file is a new inode, with the umask's mode."""
    path = tmp_path / "out.txt"
    path.write_text("old")
    path.chmod(0o640)
    atomic.write_text(path, "new")
    assert mode(path) == 0o666 & ~umask


def test_the_umask_is_read_without_setting_it(umask, monkeypatch):
    calls = []
    real = os.umask
    monkeypatch.setattr(atomic.os, "umask", lambda m: calls.append(m) or real(m))
    assert atomic.umask() == umask and calls == []  # /proc/self/status: no race


def test_without_proc_the_umask_is_set_and_restored_once(tmp_path, monkeypatch):
    old = os.umask(0o027)
    try:
        monkeypatch.setattr(atomic, "_PROC_STATUS", str(tmp_path / "no-such-status"))
        atomic._umask_once.cache_clear()
        calls = []
        real = os.umask
        monkeypatch.setattr(atomic.os, "umask", lambda m: calls.append(m) or real(m))
        assert atomic.umask() == 0o027 and atomic.umask() == 0o027
        assert len(calls) == 2 and calls[1] == 0o027  # set, restored; once only
        assert real(0o027) == 0o027  # left as it was
        atomic.write_text(tmp_path / "f", "x")
        assert mode(tmp_path / "f") == 0o640
    finally:
        atomic._umask_once.cache_clear()
        os.umask(old)


# No second writer -----------------------------------------------------------------------

# Files allowed to rename into place by hand: none. Use atomic.write_text / write_bytes /
# temp_path / prepared_dir.
ALLOWED: set[str] = set()


def _renames(tree):
    """Calls that put a file in place by a rename: os.replace / os.rename / shutil.move,
    and ``x.replace(y)`` / ``x.rename(y)`` with one argument (``Path.replace``; the str
    method takes two, DataFrame.rename keywords)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        func = node.func
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        module_call = (owner, func.attr) in {("os", "replace"), ("os", "rename"),
                                             ("shutil", "move")}
        path_method = (func.attr in ("replace", "rename") and len(node.args) == 1
                       and not node.keywords and not isinstance(node.args[0], ast.Constant))
        if module_call or path_method:
            yield node.lineno


def test_the_rename_check_sees_the_hand_written_kinds():
    code = ("os.replace(tmp, path)\ntmp.replace(path)\nPath(t).rename(p)\n"
            "name.replace('_', '')\nframe.rename(columns={})\n")
    assert list(_renames(ast.parse(code))) == [1, 2, 3]


def test_no_hand_written_temp_file_and_rename_outside_atomic():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "atomic.py" or rel in ALLOWED:
            continue
        found += [f"src/dlbench/{rel}:{line}" for line in _renames(ast.parse(path.read_text()))]
    assert not found, ("rename into place with dlbench.atomic (write_text, write_bytes, "
                       "temp_path, prepared_dir), not by hand: " + ", ".join(found))
