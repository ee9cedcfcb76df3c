"""How many processes the kernel's out-of-memory killer has killed in our memory cgroup,
and whether it ended a process of a cell.

A process killed by the OOM killer just exits by SIGKILL: nothing in its output says why.
The launcher reads this count before and after the runner (they share a cgroup: a job's
cgroup under Slurm, a container's, a systemd scope) and records the cell as ``oom`` when
the count rose *and* the failure shows a process of the cell ended by SIGKILL: the runner
itself, a DataLoader worker or a torchrun rank (``sigkill_shown``). Both are needed: in a
shared cgroup another job's OOM kill raises the count too, and must not relabel an
unrelated failure. cgroup v2 keeps the count in ``memory.events`` (``oom_kill N``), v1 in
``memory.oom_control``. Where neither can be read the count is None and nothing is claimed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from dlbench import torchrun_report

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


# How torch reports a process of the cell that SIGKILL ended (torch 2.x, the messages
# themselves; strsignal(SIGKILL) is "Killed"):
# - a DataLoader worker, raised in the runner by DataLoader's SIGCHLD handler
#   (torch/csrc/DataLoader.cpp). When the runner was waiting for a batch, DataLoader raises
#   "DataLoader worker (pid(s) 1234) exited unexpectedly" *from* it: the runner's one-line
#   error is then that, and this line is in the traceback on its stderr.
_DATALOADER_WORKER = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Killed\.")
# - a rank of torchrun (torch.distributed.elastic): the first to fail, as its failure
#   report says (dlbench.torchrun_report).


def sigkill_shown(lines: Sequence[str]) -> str | None:
    """The words in ``lines`` (a cell's error line and its runner's last stderr lines)
    showing that SIGKILL ended a DataLoader worker or the first failed torchrun rank of the
    cell; None when they show none."""
    for line in lines:
        if m := _DATALOADER_WORKER.search(line):
            return m[0]
    return torchrun_report.first_failure_sigkill(lines)


def oom_message(message: str, shown: str) -> str:
    """A failure's own line, what showed the SIGKILL (unless the line says it already), and
    why the cell counts as out of memory."""
    seen = "" if shown in message else f" ({shown})"
    return (f"{message}{seen}; SIGKILL from the kernel's out-of-memory killer: the memory "
            "cgroup's oom_kill count rose during the cell")
