"""Which GPUs a running cell may use: file locks that give each cell its own GPU ids.

Snakemake counts GPUs (the workflow's ``gpu`` resource) but never says which ones a job
gets. So the launcher of a GPU cell takes ``num_gpus`` free ids out of the GPUs it can see,
holding one ``fcntl.flock`` per id on a file in a lock directory that every cell of the
host shares, and hands the runner ``CUDA_VISIBLE_DEVICES``. A lock belongs to an open file,
so it is released when the holder exits, even when it is killed: no GPU stays taken.

Cells submitted to a cluster scheduler that allocates GPUs per job (Slurm's ``--gpus``)
already have their own ``CUDA_VISIBLE_DEVICES``; the workflow says so through
``DLBENCH_GPU_ALLOCATION=scheduler`` and the launcher then keeps the scheduler's choice.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ALLOCATION_ENV = "DLBENCH_GPU_ALLOCATION"  # "scheduler": the job's GPUs come from the cluster
LOCK_DIR_ENV = "DLBENCH_GPU_LOCK_DIR"
# In /tmp, which Apptainer binds into every container by default, and shared by all users
# of the host (sticky and world-writable, like /tmp itself).
DEFAULT_LOCK_DIR = Path("/tmp/dlbench-gpus")


class GpuAllocationError(RuntimeError):
    """A GPU cell cannot get its GPUs (said in one line)."""


def _nvml_count() -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVMLError_LibraryNotFound and friends
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi_count() -> int | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    # One "GPU <i>: <name> (UUID: ...)" line per GPU; MIG devices are indented below theirs.
    return sum(1 for line in out.stdout.splitlines() if re.match(r"GPU \d+:", line))


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPU ids this process may use: the entries of ``CUDA_VISIBLE_DEVICES`` when it is
    set, otherwise ``0..n-1`` for the n GPUs the NVIDIA driver reports (NVML, then
    ``nvidia-smi -L``); empty where there is no driver."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = []
        for entry in (e.strip() for e in listed.split(",")):
            if not entry or entry.startswith("-"):
                break  # CUDA ignores everything from the first invalid entry on ("-1": none)
            ids.append(entry)
        return ids
    count = _nvml_count()
    if count is None:
        count = _nvidia_smi_count()
    return [str(i) for i in range(count or 0)]


def lock_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)


def scheduler_allocated(environ: Mapping[str, str] | None = None) -> bool:
    """True when a cluster scheduler gave this job its GPUs (and named them)."""
    environ = os.environ if environ is None else environ
    return (environ.get(ALLOCATION_ENV) == "scheduler"
            and environ.get("CUDA_VISIBLE_DEVICES") is not None)


def _lock_path(directory: Path, gpu: str) -> Path:
    # The host name keeps GPUs of different nodes apart should the directory be shared.
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())
    return directory / f"gpu-{host}-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock"


def prepare_lock_dir(directory: Path) -> None:
    if not directory.is_dir():
        try:
            # Not writable by others until it is sticky (whatever the umask): a cell that
            # finds it meanwhile must not refuse it.
            directory.mkdir(mode=0o755, parents=True, exist_ok=False)
            directory.chmod(0o1777)  # every user's cells must be able to lock the host's GPUs
        except FileExistsError:
            pass  # another cell made it first
        except OSError as exc:
            raise GpuAllocationError(f"GPU lock directory {directory}: {exc.strerror}") from None
    # Another user may have made it: a link could lead anywhere, and in a folder everyone
    # may write to without the sticky bit anyone may replace anyone's lock file.
    mode = os.lstat(directory).st_mode
    problem = ("a symbolic link" if stat.S_ISLNK(mode) else
               "not a directory" if not stat.S_ISDIR(mode) else
               "writable by every user but not sticky (chmod 1777)"
               if mode & stat.S_IWOTH and not mode & stat.S_ISVTX else None)
    if problem:
        raise GpuAllocationError(f"GPU lock directory {directory}: {problem}, refused "
                                 f"(set {LOCK_DIR_ENV} to another)")


# A lock file is opened without following a link and without blocking (on a FIFO), and is
# used only if it is a plain file of one name: in the shared directory another user may have
# put a link to, or a hard link of, one of the user's files under its name, which
# _note_holder would truncate.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NOT_OPENED = {errno.ELOOP: "a symbolic link", errno.EISDIR: "a directory"}


def _open_lock_file(path: Path) -> int:
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o666)
        except PermissionError:  # another user's lock file: flock needs no write access
            fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno not in _NOT_OPENED:
            raise
        what = _NOT_OPENED[exc.errno]
    else:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return fd
        os.close(fd)
        what = "a file with other names (hard links)" if stat.S_ISREG(st.st_mode) else \
            "not a plain file"
    raise GpuAllocationError(f"GPU lock file {path}: {what}, refused (remove it, or set "
                             f"{LOCK_DIR_ENV})")


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding an exclusive lock on ``path``, or None if it is taken."""
    fd = _open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class Allocation:
    """GPU ids held by this process until ``release()`` (or its exit)."""

    ids: list[str]
    _fds: list[int] = field(default_factory=list, repr=False)

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(self.ids)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)  # closing the file drops its lock


def _note_holder(fd: int, owner: str) -> None:
    """Who holds the GPU, for people who look at the lock files."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} {owner}\n".encode(), 0)


def acquire(count: int, pool: Sequence[str], directory: Path, *, owner: str = "",
            poll_s: float = 0.5, timeout_s: float | None = None,
            on_wait: Callable[[str], None] | None = None) -> Allocation:
    """Hold ``count`` GPU ids of ``pool`` that no other holder has, waiting for them.

    All-or-nothing: a try that gets fewer than ``count`` ids lets them go again before it
    waits, so two cells that each need two GPUs never hold one each forever."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if count > len(pool):
        seen = ",".join(pool) if pool else "none"
        raise GpuAllocationError(f"the cell needs {count} GPU(s) but this host shows "
                                 f"{len(pool)} (visible GPU ids: {seen})")
    prepare_lock_dir(directory)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    waited = False
    while True:
        held: list[tuple[str, int]] = []
        try:
            for gpu in pool:
                fd = _try_lock(_lock_path(directory, gpu))
                if fd is not None:
                    held.append((gpu, fd))
                    if len(held) == count:
                        break
        except BaseException:  # a refused lock file: the GPUs locked so far are let go
            for _, fd in held:
                os.close(fd)
            raise
        if len(held) == count:
            for _, fd in held:
                _note_holder(fd, owner)
            return Allocation([gpu for gpu, _ in held], [fd for _, fd in held])
        for _, fd in held:
            os.close(fd)
        if deadline is not None and time.monotonic() >= deadline:
            raise GpuAllocationError(f"no {count} free GPU(s) among {','.join(pool)} "
                                     f"after {timeout_s:g} s (locks in {directory})")
        if not waited and on_wait is not None:
            on_wait(f"waiting for {count} free GPU(s) among {','.join(pool)} "
                    f"(locks in {directory})")
        waited = True
        time.sleep(poll_s)


@contextlib.contextmanager
def allocated(count: int, pool: Sequence[str], directory: Path, **kwargs) -> Iterator[Allocation]:
    allocation = acquire(count, pool, directory, **kwargs)
    try:
        yield allocation
    finally:
        allocation.release()
