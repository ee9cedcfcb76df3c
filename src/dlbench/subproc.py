"""Run a child process, pass its output through, and keep its last stderr lines.

``supervised`` is how a cell's runner runs: in a process group of its own (so that a
timeout or an interrupt ends the runner's whole tree: DataLoader workers, torchrun's ranks,
which each start a session of their own, by ``kill_tree``), killed by the kernel if this
process dies (``PR_SET_PDEATHSIG``: no orphan keeps measuring beside the next cell), and
stopped after a time limit; in a process that adopts orphans (``adopt_orphans``), what
the runner left in sessions of their own ends with it too. ``run_tee`` runs a child that is part of this process's own
work (torchrun under a runner, a conversion in MXNet's interpreter): SIGTERM or SIGHUP to
us is passed on to it as SIGTERM, so that it stops in its own way, and once it has ended
we take the signal ourselves.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _load_prctl() -> Callable[..., int] | None:
    # Looked up once here: the child calls it between fork and exec, where nothing may load.
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux). The
    parent is the thread that started us: for a job, the Snakemake process running it."""
    return _PRCTL is not None and _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


# Set by ``adopt_orphans``: only then are the children we did not start our own to end.
_ADOPTING = False


def adopt_orphans() -> bool:
    """Make this process adopt the orphans of everything it starts (Linux's child
    subreaper), instead of init. A runner that ends, of its own or killed by the kernel
    (out of memory), while processes it started in sessions of their own still run
    (torchrun's ranks, once torchrun is gone) leaves them to us: ``supervised`` ends them
    with the runner, where they would otherwise measure on beside the next cell. For a
    process whose only work is supervising (the launcher): process-wide, and for good."""
    global _ADOPTING
    _ADOPTING = _PRCTL is not None and _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _ADOPTING


def child_setup(parent: int | None = None, sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that ties a child to this process: sent ``sig`` when it dies."""
    parent = os.getpid() if parent is None else parent

    def setup() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above: do not run
            os._exit(1)
    return setup


# A kept stderr line and a failure's line are cut to these lengths: one 50 MB line (a
# tensor printed whole) was a 50 MB result file and held the launcher's memory.
TAIL_LINE_CHARS = 4000
ERROR_LINE_CHARS = 500


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _pump(stream, sink, tail: collections.deque[str] | None) -> None:
    for line in stream:
        try:
            sink.write(line)
            sink.flush()
        except OSError:
            pass  # our own log cannot be written (a full disk): keep the tail regardless
        if tail is not None:
            tail.append(_cut(line.rstrip("\n"), TAIL_LINE_CHARS))


def run_tee(cmd: Sequence[str], env: Mapping[str, str] | None = None,
            keep: int = 40) -> tuple[int, list[str]]:
    """Run ``cmd`` (an argument list, never a shell string); copy its stdout and stderr to
    ours as they come and return the exit code and the last ``keep`` stderr lines. The
    child is stopped (SIGTERM) should this process die: a runner killed with its launcher
    (kill -9) took nothing with it, and torchrun, srun or MXNet's workers measured on."""
    ran = supervised(cmd, env=env, keep=keep, own_group=False, death_signal=signal.SIGTERM)
    return ran.rc, ran.tail


@dataclass
class Ran:
    """How a supervised child ended: its exit code (negative: the signal that ended it),
    its last stderr lines, and whether we stopped it for its time limit."""

    rc: int
    tail: list[str] = field(default_factory=list)
    timed_out: bool = False


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _children_by_parent() -> dict[int, list[int]]:
    """Every process's children, as /proc links them now (Linux; none elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def children(pid: int) -> list[int]:
    """The processes whose parent ``pid`` is now."""
    return _children_by_parent().get(pid, [])


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, as /proc links them now (Linux; none
    elsewhere). Read before ``pid`` is killed: orphans are adopted by another parent."""
    children = _children_by_parent()
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """``pid``'s process group and every process it started, those that left the group
    too: torchrun starts each rank in a session of its own, which killing the runner's
    group alone would leave measuring beside the next cell; a rank leading its own group
    takes that group along (its DataLoader workers). Stop signals wait meanwhile: a
    handler stopping us halfway would leave the ranks running, unseen once orphaned."""
    blocked = threading.current_thread() is threading.main_thread()
    if blocked:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        below = descendants(pid)
        for child in below:  # the escaped ones first, while they can still be found
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(child) == child:
                    os.killpg(child, sig)
                os.kill(child, sig)
        kill_group(pid, sig)
        # ``pid`` itself where it leads no group: an orphan adopted from a group whose
        # leader has exited (a double fork), which killing "its" group missed.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) != pid:
                os.kill(pid, sig)
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def end_adopted(ours: set[int], settle_s: float = 2.0) -> None:
    """Kill, with all they started, this process's children other than ``ours`` (those it
    started itself): the orphans it adopted (``adopt_orphans``); nothing without that.
    Scanned again until none is left, each reaped, for at most ``settle_s``: a process
    dying meanwhile (torchrun, killed with the runner's group) hands its children (the
    ranks) to us only as it dies, after a scan may have read them as its own."""
    if not _ADOPTING:
        return
    deadline = time.monotonic() + settle_s
    while True:
        adopted = [pid for pid in children(os.getpid()) if pid not in ours]
        if not adopted:
            return
        for pid in adopted:
            kill_tree(pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # a zombie now, or at the next scan
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


@contextlib.contextmanager
def _forwarding_signals(proc: subprocess.Popen, ours: set[int]) -> Iterator[None]:
    """While the child runs, SIGTERM/SIGHUP to us end its whole group first (Snakemake
    stops a job that way), and what we adopted of its tree (``end_adopted``; ``ours``:
    the children we started before it), then end us with the default action."""
    def handler(signum, frame):  # noqa: ARG001 (signal handler signature)
        if proc.returncode is None:  # reaped, its pid may be another process's now
            kill_tree(proc.pid)
        end_adopted(ours | {proc.pid})
        # The log's last line says why it ends here (a scheduler's stop left it bare).
        with contextlib.suppress(OSError, ValueError):
            what = _cut((" ".join(map(str, proc.args[:3])).splitlines() or [""])[0], 200)
            print(f"stopped by {signal.Signals(signum).name}: {what.strip()} and every "
                  "process it started were ended; no result", file=sys.stderr, flush=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    with stop_signals_handled(handler):
        yield


@contextlib.contextmanager
def _passing_on_signals(started: list[subprocess.Popen], received: list[int]
                        ) -> Iterator[None]:
    """While the child runs, SIGTERM/SIGHUP to us reach it as SIGTERM, and are noted in
    ``received`` for us to take once it has ended. Killing it instead would stop it
    where it stands (a conversion's temporary folder left behind, torchrun's ranks not
    stopped); not passing it on would have us wait for the child's whole work. Entered
    before the child starts (``started`` holds it once it has): a stop while it starts is
    noted, and passed on by the caller. A second stop, or one after the child has ended,
    ends us at once (the child killed if need be), by the handler we replaced: a child
    that does not stop, or a process it left holding its output, cannot keep us."""
    previous: dict[int, Any] = {}

    def handler(signum, frame):  # noqa: ARG001 (signal handler signature)
        proc = started[0] if started else None
        if not received and (proc is None or proc.poll() is None):
            received.append(signum)
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
            return
        # A second stop, or one once the child has ended (its output still draining, maybe
        # held open by a process it left): we end now, as the signal would have had us.
        if proc is not None and proc.poll() is None:
            proc.kill()
        signal.signal(signum, previous.get(signum, signal.SIG_DFL))
        signal.raise_signal(signum)

    with stop_signals_handled(handler) as replaced:
        previous.update(replaced)
        yield


# How a job is stopped: Snakemake and a cluster's time limit send SIGTERM, a closed
# terminal SIGHUP.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals_handled(handler: Callable[[int, Any], None]
                         ) -> Iterator[dict[int, Any]]:
    """``handler`` for STOP_SIGNALS inside the block, the previous handlers after it (the
    block is given them). A signal ignored (``nohup``) stays ignored. The signals handled
    are unblocked inside the block, the previous mask restored after it: a process started
    with them blocked (a child inherits its parent's mask) kept a stop pending and ran on.
    Outside the main thread, which alone may set handlers (Python's rule), the block runs
    with the handlers as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield {}
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    previous = {sig: old for sig, old in previous.items() if old is not signal.SIG_IGN}
    for sig in previous:
        signal.signal(sig, handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, previous) if previous else None
    try:
        yield dict(previous)
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, old in previous.items():
            signal.signal(sig, old)


# How long to wait for the rest of a child's output once it has exited: a process that
# left its group (setsid) may hold the pipes open forever.
DRAIN_S = 10.0


def supervised(cmd: Sequence[str], env: Mapping[str, str] | None = None, keep: int = 40,
               timeout_s: float | None = None, own_group: bool = True,
               death_signal: int | None = signal.SIGKILL,
               on_exit: Callable[[], None] | None = None) -> Ran:
    """Run ``cmd`` as ``run_tee`` does; with ``own_group`` in a new session whose whole
    group is killed on a timeout, an interrupt or a stop signal (SIGTERM, SIGHUP), with
    ``death_signal`` sent by the kernel when this process dies. Without ``own_group``
    a stop signal is passed on to the child as SIGTERM; once the child has ended, this
    process takes the signal itself (its handler, else the signal's default action ends
    it). ``on_exit`` runs the moment the child has exited, before anything else (the
    launcher takes the child's result then: nothing written later by a process that
    escaped the group counts)."""
    received: list[int] = []
    started: list[subprocess.Popen] = []
    with contextlib.ExitStack() as signals:
        if not own_group:  # before the child starts: a stop meanwhile is passed on too
            signals.enter_context(_passing_on_signals(started, received))
        ran = _supervise(cmd, env, keep, timeout_s, own_group, death_signal, on_exit,
                         started, received, signals)
    if received:  # the child has ended as asked: now we end as the signal would have had us
        signal.raise_signal(received[0])
    return ran


def _supervise(cmd: Sequence[str], env: Mapping[str, str] | None, keep: int,
               timeout_s: float | None, own_group: bool, death_signal: int | None,
               on_exit: Callable[[], None] | None, started: list[subprocess.Popen],
               received: list[int], signals: contextlib.ExitStack) -> Ran:
    """``supervised``'s work, inside its stop-signal handling (``signals``)."""
    ours = set(children(os.getpid())) if own_group and _ADOPTING else set()
    try:
        proc = subprocess.Popen(
            list(cmd), env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
            start_new_session=own_group,
            preexec_fn=None if death_signal is None else child_setup(sig=death_signal))
    except OSError as exc:
        return Ran(127, [f"cannot start {cmd[0]}: {exc.strerror}"])
    started.append(proc)
    if received:  # stopped while it started
        proc.send_signal(signal.SIGTERM)
    if own_group:
        signals.enter_context(_forwarding_signals(proc, ours))
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    threads = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout, None),
                                daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, sys.stderr, tail),
                                daemon=True)]
    for t in threads:
        t.start()
    timed_out = False

    def stop() -> None:
        if own_group:
            kill_tree(proc.pid)
        else:
            proc.kill()

    # Through the output's end too: a signal while the last lines drain is passed on.
    try:
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop()
            rc = proc.wait()
        if on_exit is not None:
            on_exit()
    except KeyboardInterrupt:
        stop()
        proc.wait()
        raise
    finally:
        if own_group:
            kill_group(proc.pid)  # what the runner left behind must not measure on
            end_adopted(ours)  # and what left its group, orphaned once the runner ended
        # Bounded where a process left behind may hold the pipes: DRAIN_S for both pipes
        # together, not each (a leftover holding both cost twice that).
        drained_by = time.monotonic() + DRAIN_S
        for t in threads:
            t.join(max(0.0, drained_by - time.monotonic()) if own_group or received
                   else None)
    return Ran(rc, list(tail), timed_out)


def exit_words(rc: int) -> str:
    """An exit code in words: 'exited with code 3', 'killed by SIGBUS (Bus error)'."""
    if rc >= 0:
        return f"exited with code {rc}"
    try:
        sig = signal.Signals(-rc)
    except ValueError:
        return f"killed by signal {-rc}"
    description = signal.strsignal(sig) or ""
    return f"killed by {sig.name}" + (f" ({description})" if description else "")


def errno_words(exc: OSError) -> str:
    """An OSError in one line that always names its cause (ENOSPC: 'No space left on
    device'), and its file when it has one."""
    why = exc.strerror or (os.strerror(exc.errno) if exc.errno else "") or str(exc)
    name = errno.errorcode.get(exc.errno or 0, "")
    where = f": {exc.filename}" if exc.filename else ""
    return f"{why}{f' ({name})' if name else ''}{where}"


_TRACEBACK = "Traceback (most recent call last):"


def last_error_line(lines: Sequence[str]) -> str:
    """The most telling line of a failed child's stderr, printable and cut to
    ERROR_LINE_CHARS: the exception line of its last Python traceback (a message of
    several lines ended with its last, not the exception), else the last non-empty line."""
    found = ""
    start = max((i for i, line in enumerate(lines) if line.strip() == _TRACEBACK),
                default=None)
    if start is not None:
        # past the frames (indented): the first line at the margin names the exception
        found = next((line for line in lines[start + 1:]
                      if line.strip() and not line[:1].isspace()), "")
    if not found:
        found = next((line for line in reversed(lines) if line.strip()), "")
    printable = "".join(c if c.isprintable() else " " for c in found.strip())
    return _cut(" ".join(printable.split()), ERROR_LINE_CHARS)
