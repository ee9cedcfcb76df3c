"""How many processes the kernel's out-of-memory killer has killed in our memory cgroup.

A runner killed by the OOM killer just exits by SIGKILL: nothing in its output says why.
The launcher reads this count before and after the runner (they share a cgroup: a job's
cgroup under Slurm, a container's, a systemd scope) and records such a cell as ``oom``.
cgroup v2 keeps the count in ``memory.events`` (``oom_kill N``), v1 in
``memory.oom_control``. Where neither can be read the count is None and nothing is claimed.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_dirs(proc_cgroup: str, root: Path) -> list[Path]:
    """The memory cgroup folders of a process (from /proc/<pid>/cgroup), innermost first
    (inside a container the innermost may not be visible: then its parents)."""
    dirs = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2: one unified hierarchy
            base = root
        elif "memory" in controllers.split(","):  # v1: the memory controller's own
            base = root / "memory"
        else:
            continue
        here = base / path.lstrip("/")
        while True:
            dirs.append(here)
            if here == base:
                break
            here = here.parent
    return dirs


def _count(folder: Path) -> int | None:
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (folder / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def count(pid: int | str = "self", root: Path = CGROUP_ROOT) -> int | None:
    """The OOM kills of processes in ``pid``'s cgroup, or None when no count can be read.
    The kernel counts a kill in the victim's cgroup whichever limit was hit (its own or a
    parent's), so the innermost cgroup with a count is the one to read."""
    try:
        proc_cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for folder in _cgroup_dirs(proc_cgroup, root):
        found = _count(folder)
        if found is not None:
            return found
    return None


def rose(before: int | None, after: int | None) -> bool:
    return before is not None and after is not None and after > before
