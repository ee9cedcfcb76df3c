"""torchrun's failure report, read from its stderr: the rank that failed first, in words,
and whether SIGKILL ended it.

Framework-free: the runner reads the report of the torchrun it started
(``pytorch.distributed.workers_outcome``), and the launcher, which imports no framework,
reads it in the runner's last stderr lines (``oom_kills.sigkill_shown``).

When a rank fails, torch.distributed.elastic (torch 2.x) logs a line for it, stops the
other ranks (SIGTERM, then SIGKILL after a grace period) and prints a report on each node::

    E1127 22:31:42.667000 13590 .../multiprocessing/api.py:1002] failed (exitcode: -9)
        local_rank: 1 (pid: 13484) of binary: /env/bin/python
    =======================================================
    rank.py FAILED
    -------------------------------------------------------
    Failures:
    [1]:
      time      : 2026-11-27_22:31:29
      host      : node1
      rank      : 0 (local_rank: 0)
      exitcode  : -15 (pid: 13483)  (SIGTERM)
      error_file: <N/A>
      traceback : Signal 15 (SIGTERM) received by PID 13483
    -------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ... the same fields, of the rank that failed first
    =======================================================

Only the root cause says what went wrong: the ranks under "Failures:" are those torchrun
stopped itself. A rendezvous that a node never joined ends in RendezvousTimeoutError
instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ROOT_CAUSE = "Root Cause (first observed failure):"
_BLOCK_END = re.compile(r"={5,}\s*$")
_FIELD = re.compile(r"^\s*(host|rank|exitcode)\s*:\s*(.+?)\s*$")
# Lines of a rank's block that are not among the fields named above.
_OTHER_FIELDS = ("time", "error_file", "traceback", "[")
_RENDEZVOUS_TIMEOUT = "RendezvousTimeoutError"
# A rank that SIGKILL ended: its root cause's traceback field, and the agent's log line.
_SIGKILL_TRACEBACK = re.compile(r"Signal 9 \(SIGKILL\) received by PID \d+")
_SIGKILL_LOGGED = re.compile(r"failed \(exitcode: -9\) local_rank: \d+ \(pid: \d+\)")


def root_cause_lines(lines: Sequence[str]) -> list[str]:
    """The lines of torchrun's "Root Cause" blocks (one per node's torchrun)."""
    inside, found = False, []
    for line in lines:
        if ROOT_CAUSE in line:
            inside = True
        elif inside and _BLOCK_END.search(line):
            inside = False
        elif inside:
            found.append(line)
    return found


def first_failure(lines: Sequence[str], join_timeout_s: float | None = None) -> str | None:
    """The first failure torchrun reported (its "host / rank / exitcode" block) in words:
    "rank 1 on node2: exit code -9 (pid: 2870) (SIGKILL)", or a rendezvous that timed out
    after ``join_timeout_s`` (a node that never joined); None when it reported neither.
    The root cause where the report has one: the ranks listed above it, which torchrun
    stopped itself (SIGTERM), would name the wrong rank and signal."""
    if any(_RENDEZVOUS_TIMEOUT in line for line in lines):
        after = f" after {join_timeout_s:g} s" if join_timeout_s else ""
        return f"the nodes' rendezvous timed out{after}: a node did not join"
    has_root_cause = any(ROOT_CAUSE in line for line in lines)
    return _first_block(root_cause_lines(lines) if has_root_cause else lines)


def _first_block(lines: Sequence[str]) -> str | None:
    found: dict[str, str] = {}
    for line in lines:
        m = _FIELD.match(line)
        if m:
            found[m[1]] = m[2]
            if {"host", "rank", "exitcode"} <= found.keys():
                rank = found["rank"].split(" (")[0]
                code = " ".join(found["exitcode"].split())
                return f"rank {rank} on {found['host']}: exit code {code}"
        elif found and not line.strip().startswith(_OTHER_FIELDS):
            found = {}
    return None


def first_failure_sigkill(lines: Sequence[str]) -> str | None:
    """The words in ``lines`` showing that SIGKILL ended the rank that failed first: its
    root cause's traceback, else (the report cut off) the agent's line for it; None when
    they show none. A SIGKILL torchrun sent to the ranks it stopped does not count."""
    for line in root_cause_lines(lines):
        if m := _SIGKILL_TRACEBACK.search(line):
            return f"torchrun's first failure: {m[0]}"
    for line in lines:
        if m := _SIGKILL_LOGGED.search(line):
            return f"torchrun: {m[0]}"
    return None
