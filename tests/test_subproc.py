"""Stop signals around ``subproc.run_tee``: a child that is part of this process's own work
(torchrun under a runner, a conversion in MXNet's interpreter) gets SIGTERM passed on and
stops its own way; nothing it leaves behind can keep this process from stopping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

LEAVES_A_PROCESS_HOLDING_ITS_OUTPUT = """
from dlbench import subproc
subproc.run_tee(["bash", "-c", "setsid sleep 60 & echo $!; exit 0"])
print("run_tee returned", flush=True)
"""


def _python(script: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_a_stop_after_the_child_ended_is_not_kept_waiting_by_what_it_left():
    """The child has exited but a process it started (setsid) holds its output open: the
    stop ends this process at once, by the signal, instead of waiting for that process."""
    proc = _python(LEAVES_A_PROCESS_HOLDING_ITS_OUTPUT)
    left = int(proc.stdout.readline())
    try:
        time.sleep(0.5)  # the child (bash) has exited; its output is still open
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == -signal.SIGTERM
        assert "run_tee returned" not in out
    finally:
        proc.kill()
        os.kill(left, signal.SIGKILL)


CLEANS_UP_SLOWLY = """
import sys, time
from dlbench.datasets.__main__ import _exit_on_termination
with _exit_on_termination():  # as the conversion's main: its writers' cleanup inside
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        time.sleep(0.5)  # removing a temporary folder takes time
        open(sys.argv[1], "w").write("cleaned")
"""

PASSES_STOPS_ON = """
import sys
from dlbench import subproc
rc, _ = subproc.run_tee([sys.executable, "-c", sys.argv[1], sys.argv[2]])
"""


def test_a_stop_sent_to_the_whole_group_lets_the_child_finish_its_cleanup(tmp_path):
    """A cluster's stop (scancel, a time limit) reaches every process of the job: the child
    gets it directly and again from its parent. The second must not end the child while it
    removes its temporary folder (its handler ignores stops that follow; SIGKILL still
    ends it)."""
    marker = tmp_path / "cleaned"
    proc = subprocess.Popen([sys.executable, "-c", PASSES_STOPS_ON, CLEANS_UP_SLOWLY,
                             str(marker)], env={**os.environ, "PYTHONPATH": SRC},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert marker.read_text() == "cleaned", err


def test_a_second_stop_ends_a_child_that_does_not_stop():
    """A child that ignores SIGTERM keeps this process no longer than the next stop."""
    script = ('import subprocess, sys\nfrom dlbench import subproc\n'
              'subproc.run_tee([sys.executable, "-c", "import signal, time; '
              'signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); '
              'time.sleep(60)"])\n')
    proc = _python(script)
    try:
        assert proc.stdout.readline().strip() == "1"
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # the first is passed on: it waits for the child
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
        assert proc.returncode == -signal.SIGTERM
    finally:
        proc.kill()


STOPPED_WHILE_STARTING = """
import os, signal, subprocess, sys, time
from dlbench import subproc

real_popen = subprocess.Popen

def popen(*args, **kwargs):  # the stop arrives once the child runs, before run_tee has it
    child = real_popen(*args, **kwargs)
    while not os.path.exists(sys.argv[2] + ".started"):
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)
    return child

subprocess.Popen = popen
subproc.run_tee([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print("run_tee returned", flush=True)
"""

RECORDS_ITS_STOP = """
import signal, sys, time

def stopped(signum, frame):
    open(sys.argv[1], "w").write(signal.Signals(signum).name)
    sys.exit(128 + signum)

signal.signal(signal.SIGTERM, stopped)
open(sys.argv[1] + ".started", "w").close()
time.sleep(30)
"""


def test_a_stop_while_the_child_starts_is_passed_on_once_it_has(tmp_path):
    """A stop that comes as the child starts, before run_tee holds it (the case of a stop
    sent as soon as the child shows it runs), is passed on once it does; before, it ended
    this process by the signal and left the child running."""
    marker = tmp_path / "stopped-by"
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_WHILE_STARTING, RECORDS_ITS_STOP,
                             str(marker)], env={**os.environ, "PYTHONPATH": SRC},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM, err
    assert "run_tee returned" not in out
    assert marker.read_text() == "SIGTERM"


def test_a_stop_signal_ignored_under_nohup_stays_ignored(tmp_path):
    """Started with SIGHUP ignored (nohup), run_tee leaves it so: a closed terminal does
    not stop the work, nor is anything passed on; SIGTERM still does both."""
    marker = tmp_path / "stopped-by"
    script = ('import sys\nfrom dlbench import subproc\n'
              'subproc.run_tee([sys.executable, "-c", sys.argv[1], sys.argv[2]])\n')
    proc = subprocess.Popen([sys.executable, "-c", script, RECORDS_ITS_STOP, str(marker)],
                            env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{marker}.started").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert proc.poll() is None and not marker.exists()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM
    assert marker.read_text() == "SIGTERM"


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for a parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")


def _ends(pid: int, within_s: float = 5.0) -> bool:
    """Whether ``pid`` stops running within ``within_s`` (a kill takes a moment)."""
    deadline = time.monotonic() + within_s
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def test_a_timed_out_child_is_killed_with_what_it_started_in_sessions_of_their_own(tmp_path):
    """torchrun starts each rank in a session of its own (setsid), out of the runner's
    process group: a runner stopped at its time limit takes those with it, else they keep
    computing beside the next cell."""
    from dlbench import subproc

    pid_file = tmp_path / "rank.pid"
    ran = subproc.supervised(["bash", "-c", f"setsid sleep 120 & echo $! > {pid_file}; wait"],
                             timeout_s=3)
    rank = int(pid_file.read_text())
    try:
        assert ran.timed_out
        assert _ends(rank)
    finally:
        if _running(rank):
            os.kill(rank, signal.SIGKILL)


ADOPTS_WHAT_ITS_CHILD_LEFT = """
import sys
from dlbench import subproc
assert subproc.adopt_orphans()
subproc.supervised(["bash", "-c", sys.argv[2].replace("{}", sys.argv[1])])
print(len(subproc.children(__import__("os").getpid())), flush=True)
"""


@pytest.mark.parametrize("leaves", ["setsid sleep 120 & echo $! > {}; exit 0",
                                    # a double fork: the orphan's group leader has exited,
                                    # so killing "its" group missed it (it ran on for good)
                                    "setsid bash -c 'sleep 120 & echo $! > {}; exit 0'; "
                                    "sleep 0.2; exit 0"])
def test_an_adopting_supervisor_ends_what_its_child_left_in_a_session_of_its_own(tmp_path,
                                                                                  leaves):
    """A child that exits while a process it started in a session of its own runs on
    leaves it to us once we adopt orphans (``adopt_orphans``): ``supervised`` ends it,
    and reaps it, along with the child."""
    pid_file = tmp_path / "left.pid"
    out = subprocess.run([sys.executable, "-c", ADOPTS_WHAT_ITS_CHILD_LEFT, str(pid_file), leaves],
                         env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                         text=True, timeout=60)
    left = int(pid_file.read_text())
    try:
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "0"  # nothing left, not even a zombie
        assert not _running(left)
    finally:
        if _running(left):
            os.kill(left, signal.SIGKILL)


LEAVES_A_RANK_UNDER_A_DYING_TORCHRUN = """
import os, sys
from dlbench import subproc
assert subproc.adopt_orphans()
RUNNER = '''
import os, signal, subprocess, sys, time
torchrun = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; r = subprocess.Popen(['setsid', 'sleep', '120']); "
    "open(sys.argv[1], 'w').write(str(r.pid)); time.sleep(120)", sys.argv[1]])
while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
    time.sleep(0.02)
os.kill(os.getpid(), signal.SIGKILL)  # the runner, killed (out of memory)
'''
for i in range(3):
    subproc.supervised([sys.executable, "-c", RUNNER, f"{sys.argv[1]}.{i}"])
    print(len(subproc.children(os.getpid())), flush=True)
"""


def test_ranks_handed_over_by_a_dying_torchrun_are_ended_and_reaped(tmp_path):
    """The runner is killed; torchrun, in its group, is killed with it, and hands its rank
    (a session of its own) to us only as it dies: the rank is ended all the same, and
    nothing is left, not even a zombie."""
    base = tmp_path / "rank"
    out = subprocess.run([sys.executable, "-c", LEAVES_A_RANK_UNDER_A_DYING_TORCHRUN,
                          str(base)], env={**os.environ, "PYTHONPATH": SRC},
                         capture_output=True, text=True, timeout=120)
    ranks = [int(p.read_text()) for p in sorted(tmp_path.glob("rank.*"))]
    try:
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["0", "0", "0"]
        assert len(ranks) == 3 and not any(map(_running, ranks))
    finally:
        for rank in ranks:
            if _running(rank):
                os.kill(rank, signal.SIGKILL)


STOPPED_WHILE_ITS_RUNNER_LIVES = """
import sys
from dlbench import subproc
assert subproc.adopt_orphans()
subproc.supervised([sys.executable, "-c", '''
import subprocess, sys, time
subprocess.run(["bash", "-c", "setsid sleep 120 & echo $! > " + sys.argv[1]])
time.sleep(120)
''', sys.argv[1]])
"""


def test_a_stop_ends_what_was_adopted_while_the_runner_still_ran(tmp_path):
    """torchrun died, handing its rank to us, while the runner runs on; a SIGTERM then
    ends the runner's tree, which the rank is no longer part of, and us: the rank too."""
    pid_file = tmp_path / "rank.pid"
    proc = _python(STOPPED_WHILE_ITS_RUNNER_LIVES.replace("sys.argv[1]", repr(str(pid_file))))
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        rank = int(pid_file.read_text())
        time.sleep(0.3)  # bash has exited: the rank is ours now
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == -signal.SIGTERM
        assert _ends(rank)
        # the log's last line says why it ended (a scheduler's stop left it bare)
        assert proc.stderr.read().strip().splitlines()[-1].startswith(
            f"stopped by SIGTERM: {sys.executable} -c ")
    finally:
        proc.kill()
        if pid_file.exists() and pid_file.read_text().strip() and \
                _running(rank := int(pid_file.read_text())):
            os.kill(rank, signal.SIGKILL)


def test_the_error_line_is_the_exception_of_a_traceback_printable_and_cut():
    """A runner that died with RuntimeError("boom\\nsecond line") was recorded as "second
    line"; a 50 MB line on stderr became a 50 MB result (and the launcher's memory), and
    control characters reached the row."""
    from dlbench import subproc

    tail = ["warming up", "Traceback (most recent call last):", '  File "x.py", line 1',
            "    main()", "RuntimeError: boom", "second line"]
    assert subproc.last_error_line(tail) == "RuntimeError: boom"
    chained = [*tail, "", "During handling of the above exception, another exception "
               "occurred:", "", "Traceback (most recent call last):", '  File "y.py"',
               "ValueError: worse"]
    assert subproc.last_error_line(chained) == "ValueError: worse"
    assert subproc.last_error_line(["", "Killed", ""]) == "Killed"
    assert subproc.last_error_line(["bad \x00bytes\x1b[31mred"]) == "bad bytes [31mred"
    long = subproc.last_error_line(["x" * 10**6])
    assert len(long) == subproc.ERROR_LINE_CHARS and long.endswith("…")


def test_a_huge_stderr_line_is_kept_cut_in_the_tail(tmp_path):
    from dlbench import subproc

    ran = subproc.supervised([sys.executable, "-c",
                              "import sys; sys.stderr.write('y' * 10**6 + '\\n'); sys.exit(3)"])
    assert ran.rc == 3 and len(ran.tail[-1]) == subproc.TAIL_LINE_CHARS
