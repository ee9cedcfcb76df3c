"""Write files and folders so that a reader never sees a half-written one.

Every writer here works the same way: the content goes to a temporary name in the target's
own folder (``.<name>.<pid>.<random>.tmp``, so two processes writing the same target never
share one, and the final rename stays on one filesystem), the data is fsynced, and
``os.replace`` (``os.rename`` for a folder) puts it in place. On any exception the temporary
is removed and whatever was at the target before is left as it was. The parent folder is
created when missing.

- ``write_text`` / ``write_bytes``: a whole file from memory;
- ``temp_path``: a path for writers that want a file name (``pyarrow.parquet.write_table``,
  ``DataFrame.to_csv``, ``csv.writer`` on an ``open``);
- ``prepared_dir``: a whole folder (a dataset), swapped in for the previous one;
- ``set_aside``: a file moved out of its place into a folder beside it, never replacing
  one set aside earlier (an invalid result, a failed one run again);
- ``writing``: an OSError of a writer said as ``WriteError``, naming the file.

What lands has the mode a plain ``open()`` or ``mkdir()`` would give it: files
``0666 & ~umask``, folders ``0777 & ~umask``, even where the writer of a ``temp_path``
created its file with another mode (``tempfile.mkstemp`` and some libraries use 0600). The umask is
read from ``/proc/self/status``, which changes nothing; where that is unavailable it is
read once with ``os.umask`` set-and-restore, which is not thread-safe and so is done only
the first time.

This is the only module that renames into place: ``tests/test_atomic.py`` fails on a
hand-written temp-file-and-rename anywhere else in ``src/``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["WriteError", "prepared_dir", "set_aside", "temp_path", "write_bytes",
           "write_text", "writing"]


def _temp_name(target: Path, kind: str = "tmp") -> Path:
    """A name beside ``target`` that no other process (pid) or call (random) uses."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(6)}.{kind}")


_PROC_STATUS = "/proc/self/status"


@functools.cache
def _umask_once() -> int:
    """The umask by setting and restoring it: another thread creating a file in between
    would get mode 0o077-masked, so this runs once per process, and only as a fallback."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def umask() -> int:
    """The process's umask, read without changing it (Linux >= 4.7 lists it in
    ``/proc/self/status``); else the value read once by ``_umask_once``."""
    try:
        with open(_PROC_STATUS, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split(":", 1)[1].strip(), 8) & 0o777
    except (OSError, ValueError):
        pass
    return _umask_once()


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666 & ~umask``."""
    return 0o666 & ~umask()


def folder_mode() -> int:
    """The mode ``os.mkdir(path)`` gives a new folder: ``0o777 & ~umask``."""
    return 0o777 & ~umask()


def _fsync(path: Path, mode: int | None = None) -> None:
    # fsync flushes the file (or folder), whichever descriptor it is given; with ``mode``
    # the file's mode is set first, so that the sync covers it too.
    fd = os.open(path, os.O_RDONLY)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def temp_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (not yet created) for the caller to write;
    when the block ends without an exception the file gets the mode a plain ``open()``
    would give it, is fsynced and renamed onto ``path``. On an exception it is removed
    and ``path`` stays as it was."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(target)
    try:
        yield tmp
        _fsync(tmp, file_mode())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def temp_paths(*paths: str | os.PathLike[str],
               kept: str = "the previous version is left as it was") -> Iterator[list[Path]]:
    """``temp_path`` for files that belong together (a table and its CSV): every one is
    written and fsynced before any replaces its target, so a failure while writing or
    syncing any of them leaves every target as it was. A sync or rename that fails is a
    WriteError naming its target and saying ``kept``."""
    targets = [Path(path) for path in paths]
    temps = []
    try:
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            temps.append(_temp_name(target))
        yield temps
        for tmp, target in zip(temps, targets, strict=True):
            with writing(target, kept):
                _fsync(tmp, file_mode())
        for tmp, target in zip(temps, targets, strict=True):
            with writing(target, kept):
                os.replace(tmp, target)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see the module's docstring)."""
    with temp_path(path) as tmp, open(tmp, "xb") as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see the module's docstring)."""
    return write_bytes(path, text.encode(encoding))


def _fsync_tree(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            if not path.is_symlink():
                _fsync(path)
        _fsync(Path(folder))  # the entries themselves


@contextlib.contextmanager
def prepared_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder (mode ``0o777 & ~umask``) beside ``target``; when
    the block ends without an exception its files are fsynced and it replaces ``target``
    (a folder, a file or nothing). On an exception it is removed and ``target`` stays as
    it was. A link to a folder is followed: the folder it names is replaced, beside it, and
    the link kept (a dataset put on scratch storage by a link stays there)."""
    target = Path(target).absolute()
    if target.is_symlink() and target.is_dir():
        target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(target)
    tmp.mkdir()
    os.chmod(tmp, folder_mode())  # mkdir's mode, stated: 0777 & ~umask
    try:
        yield tmp
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # os.replace cannot put a folder over a non-empty one: move the old one aside first,
    # into a holder folder so that it is removed alike whether it was a folder or a file.
    old = None
    try:  # a full disk can fail the holder's mkdir too: never leave the temporary behind
        if target.exists() or target.is_symlink():
            old = _temp_name(target, "old")
            old.mkdir()
            os.rename(target, old / "previous")
        os.rename(tmp, target)
    except BaseException:
        if old is not None and os.path.lexists(old / "previous"):
            os.rename(old / "previous", target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


class WriteError(OSError):
    """A file could not be written (a full disk): one line naming it and saying that what
    was there before is left as it was."""


@contextlib.contextmanager
def writing(target: str | os.PathLike[str],
            kept: str = "the previous version is left as it was") -> Iterator[None]:
    """Turn an OSError raised in the block into a WriteError naming ``target``: the
    writers' own errors (pyarrow's, a bare ENOSPC) often do not say which file."""
    try:
        yield
    except WriteError:
        raise  # an inner block already named its file
    except OSError as exc:
        reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        raise WriteError(exc.errno, f"{target}: {reason}; {kept}") from exc


def _stamp() -> str:
    """The UTC time in a file name: when a file was set aside, sortable."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def set_aside(path: str | os.PathLike[str], folder: str, stamp: str | None = None) -> Path:
    """Move ``path`` into ``folder``/<stem>.<UTC stamp>.<suffix> beside it and return where
    (``stamp``: another file's, to keep files set aside together findable together).
    A hard link then an unlink rather than a rename: the link never replaces a file set
    aside earlier under the same name (a rename would, silently)."""
    path = Path(path)
    holder = path.parent / folder
    holder.mkdir(exist_ok=True)
    stamp = stamp or _stamp()
    for n in range(1000):
        target = holder / f"{path.stem}.{stamp}{f'.{n}' if n else ''}{path.suffix}"
        try:
            os.link(path, target)
        except FileExistsError:
            continue
        path.unlink()
        return target
    raise FileExistsError(f"{holder}: no free name for {path.name} at {stamp}")


def move(path: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Move a file or a folder to ``target`` (on the same filesystem) and return it. Never
    over an existing one: a file moves by a hard link then an unlink (a link fails where
    the target exists; a rename would replace it silently); a folder moves only to a name
    that does not exist. The folders of both ends are synced."""
    path, target = Path(path), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        if target.exists():
            raise FileExistsError(f"{target}: already exists; {path} not moved")
        # Checked above; and rename(2) of a folder onto a non-empty one fails anyway.
        os.rename(path, target)
    else:
        os.link(path, target)
        path.unlink()
    for folder in {path.parent, target.parent}:
        _fsync(folder)
    return target
